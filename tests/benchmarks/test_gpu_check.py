"""The device check has one shot on a lent GPU. Its dry run (tiny sizes on the CPU, mlflow and
dvc unimportable, as on the GPU machine) passes every part and prints its summary within the
deadline; SIGTERM, as `timeout` sends it, or the deadline, in any part, still ends with the
summary line naming the parts that finished, and leaves no process behind; without CUDA it
stops at once. The run machinery (gating on the time left, results written as each part ends,
stops) is checked on a fake clock."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
import torch
from helpers.bert import REPO
from helpers.tiny_pretrain import build_data

sys.path.insert(0, str(REPO / "benchmarks"))
from gpu_check_run import (  # the benchmarks folder is not a package
    CheckRecord,
    Deadline,
    Part,
    Stop,
    StopSignals,
    run_parts,
    run_subprocess,
    stop_from,
)
from gpu_check_syncs import count_step_syncs, datapath_check

SCRIPT = REPO / "benchmarks" / "gpu_check.sh"
ENV = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
# the dry run's parts, in their order (device comes first in every run)
PARTS = ["data", "pretrain_cpu", "resume_cpu", "ddp_gloo", "step_s32_eager", "fp16",
         "step_s32_compiled", "datapath", "phase2_cpu", "step_s64_eager", "step_s64_compiled"]


LAUNCHED: list[subprocess.Popen] = []


def start(*args: str) -> subprocess.Popen:
    """`bash gpu_check.sh ARGS`, stderr into stdout (the markers and the logs, in order)."""
    proc = subprocess.Popen(["bash", str(SCRIPT), *args], cwd=REPO, env=ENV, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    LAUNCHED.append(proc)
    return proc


@pytest.fixture(autouse=True)
def _no_check_left_running():
    """A test that fails mid-way must not leave a check running (`timeout` leads its group)."""
    yield
    while LAUNCHED:
        proc = LAUNCHED.pop()
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                proc.kill()
            proc.wait()


def summary(output: str) -> tuple[str, dict[str, str]]:
    """The last line, and its key=value pairs."""
    last = output.strip().splitlines()[-1]
    return last, dict(token.split("=", 1) for token in last.split() if "=" in token)


def read_until(proc: subprocess.Popen, marker: str) -> list[str]:
    """Lines of `proc` up to the first that holds `marker` (the check goes on meanwhile)."""
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if marker in line:
            return lines
    raise AssertionError(f"no {marker!r} in:\n{''.join(lines)[-3000:]}")


def processes_in(folder: Path) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter():
        try:
            if Path(process.cwd()) == folder:
                found.append(process)
        except (psutil.Error, OSError):
            continue
    return found


def wait_until_gone(folder: Path, timeout: float = 60.0) -> None:
    """No process left working in `folder` (polled: killed processes take a moment to go)."""
    end = time.monotonic() + timeout
    while processes_in(folder) and time.monotonic() < end:
        time.sleep(0.1)
    assert not processes_in(folder), [p.cmdline() for p in processes_in(folder)]


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """The whole dry run (minutes)."""
    folder = tmp_path_factory.mktemp("gpu_check")
    results = folder / "results.json"
    proc = start("--dry-run", "--workdir", str(folder / "work"), "--results", str(results))
    output, _ = proc.communicate(timeout=600)
    return proc.returncode, output, folder / "work", results


DRY_RUN_TEST = "test_dry_run_passes_every_part_within_its_deadline"


@pytest.fixture(scope="module")
def dry_run_data(request, tmp_path_factory) -> Path:
    """A work folder whose data a dry run made, kept: later runs take its data. The whole dry
    run's when its test runs too (this file goes to one pytest worker whole), else a dry run
    of the data part alone (seconds)."""
    if any(item.name == DRY_RUN_TEST for item in request.session.items):
        work = request.getfixturevalue("dry_run")[2]
        if (work / "data" / ".gpu_check-stamp").is_file():  # its data part passed
            return work
    folder = tmp_path_factory.mktemp("gpu_check_data")
    proc = start("--dry-run", "--parts", "data", "--workdir", str(folder / "work"),
                 "--results", str(folder / "results.json"))
    output, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, output[-3000:]
    return folder / "work"


def work_copy(dry_run_data: Path, tmp_path: Path) -> Path:
    """A work folder holding the data part's data only (not the phase2 part's samples)."""
    work = tmp_path / "work"
    shutil.copytree(dry_run_data / "data", work / "data",
                    ignore=shutil.ignore_patterns("two_phase_samples"))
    return work


@pytest.mark.slow
def test_dry_run_passes_every_part_within_its_deadline(dry_run):
    code, output, _, results = dry_run
    assert code == 0, output[-5000:]
    last, values = summary(output)
    assert last.startswith("gpu_check (dry run): device=ok data=ok"), last
    statuses = last.split(": ", 1)[1].split(" | ")[0].split()
    assert statuses == [f"{name}=ok" for name in ["device", *PARTS]], last  # in this order
    assert int(values["seconds"]) <= int(values["deadline"]) == 300
    # each comparison named, with its figures (the executed-FLOPs one the headline)
    for tag in ("s32_eager", "s64_eager", "s32_compiled", "s64_compiled"):
        for figure in ("seq_s", "exec_util", "mfu6n", "vs_hf"):
            assert f"{tag}_{figure}" in values, (tag, figure, last)
    for tag in ("s32_compiled", "s64_compiled"):  # beside them, ours unpadded, compiled
        for figure in ("unpadded_seq_s", "unpadded_mfu6n", "unpadded_vs_padded"):
            assert f"{tag}_{figure}" in values, (tag, figure, last)
    assert values["s32_compiled_hf_fullgraph"] == "yes" and values["datapath_model"] == "compiled"
    assert values["sdpa"] == "math"  # pinned for both models (on a GPU: efficient)
    assert json.loads(results.read_text())["summary"] == last
    assert "train loss nan" not in output


@pytest.mark.parametrize("part", PARTS)
def test_sigterm_in_any_part_prints_the_summary_of_what_finished(dry_run_data, tmp_path,
                                                                  part):
    # `timeout` forwards SIGTERM to the check and its process group; here at the part's marker
    work = work_copy(dry_run_data, tmp_path) if part != "data" else tmp_path / "work"
    results = tmp_path / "results.json"
    proc = start("--dry-run", "--parts", f"data,{part}", "--workdir", str(work),
                 "--results", str(results))
    before = read_until(proc, f">> {part} (")
    proc.send_signal(signal.SIGTERM)
    output = "".join(before) + proc.communicate(timeout=120)[0]
    last, values = summary(output)
    assert proc.returncode == 128 + signal.SIGTERM, output[-3000:]
    assert values["device"] == "ok" and values[part] == "stopped", last
    if part != "data":
        assert values["data"] == "ok", last  # what finished before
    assert values["stopped_by"] == "SIGTERM", last
    saved = json.loads(results.read_text())
    assert saved["summary"] == last and saved["parts"][part]["status"] == "stopped"
    wait_until_gone(work)
    # what a part had started was ended with it, not left to finish on its own
    assert not (work / "metrics" / "ddp.json").exists()


def torchrun_worker(proc: subprocess.Popen) -> psutil.Process:
    """The DDP part's worker process (under torchrun, under the check), once it runs."""
    end = time.monotonic() + 120
    while time.monotonic() < end and proc.poll() is None:
        for child in psutil.Process(proc.pid).children(recursive=True):
            try:
                command = " ".join(child.cmdline())
            except psutil.Error:
                continue
            if "stages pretrain" in command and "torch.distributed.run" not in command:
                return child
        time.sleep(0.05)
    raise AssertionError("no torchrun worker started")


@pytest.mark.parametrize(("part", "marker", "signum", "status"), [
    # in the training loop, whose own handler takes SIGTERM (it checkpoints, then stops)
    ("pretrain_cpu", "step 3/6: val MLM loss", signal.SIGTERM, "stopped"),
    # while torchrun and its worker run, in a session of their own
    ("ddp_gloo", "worker", signal.SIGTERM, "stopped"),
    # the deadline (its SIGALRM) in the same two places
    ("pretrain_cpu", "step 3/6: val MLM loss", signal.SIGALRM, "cut"),
    ("ddp_gloo", "worker", signal.SIGALRM, "cut"),
])
def test_a_stop_inside_a_running_part(dry_run_data, tmp_path, part, marker, signum, status):
    work = work_copy(dry_run_data, tmp_path)
    proc = start("--dry-run", "--parts", f"data,{part}", "--workdir", str(work),
                 "--results", str(tmp_path / "results.json"))
    before = read_until(proc, marker if marker != "worker" else f">> {part} (")
    if marker == "worker":
        torchrun_worker(proc)
    check = psutil.Process(proc.pid).children()[0]  # python, under timeout
    target = proc.pid if signum == signal.SIGTERM else check.pid  # SIGALRM: as its own timer
    os.kill(target, signum)
    output = "".join(before) + proc.communicate(timeout=120)[0]
    last, values = summary(output)
    assert values["data"] == "ok" and values[part] == status, output[-3000:]
    reason = "deadline" if signum == signal.SIGALRM else "SIGTERM"
    assert values["stopped_by"] == reason, last
    assert proc.returncode == (124 if signum == signal.SIGALRM else 128 + signum), last
    wait_until_gone(work)
    # torchrun and its worker were ended, not left to finish on their own
    assert not (work / "metrics" / "ddp.json").exists()


def test_a_part_that_would_not_fit_the_deadline_is_skipped(dry_run_data, tmp_path):
    # the compiled comparison's estimate (2 compiles + its steps: 20 s in a dry run) cannot fit
    # a 20 s deadline once the device part ran: skipped, and the run is still a success
    work = work_copy(dry_run_data, tmp_path)
    proc = start("--dry-run", "--deadline", "20", "--parts", "data,step_s32_compiled",
                 "--workdir", str(work), "--results", str(tmp_path / "results.json"))
    output = proc.communicate(timeout=120)[0]
    last, values = summary(output)
    assert proc.returncode == 0, output[-3000:]
    assert values["data"] == "ok" and values["step_s32_compiled"] == "skipped", last
    assert int(values["seconds"]) <= 20


def test_without_cuda_it_stops_at_once_with_the_summary(tmp_path):
    proc = start("--results", str(tmp_path / "results.json"))  # no --dry-run, on this CPU
    output = proc.communicate(timeout=120)[0]
    last, values = summary(output)
    assert proc.returncode == 1, output[-3000:]
    assert "no CUDA device" in output
    assert values["device"] == "FAIL" and values["pretrain_cuda"] == "not_run", last
    assert set(values[name] for name in values if name.startswith(("step_", "ddp_"))) == {
        "not_run"}


# ------------------------------------------------------------------ the run machinery
class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_parts_are_gated_on_the_time_left_and_recorded_as_each_ends(tmp_path):
    clock = FakeClock()
    record = CheckRecord("gpu_check", Deadline(100, clock), tmp_path / "results.json")
    measured: dict[str, float] = {}
    seen: dict[str, dict] = {}

    def part(name: str, seconds: float, fail: bool = False, measures: float | None = None):
        def run() -> str:
            seen[name] = json.loads(record.path.read_text())["parts"]  # the file, as it starts
            clock.now += seconds
            if measures is not None:
                measured["compile"] = measures
            if fail:
                raise ValueError("broken\nsecond line")
            return f"{name} done"

        return run

    parts = [Part("a", part("a", 10, measures=40.0), lambda: 20),
             Part("b", part("b", 30, fail=True), lambda: 30),  # fails: the others still run
             Part("c", part("c", 5), lambda: measured.get("compile", 5) * 2),  # 80 > 60 left
             Part("d", part("d", 50), lambda: 60),  # fits exactly: 60 left
             Part("e", part("e", 1), lambda: 11)]  # 10 left
    record.plan([p.name for p in parts])
    lines: list[str] = []
    run_parts(parts, record, say=lines.append)
    statuses = {name: o.status for name, o in record.parts.items()}
    assert statuses == {"a": "ok", "b": "FAIL", "c": "skipped", "d": "ok", "e": "skipped"}
    assert record.parts["b"].detail == "ValueError: broken" and record.parts["d"].seconds == 50
    assert record.parts["c"].detail == "needs ~80 s, 60 s left"
    # the file said what had ended when each part began
    assert seen["b"]["a"]["status"] == "ok" and seen["b"]["b"]["status"] == "running"
    assert seen["d"]["c"]["status"] == "skipped" and seen["d"]["b"]["status"] == "FAIL"
    assert record.summary() == "gpu_check: a=ok b=FAIL c=skipped d=ok e=skipped | " \
                               "deadline=100 seconds=90"
    assert json.loads(record.path.read_text())["summary"] == record.summary()
    assert record.exit_code() == 1
    assert [line.split("] ")[1].split(" (")[0] for line in lines if ">>" in line] == [
        ">> a", ">> b", ">> d"]


class Interrupted(Exception):
    """As bertcore's TrainingInterrupted, and the CLI's error made of it: exit code 128 + N."""

    exit_code = 128 + signal.SIGTERM


@pytest.mark.parametrize(("raised", "status", "reason", "code"), [
    (Stop("deadline"), "cut", "deadline", 124),
    (Stop("SIGTERM", signal.SIGTERM), "stopped", "SIGTERM", 143),
    (Interrupted("interrupted by SIGTERM after step 3"), "stopped", "SIGTERM", 143),
    (KeyboardInterrupt(), "stopped", "SIGINT", 130),
])
def test_a_stop_marks_the_running_part_and_leaves_the_rest(tmp_path, raised, status, reason,
                                                           code):
    record = CheckRecord("gpu_check", Deadline(100, FakeClock()), tmp_path / "results.json")

    def stopping() -> str:
        raise raised

    parts = [Part("a", lambda: "fine", lambda: 1), Part("b", stopping, lambda: 1),
             Part("c", lambda: "never", lambda: 1)]
    record.plan([p.name for p in parts])
    with pytest.raises(Stop) as info:
        run_parts(parts, record, say=lambda line: None)
    record.stopped(info.value)
    assert {n: o.status for n, o in record.parts.items()} == {"a": "ok", "b": status,
                                                                "c": "not_run"}
    assert f"stopped_by={reason} " in record.summary() and record.exit_code() == code
    assert json.loads(record.path.read_text())["parts"]["b"]["status"] == status
    assert stop_from(ValueError("no")) is None


def test_signals_raise_stop_once_even_when_another_handler_took_them():
    with StopSignals(Deadline(600)):
        with pytest.raises(Stop) as info:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)  # the handler raises first
        assert info.value.reason == "SIGTERM" and info.value.status == "stopped"
        os.kill(os.getpid(), signal.SIGTERM)  # while stopping: noted only

    def stopped_after(first) -> dict[str, str]:
        """Run `first`, then a part that does nothing, until SIGTERM stops the check: the
        statuses of both."""
        record = CheckRecord("gpu_check", Deadline(600))
        parts = [Part("a", first, lambda: 1), Part("b", lambda: "", lambda: 1)]
        record.plan(["a", "b"])
        with StopSignals(record.deadline) as signals, pytest.raises(Stop, match="SIGTERM"):
            run_parts(parts, record, signals, say=lambda line: None)
        return {n: o.status for n, o in record.parts.items()}

    # a part whose own handler takes SIGTERM (as the training loop's) and finishes: the check
    # stops after it, not at its deadline
    taken = []

    def finishing_despite_sigterm() -> str:
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: taken.append(signum))
        os.kill(os.getpid(), signal.SIGTERM)
        signal.signal(signal.SIGTERM, previous)
        return "finished"

    assert stopped_after(finishing_despite_sigterm) == {"a": "ok", "b": "not_run"}
    assert taken == [signal.SIGTERM]
    # a part whose code swallows our Stop (`except BaseException`): the next boundary raises it
    def swallowing() -> str:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)
        except BaseException:  # as careless code might
            return "carried on"

    assert stopped_after(swallowing) == {"a": "ok", "b": "not_run"}
    with StopSignals(Deadline(0.05)), pytest.raises(Stop, match="deadline"):
        time.sleep(30)  # SIGALRM at the deadline interrupts whatever runs


def test_a_stop_while_a_subprocess_starts_still_ends_it(tmp_path, monkeypatch):
    # the signal lands inside Popen, after the fork (as SIGTERM did while torchrun started)
    started: list[subprocess.Popen] = []
    real_popen = subprocess.Popen

    def popen_then_signal(*args, **kwargs):
        started.append(real_popen(*args, **kwargs))
        os.kill(os.getpid(), signal.SIGTERM)
        return started[-1]

    monkeypatch.setattr(subprocess, "Popen", popen_then_signal)
    with StopSignals(Deadline(600)) as signals, pytest.raises(Stop, match="SIGTERM"):
        run_subprocess(["sleep", "30"], dict(os.environ), tmp_path / "log", signals)
    (child,) = started
    assert child.wait(timeout=10) == -signal.SIGTERM  # ended, not left running


# ------------------------------------------------- counting host syncs (CUDA, faked here)
class FakeCuda:
    """torch.cuda as the sync counting uses it, on the CPU: while sync debug mode is on, every
    read of a tensor warns as CUDA's does; the stream is busy unless a step says otherwise."""

    def __init__(self, monkeypatch):
        self.mode = "default"
        self.busy = True
        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
        monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", self.set_mode)
        monkeypatch.setattr(torch.cuda, "current_stream",
                            lambda device=None: SimpleNamespace(query=lambda: not self.busy))
        for name in ("tolist", "item"):
            monkeypatch.setattr(torch.Tensor, name, self.reading(getattr(torch.Tensor, name)))

    def set_mode(self, mode: str) -> None:
        self.mode = mode

    def reading(self, original):
        def read(tensor, *args, **kwargs):
            if self.mode == "warn":
                warnings.warn("called a synchronizing CUDA operation", stacklevel=2)
            return original(tensor, *args, **kwargs)

        return read


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory) -> Path:
    return build_data(tmp_path_factory.mktemp("tiny"))


def test_syncs_are_the_total_over_the_steps_of_fit_fed_by_the_data_path(tiny_data, monkeypatch):
    from helpers.trainer import make_trainer
    from torch._dynamo.utils import counters

    fake = FakeCuda(monkeypatch)
    trainer = make_trainer(tiny_data, max_steps=8, log_every=100)
    train_step = trainer.train_step

    def step(micro_batches, stop=False, learning_rate=None):
        result = train_step(micro_batches, stop, learning_rate)
        if trainer.step in (3, 6):
            result.values.sum().item()  # a host read planted in steps 3 and 6
        if trainer.step == 6:
            counters["stats"]["unique_graphs"] += 1  # as if dynamo compiled in step 6
        fake.busy = trainer.step != 5  # step 5 returns with the stream idle
        return result

    monkeypatch.setattr(trainer, "train_step", step)
    found = datapath_check(trainer, trainer.batches, 8, SimpleNamespace(type="cuda"))
    # steps 2..8 but 6 (it compiled); step 1 follows fit's own read; the read after step 8 is
    # fit's logging
    assert (found.syncs, found.busy, found.steps, found.compiled_steps) == (1, 5, 6, 1)
    assert found.figures("datapath") == {"datapath_syncs": "1/6", "datapath_busy": "5/6"}
    with pytest.raises(AssertionError, match="1 host syncs in 6 steps, stream busy after 5"):
        found.require_none("fit")
    assert fake.mode == "default" and trainer.step == 8

    calls = []

    def one_read_in_three_steps():
        calls.append(1)
        fake.busy = True
        if len(calls) == 2:
            torch.ones(1).item()

    counted = count_step_syncs(one_read_in_three_steps, SimpleNamespace(type="cuda"), 3)
    assert (counted.syncs, counted.busy, counted.steps) == (1, 3, 3)  # the total, not 1 // 3
    assert count_step_syncs(one_read_in_three_steps, torch.device("cpu"), 3) is None
