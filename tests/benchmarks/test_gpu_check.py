"""The device check has one shot on a lent GPU. Its dry run (tiny sizes on the CPU, mlflow and
dvc unimportable, as on the GPU machine) passes every part and prints its summary within the
deadline; SIGTERM, as `timeout` sends it, in any part, or a part's own time limit still ends
with the summary line naming the parts that finished, and leaves no process behind; without
CUDA it stops at once. The script's running of its parts (a failed part does not stop the
others, time limits, the deadline, signals, the results written as each part ends) is checked
with a fake part in place of `gpu_check.py` (seconds, no torch)."""

from __future__ import annotations

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
from gpu_check_syncs import count_step_syncs, datapath_check  # benchmarks/ is not a package

SCRIPT = REPO / "benchmarks" / "gpu_check.sh"
ENV = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
# the dry run's parts, in their order (device comes first in every run)
PARTS = ["data", "pretrain_cpu", "resume_cpu", "ddp_gloo", "step_s32_eager", "fp16",
         "step_s32_compiled", "datapath", "phase2_cpu", "step_s64_eager", "step_s64_compiled"]


LAUNCHED: list[subprocess.Popen] = []


def start(*args: str, env: dict | None = None) -> subprocess.Popen:
    """`bash gpu_check.sh ARGS`, stderr into stdout (the markers and the logs, in order)."""
    proc = subprocess.Popen(["bash", str(SCRIPT), *args], cwd=REPO, env={**ENV, **(env or {})},
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    LAUNCHED.append(proc)
    return proc


@pytest.fixture(autouse=True)
def _no_check_left_running():
    """A test that fails mid-way must not leave a check running (each part's `timeout` leads
    a group of its own, ended by the check's own SIGTERM)."""
    yield
    while LAUNCHED:
        proc = LAUNCHED.pop()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def results_lines(path: Path) -> dict[str, list[str]]:
    """The results file's part lines (`PART STATUS SECONDS DETAIL`) by part, and its last
    line (the summary) as "last"."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return {line.split()[0]: line.split()[1:] for line in lines[:-1]} | {"last": [lines[-1]]}


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
    """The whole dry run (minutes; a part a process, each importing torch: on two shared
    cores it may need more than the default deadline, 300 s)."""
    folder = tmp_path_factory.mktemp("gpu_check")
    results = folder / "results.txt"
    proc = start("--dry-run", "--workdir", str(folder / "work"), "--results", str(results),
                 env={"GPU_CHECK_DEADLINE": "900"})
    output, _ = proc.communicate(timeout=1000)
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
                 "--results", str(folder / "results.txt"))
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
    assert int(values["seconds"]) <= int(values["deadline"]) == 900
    # each comparison named, with its figures (the executed-FLOPs one the headline)
    for tag in ("s32_eager", "s64_eager", "s32_compiled", "s64_compiled"):
        for figure in ("seq_s", "exec_util", "mfu6n", "vs_hf"):
            assert f"{tag}_{figure}" in values, (tag, figure, last)
    for tag in ("s32_compiled", "s64_compiled"):  # beside them, ours unpadded, compiled
        for figure in ("unpadded_seq_s", "unpadded_mfu6n", "unpadded_vs_padded"):
            assert f"{tag}_{figure}" in values, (tag, figure, last)
    assert values["s32_compiled_hf_fullgraph"] == "yes" and values["datapath_model"] == "compiled"
    assert values["sdpa"] == "math"  # pinned for both models (on a GPU: efficient)
    saved = results_lines(results)
    assert saved.pop("last") == [last]
    assert list(saved) == ["device", *PARTS] and {v[0] for v in saved.values()} == {"ok"}
    assert "train loss nan" not in output


@pytest.mark.parametrize("part", PARTS)
def test_sigterm_in_any_part_prints_the_summary_of_what_finished(dry_run_data, tmp_path,
                                                                  part):
    # SIGTERM to the check, as `timeout` or a session's end sends it; here at the part's marker
    work = work_copy(dry_run_data, tmp_path) if part != "data" else tmp_path / "work"
    results = tmp_path / "results.txt"
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
    saved = results_lines(results)
    assert saved["last"] == [last] and saved[part][0] == "stopped" and saved[part][2:] == [
        "SIGTERM"]
    assert saved["device"][0] == "ok" and (part == "data" or saved["data"][0] == "ok")
    wait_until_gone(work)


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


def part_timeout(proc: subprocess.Popen) -> psutil.Process:
    """The `timeout` that runs the current part (a child of the check's script)."""
    return next(p for p in psutil.Process(proc.pid).children() if p.name() == "timeout")


@pytest.mark.parametrize(("part", "marker", "signum", "status"), [
    # in the training loop, whose own handler takes SIGTERM (it checkpoints, then stops)
    ("pretrain_cpu", "step 3/6: val MLM loss", signal.SIGTERM, "stopped"),
    # while torchrun and its worker run, torchrun's worker in a session of its own
    ("ddp_gloo", "worker", signal.SIGTERM, "stopped"),
    # the part's time limit (the SIGALRM of its `timeout`) in the same two places
    ("pretrain_cpu", "step 3/6: val MLM loss", signal.SIGALRM, "cut"),
    ("ddp_gloo", "worker", signal.SIGALRM, "cut"),
])
def test_a_stop_inside_a_running_part(dry_run_data, tmp_path, part, marker, signum, status):
    work = work_copy(dry_run_data, tmp_path)
    proc = start("--dry-run", "--parts", f"data,{part}", "--workdir", str(work),
                 "--results", str(tmp_path / "results.txt"))
    before = read_until(proc, marker if marker != "worker" else f">> {part} (")
    if marker == "worker":
        torchrun_worker(proc)
    # SIGTERM to the check, as `timeout` or a user sends it; SIGALRM as the part's own timer
    os.kill(proc.pid if signum == signal.SIGTERM else part_timeout(proc).pid, signum)
    output = "".join(before) + proc.communicate(timeout=120)[0]
    last, values = summary(output)
    assert values["data"] == "ok" and values[part] == status, output[-3000:]
    if signum == signal.SIGTERM:
        assert values["stopped_by"] == "SIGTERM", last
    else:  # a part cut at its limit ends that part only: the check is not stopped
        assert "stopped_by" not in values, last
        assert results_lines(tmp_path / "results.txt")[part][0] == "cut", last
    assert proc.returncode == (124 if signum == signal.SIGALRM else 128 + signum), last
    wait_until_gone(work)
    # torchrun and its worker were ended, not left to finish on their own
    assert not (work / "metrics" / "ddp.json").exists()


def test_without_cuda_it_stops_at_once_with_the_summary(tmp_path):
    proc = start("--results", str(tmp_path / "results.txt"))  # no --dry-run, on this CPU
    output = proc.communicate(timeout=120)[0]
    last, values = summary(output)
    assert proc.returncode == 1, output[-3000:]
    assert "no CUDA device" in output
    assert values["device"] == "FAIL" and values["pretrain_cuda"] == "not_run", last
    assert set(values[name] for name in values if name.startswith(("step_", "ddp_"))) == {
        "not_run"}


# ------------------------------------------------------- the script's running of its parts
FAKE_PART = """#!/usr/bin/env bash
# as `PYTHON -u gpu_check.py PART --out DIR --dry-run`: FAIL_PART fails, SLOW_PART sleeps
# (STUBBORN: ignoring SIGTERM) after a copy of the results file as it is then
part=$3 out=$5
echo "$part ran" >>"$out/../ran"
if [ "$part" = "${FAIL_PART:-}" ]; then
  echo "ValueError: broken" >"$out/$part.detail"; echo traceback >&2; exit 1
fi
if [ "$part" = "${SLOW_PART:-}" ]; then
  cp "$RESULTS" "$RESULTS.then"
  if [ -n "${STUBBORN:-}" ]; then trap '' TERM; fi
  echo "$part sleeps"
  sleep 60
fi
echo "$part done" >"$out/$part.detail"
if [ "$part" = device ]; then echo "torch=fake sdpa=math" >"$out/device.figures"
else echo "${part}_figure=1" >"$out/$part.figures"; fi
"""


def fake_check(tmp_path: Path, *args: str, **env: str) -> subprocess.Popen:
    """The dry run with FAKE_PART in place of gpu_check.py (`PYTHON`), in a kept work folder."""
    fake = tmp_path / "fake_python"
    fake.write_text(FAKE_PART, encoding="utf-8")
    fake.chmod(0o755)
    return start("--dry-run", "--workdir", str(tmp_path / "work"),
                 "--results", str(tmp_path / "results.txt"), *args,
                 env={"PYTHON": str(fake), "RESULTS": str(tmp_path / "results.txt"), **env})


def test_a_failed_part_is_reported_and_the_others_still_run(tmp_path):
    proc = fake_check(tmp_path, FAIL_PART="resume_cpu")
    output = proc.communicate(timeout=120)[0]
    last, values = summary(output)
    assert proc.returncode == 1, output
    assert {name: values[name] for name in ["device", *PARTS]} == {
        **{name: "ok" for name in ["device", *PARTS]}, "resume_cpu": "FAIL"}, last
    assert "traceback" in output and "resume_cpu: FAIL (ValueError: broken)" in output
    # statuses | the parts' figures, in order | the device's, deadline, seconds
    _, figures, ending = last.split(": ", 1)[1].split(" | ")
    assert figures.split() == [f"{name}_figure=1" for name in PARTS if name != "resume_cpu"]
    assert ending.startswith("torch=fake sdpa=math deadline=300 seconds="), last
    saved = results_lines(tmp_path / "results.txt")
    assert saved["resume_cpu"][0] == "FAIL" and saved["resume_cpu"][2:] == ["ValueError:",
                                                                               "broken"]
    assert saved["data"][0] == "ok" and saved["data"][2:] == ["data", "done"]
    assert saved["last"] == [last]


def test_a_part_past_its_time_is_cut_and_parts_past_the_deadline_skipped(tmp_path):
    # the deadline: 4 s; the slow part gets what is left of it, then the check ends
    proc = fake_check(tmp_path, "--parts", "data,pretrain_cpu,resume_cpu,ddp_gloo",
                      SLOW_PART="resume_cpu", FAIL_PART="pretrain_cpu",
                      GPU_CHECK_DEADLINE="4")
    output = proc.communicate(timeout=120)[0]
    last, values = summary(output)
    assert proc.returncode == 124, output  # cut comes before failed
    assert [values[n] for n in ("device", "data", "pretrain_cpu", "resume_cpu", "ddp_gloo")] == [
        "ok", "ok", "FAIL", "cut", "skipped"], last
    assert "step_s32_eager" not in values  # not chosen
    assert int(values["seconds"]) <= 4 + 1 and "stopped_by" not in values, last
    # the results file said what had ended when the slow part began
    then = (tmp_path / "results.txt.then").read_text(encoding="utf-8").splitlines()
    assert [line.split()[:2] for line in then] == [["device", "ok"], ["data", "ok"],
                                                   ["pretrain_cpu", "FAIL"]]
    saved = results_lines(tmp_path / "results.txt")
    assert saved["resume_cpu"][0] == "cut" and saved["ddp_gloo"][0] == "skipped"
    assert " ".join(saved["resume_cpu"][2:]).startswith("cut at its limit of ")


@pytest.mark.parametrize(("signum", "stubborn"), [
    (signal.SIGTERM, ""), (signal.SIGINT, ""), (signal.SIGHUP, ""),
    (signal.SIGTERM, "yes"),  # a part that ignores SIGTERM: killed 10 s later
])
def test_a_signal_stops_the_running_part_and_leaves_the_rest(tmp_path, signum, stubborn):
    proc = fake_check(tmp_path, SLOW_PART="pretrain_cpu", STUBBORN=stubborn)
    before = read_until(proc, "pretrain_cpu sleeps")
    os.kill(proc.pid, signum)
    output = "".join(before) + proc.communicate(timeout=60)[0]
    last, values = summary(output)
    name = signal.Signals(signum).name
    assert proc.returncode == 128 + signum, output
    assert [values[n] for n in ("device", "data", "pretrain_cpu")] == ["ok", "ok", "stopped"], last
    assert {values[n] for n in PARTS[2:]} == {"not_run"} and values["stopped_by"] == name
    stopped = results_lines(tmp_path / "results.txt")["pretrain_cpu"]
    assert stopped[0] == "stopped" and stopped[2:] == [name]
    ran = (tmp_path / "work" / "ran").read_text(encoding="utf-8").split()
    assert "resume_cpu" not in ran
    wait_until_gone(tmp_path / "work")  # the part's processes ran there


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

    def step(micro_batches, stop=False, length=None):
        result = train_step(micro_batches, stop, length)
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
