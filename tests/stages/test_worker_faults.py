"""A worker process that dies (killed outright: `kill -9`, the kernel's OOM killer) never
hangs a stage: a pool's task runs again once in new workers and gives the same bytes, a
second death stops the stage with one line, nothing written; a DataLoader worker's death
stops pretraining as SIGTERM does, with a checkpoint; workers whose stage is killed end
quietly; a stage started by DVC stops when DVC goes."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import yaml
from helpers import dying_worker
from helpers.bert import (
    ONE_THREAD,
    REPO,
    TESTS,
    assert_one_line_error,
    finish_paused,
    fork_servers,
    pool_workers,
    run_bert,
    run_bert_paused,
    start_bert_paused,
)
from helpers.tiny_pretrain import build_data

from bertcore.common import pool
from bertcore.common.pool import TaskRunner, WorkerDied

# a pool's workers spawned, and forked by a fork server that imported their module
PRELOADS = [(), ("helpers.dying_worker",)]


def results_within(seconds: float, func, tasks, workers: int = 2, preload=()) -> list:
    """`list(run(func, tasks))` of a TaskRunner, in a thread that must end within `seconds`
    (a pool waiting for a dead worker's task would wait for ever)."""
    out: dict = {}

    def consume():
        try:
            with TaskRunner(workers, preload=preload) as run:
                out["results"] = list(run(func, tasks))
        except BaseException as error:  # handed to the test
            out["error"] = error

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the pool waits for the task of a worker that died"
    if "error" in out:
        raise out["error"]
    return out["results"]


@pytest.mark.parametrize("preload", PRELOADS)
def test_a_task_whose_worker_died_runs_again_and_the_results_stay_in_order(tmp_path, caplog,
                                                                            preload):
    marker = str(tmp_path / "died-once")
    tasks = [(n, 5, marker) for n in range(12)]
    with caplog.at_level("WARNING", logger="bertcore.common.pool"):
        results = results_within(60, dying_worker.square, tasks, preload=preload)
    assert results == [n * n for n in range(12)]
    assert Path(marker).exists()
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1, warnings
    assert "(killed by SIGKILL) died running task 6: " in warnings[0], warnings
    assert "task(s) in flight run again in new workers" in warnings[0], warnings


@pytest.mark.parametrize("preload", PRELOADS)
def test_a_worker_killed_while_sending_its_result_never_hangs_the_pool(tmp_path, caplog,
                                                                        preload, monkeypatch):
    # It leaves the pool's thread waiting for the rest of the message, for ever unless the
    # pool sees the dead worker and breaks the pool itself (here after 1 s, not 5 s, idle).
    monkeypatch.setattr(pool, "WEDGED_AFTER_S", 1.0)
    marker = str(tmp_path / "died-once")
    tasks = [(n, 5, marker) for n in range(12)]
    with caplog.at_level("WARNING", logger="bertcore.common.pool"):
        results = results_within(60, dying_worker.square_dying_while_sending, tasks,
                                 preload=preload)
    assert results == [n * n for n in range(12)]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1, warnings
    assert "(killed by SIGKILL) died running task 6: " in warnings[0], warnings


def test_a_worker_dying_again_on_a_retried_task_stops_with_its_pid_and_task():
    tasks = [(n, 4, "") for n in range(10)]  # task 4 (the 5th) kills its worker every time
    with pytest.raises(WorkerDied, match=r"^worker process \d+ \(killed by SIGKILL\) died "
                                         r"running task 5, which had run once already"):
        results_within(60, dying_worker.square, tasks)


def test_a_pool_of_long_tasks_stopped_ends_its_workers_at_once():
    """SIGTERM while two fine-tune-long tasks run (`long`: a minute each): the workers are
    ended then, not waited for."""

    from bertcore.common.interrupt import Interrupted, interrupt_on_signals

    runner = TaskRunner(2, long=True)
    threading.Timer(3, os.kill, (os.getpid(), signal.SIGTERM)).start()
    with interrupt_on_signals(), pytest.raises(Interrupted), runner as run:
        next(run(time.sleep, [60, 60]))
    assert runner.pool is None and len(runner.processes) == 2
    assert [p.exitcode for p in runner.processes.values()] == [-signal.SIGTERM] * 2


def outputs(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def corpus_repo(tmp_path: Path) -> Path:
    """A lines corpus of about 3 MB: a dozen tasks, each long enough to be running when
    the test kills its worker."""
    lines = [f"Sentence {i} of the corpus here, with a few words more." + (
        "" if i % 5 else "\n") for i in range(60000)]
    (tmp_path / "raw.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"corpus": {
        "source": "raw.txt", "format": "lines", "workers": 2}}))
    return tmp_path


def kill_a_worker(proc: subprocess.Popen) -> None:
    workers = pool_workers(proc.pid)
    assert workers, "no pool worker to kill"
    workers[0].kill()


@pytest.mark.slow
def test_kill_9_of_a_corpus_worker_retries_its_tasks_to_the_same_bytes(tmp_path):
    repo = corpus_repo(tmp_path)
    run_bert("corpus", "--out", "straight", cwd=repo, check=True)
    proc = run_bert_paused("corpus", at="bertcore.data.corpus.build:_document_parts",
                           cwd=repo, act=kill_a_worker)
    assert proc.returncode == 0, proc.stderr
    died = [line for line in proc.stderr.splitlines() if "died" in line]
    assert len(died) == 1 and "(killed by SIGKILL) died" in died[0], proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert outputs(repo / "data" / "corpus") == outputs(repo / "straight")


def test_a_samples_worker_dying_twice_stops_the_stage_and_keeps_its_output(tmp_path):
    data = build_data(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"samples": {
        "max_seq_length": 32, "dupe_factor": 2, "workers": 2}}))
    before = outputs(data / "samples")
    script = ("import sys, bertcore.data.samples.build as build\n"
              "from helpers import dying_worker\n"
              "build.pair_shard = dying_worker.pair_shard\n"
              "from bertstages.cli import cli\n"
              "cli(sys.argv[1:], prog_name='bert')\n")
    env = {**os.environ, **ONE_THREAD, "PYTHONPATH": f"{REPO}{os.pathsep}{TESTS}"}
    proc = subprocess.run([sys.executable, "-c", script, "samples"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert_one_line_error(proc, "(killed by SIGKILL) died running task 1 (pairing "
                                "val documents 0-", "which had run once already",
                          "nothing was written; rerun `bert samples` to start again", code=1)
    assert sum("run again in new workers" in line for line in proc.stderr.splitlines()) == 1
    assert outputs(data / "samples") == before
    assert not [p for p in data.iterdir() if ".tmp-" in p.name]


def test_the_workers_of_a_stage_killed_outright_end_quietly(tmp_path):
    repo = corpus_repo(tmp_path)
    proc, before = start_bert_paused("corpus", at="bertcore.data.corpus.build:_document_parts",
                                     signum=signal.SIGUSR1, cwd=repo)
    workers = pool_workers(proc.pid)
    assert workers
    proc.kill()
    stopped = finish_paused(proc, before)  # its stderr: until every worker has closed it
    assert "Traceback" not in stopped.stderr and "leaked" not in stopped.stderr, stopped.stderr
    assert stopped.stderr.strip() == "", stopped.stderr
    _, alive = psutil.wait_procs(workers, timeout=10)
    for orphan in alive:
        orphan.kill()
    assert alive == [], alive


def test_the_workers_forked_by_a_fork_server_end_with_their_stage_and_it_too():
    """A process whose pool forks its workers from a fork server (`preload`), killed
    outright: the server ends (no client left), and its workers with it (their parent)."""
    script = ("import time\n"
              "from bertcore.common.pool import TaskRunner\n"
              "with TaskRunner(2, long=True, preload=('json',)) as run:\n"
              "    next(run(time.sleep, [600, 600]))\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        deadline = time.monotonic() + 120  # for the server and its two workers to start
        while len(workers := pool_workers(proc.pid)) < 2 and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1]
            time.sleep(0.1)
        assert len(workers) == 2
        servers = fork_servers(proc.pid)
        assert len(servers) == 1
    finally:
        proc.kill()
    _, alive = psutil.wait_procs([*servers, *workers], timeout=20)
    for orphan in alive:
        orphan.kill()
    assert alive == [], alive
    stderr = proc.communicate(timeout=60)[1]  # open until its last process ends
    assert "Traceback" not in stderr, stderr


def test_a_worker_whose_parent_died_before_it_started_ends_at_once(tmp_path):
    """A spawned worker still starting when its parent is killed is adopted before it can ask
    to be signalled at its parent's death: it compares its parent with the pid the parent
    gave, and ends, instead of waiting for ever on a queue nobody writes to (a stage's
    stderr then never closes: seen under load)."""
    script = ("import os, signal\n"
              "from bertcore.common.interrupt import signal_when_parent_dies\n"
              "signal_when_parent_dies(signal.SIGTERM, parent=os.getppid() + 1)\n"
              "print('still running')\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == -signal.SIGTERM, (proc.returncode, proc.stdout, proc.stderr)
    assert "still running" not in proc.stdout


# A parent that starts `bert` (paused as start_bert_paused pauses it) and waits: killed, it
# leaves its child behind, as `dvc repro` does when SIGTERM reaches it alone.
LAUNCHER = (sys.executable, "-c",
            "import subprocess, sys; subprocess.run(sys.argv[1:])")


def test_a_stage_started_by_dvc_stops_when_dvc_goes(tmp_path):
    repo = corpus_repo(tmp_path)
    run_bert("corpus", cwd=repo, check=True)
    before = outputs(repo / "data" / "corpus")
    proc, seen = start_bert_paused("corpus", at="bertcore.data.corpus.build:_document_parts",
                                   signum=signal.SIGTERM, cwd=repo, launcher=LAUNCHER,
                                   env={"DVC_STAGE": "corpus", "DVC_ROOT": str(repo)})
    stage = psutil.Process(proc.pid).children()[0]
    proc.kill()  # the parent alone; the stage runs on as the launcher's orphan, unless ...
    try:
        stage.wait(timeout=60)
    finally:
        if stage.is_running():
            stage.kill()
    stopped = finish_paused(proc, seen)
    errors = [line for line in stopped.stderr.splitlines() if line.startswith("Error:")]
    assert errors == ["Error: interrupted by SIGTERM: nothing was written; rerun `bert "
                      "corpus` to start again"], stopped.stderr
    assert "Traceback" not in stopped.stderr, stopped.stderr
    assert outputs(repo / "data" / "corpus") == before
    assert not [p for p in (repo / "data").iterdir() if ".tmp-" in p.name]
