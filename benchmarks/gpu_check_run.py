"""How the device check runs its parts so that it always ends with its summary line.

- One deadline for the whole check: a part starts only when its estimate fits in the time left
  (estimates may use what earlier parts measured), and SIGALRM at the deadline stops the part
  that is running wherever it is.
- SIGTERM, SIGINT and SIGHUP stop the check the same way. bertcore's training loop installs its
  own SIGTERM handler (it finishes the step and checkpoints, then raises TrainingInterrupted):
  such an exception, and any signal another handler consumed (seen on a wakeup pipe), stop
  the check too, instead of counting as one failed part.
- The record of the parts and figures is rewritten (atomically) to a JSON file as each part
  ends, and the summary line is built from it: whatever stops the check, the caller prints
  the line from a `finally`.

Statuses: ok, FAIL, skipped (its estimate did not fit the time left), cut (the deadline came
while it ran), stopped (a signal came while it ran), not_run (the check stopped before it).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Stop(BaseException):
    """The check must end now: the deadline came, or a signal. Not an Exception, so that no
    `except Exception` on the way (in a part, in bertcore) takes it for a failure."""

    def __init__(self, reason: str, signum: int | None = None):
        super().__init__(reason)
        self.reason = reason  # "deadline" or a signal's name
        self.signum = signum

    @property
    def status(self) -> str:
        return "cut" if self.signum is None else "stopped"

    @property
    def exit_code(self) -> int:
        return 124 if self.signum is None else 128 + self.signum


def stop_from(exc: BaseException) -> Stop | None:
    """The Stop hidden in an exception that ended a part, if any: bertcore's training loop
    turns SIGTERM/SIGINT into TrainingInterrupted, the `bert` CLI that into an error, both with
    exit code 128 + the signal."""
    if isinstance(exc, Stop):
        return exc
    if isinstance(exc, KeyboardInterrupt):  # the training loop's answer to a second Ctrl-C
        return Stop("SIGINT", int(signal.SIGINT))
    code = getattr(exc, "exit_code", None)
    if isinstance(code, int) and code - 128 in {int(s) for s in STOP_SIGNALS}:
        return Stop(signal.Signals(code - 128).name, code - 128)
    if exc.__cause__ is not None:  # click's Abort, made of a KeyboardInterrupt
        return stop_from(exc.__cause__)
    return None


class Deadline:
    """Seconds left until the deadline, on `clock` (time.monotonic unless a test fakes it)."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic):
        self.seconds = seconds
        self.clock = clock
        self.started = clock()

    def elapsed(self) -> float:
        return self.clock() - self.started

    def left(self) -> float:
        return self.seconds - self.elapsed()


class StopSignals:
    """While entered: SIGALRM at the deadline and the stop signals raise Stop in the main thread,
    once (a second signal while stopping is only noted, so the summary still gets printed)."""

    def __init__(self, deadline: Deadline):
        self.deadline = deadline
        self.stopping: Stop | None = None
        self._previous: dict[int, object] = {}
        self._pipe: tuple[int, int] | None = None
        self._previous_fd = -1
        self._holding = False

    def __enter__(self) -> StopSignals:
        for signum in (*STOP_SIGNALS, signal.SIGALRM):
            self._previous[signum] = signal.signal(signum, self._handle)
        # Every signal that reaches a Python handler, ours or not, also writes its number here.
        read, write = os.pipe()
        os.set_blocking(read, False)
        os.set_blocking(write, False)
        self._pipe = (read, write)
        self._previous_fd = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        signal.setitimer(signal.ITIMER_REAL, max(self.deadline.left(), 0.001))
        return self

    def _handle(self, signum, frame) -> None:
        if self.stopping is not None:
            return
        if signum == signal.SIGALRM:
            self.stopping = Stop("deadline")
        else:
            self.stopping = Stop(signal.Signals(signum).name, signum)
        if not self._holding:
            raise self.stopping

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Inside, a stop is noted, not raised (`check` raises it after): for code that must
        not be cut in the middle. A Stop raised while `Popen` waits for its child's exec
        leaves that child running, out of reach of whatever would have ended it."""
        self._holding = True
        try:
            yield
        finally:
            self._holding = False

    def check(self) -> None:
        """Raise Stop if a stop signal came that another handler took (e.g. the training
        loop's, which may have let its run finish), or if code on the way swallowed ours."""
        if self.stopping is not None:
            if self.stopping.reason != "finishing":
                raise self.stopping
            return
        if self._pipe is None:
            return
        try:
            received = os.read(self._pipe[0], 1024)
        except BlockingIOError:
            return
        for signum in received:
            if signum in {int(s) for s in STOP_SIGNALS}:
                self.stopping = Stop(signal.Signals(signum).name, signum)
                raise self.stopping

    def quiet(self) -> None:
        """From now on signals are only noted: the summary is being printed."""
        signal.setitimer(signal.ITIMER_REAL, 0)
        if self.stopping is None:
            self.stopping = Stop("finishing")

    def __exit__(self, *exc) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.set_wakeup_fd(self._previous_fd)
        if self._pipe is not None:
            for fd in self._pipe:
                os.close(fd)
            self._pipe = None
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


@dataclass
class Outcome:
    status: str  # ok, FAIL, skipped, cut, stopped, not_run, running
    detail: str = ""
    seconds: float = 0.0


@dataclass
class Part:
    """One check. `run` returns a short detail (e.g. "loss 7.1 at 100"); `estimate` gives the
    seconds it needs, asked just before it would start."""

    name: str
    run: Callable[[], str | None]
    estimate: Callable[[], float]


@dataclass
class CheckRecord:
    """What the check found so far: parts in order, figures, written to `path` (JSON) each time
    a part ends."""

    title: str  # "gpu_check" or "gpu_check (dry run)"
    deadline: Deadline
    path: Path | None = None
    parts: dict[str, Outcome] = field(default_factory=dict)
    figures: dict[str, str] = field(default_factory=dict)
    context: dict[str, str] = field(default_factory=dict)  # device, torch, sdpa backend...
    stop: Stop | None = None

    def plan(self, names: list[str]) -> None:
        self.parts = {name: Outcome("not_run") for name in names}
        self.write()

    def start(self, name: str) -> None:
        """`name` runs (written: if the check is killed outright, the file says where)."""
        self.parts[name] = Outcome("running")
        self.write()

    def end(self, name: str, outcome: Outcome) -> None:
        self.parts[name] = outcome
        self.write()

    def stopped(self, stop: Stop) -> None:
        """The check stops: the running part is cut (deadline) or stopped (signal)."""
        self.stop = stop
        for name, outcome in self.parts.items():
            if outcome.status == "running":
                self.parts[name] = Outcome(stop.status, stop.reason, outcome.seconds)
        self.write()

    def summary(self) -> str:
        statuses = [f"{name}={o.status}" for name, o in self.parts.items()]
        figures = [f"{key}={value}" for key, value in self.figures.items()]
        context = [f"{key}={value}" for key, value in self.context.items()]
        ending = [f"deadline={self.deadline.seconds:.0f}", f"seconds={self.deadline.elapsed():.0f}"]
        if self.stop is not None and self.stop.reason != "finishing":
            ending.insert(0, f"stopped_by={self.stop.reason}")
        groups = [" ".join(g) for g in (statuses, figures, context + ending) if g]
        return f"{self.title}: " + " | ".join(groups)

    def exit_code(self) -> int:
        if self.stop is not None and self.stop.reason != "finishing":
            return self.stop.exit_code
        bad = [o for o in self.parts.values() if o.status not in ("ok", "skipped")]
        return 1 if bad else 0

    def write(self) -> None:
        if self.path is None:
            return
        data = {"summary": self.summary(), "parts": {k: asdict(v) for k, v in self.parts.items()},
                "figures": self.figures, "context": self.context,
                "elapsed_s": round(self.deadline.elapsed(), 1),
                "deadline_s": self.deadline.seconds}
        temporary = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        temporary.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        os.replace(temporary, self.path)


def run_parts(parts: list[Part], record: CheckRecord, signals: StopSignals | None = None,
              say: Callable[[str], None] = print) -> None:
    """Run `parts` in order within the record's deadline; a failed part does not stop the
    others, a Stop does (raised again after the record says so)."""
    deadline = record.deadline
    for part in parts:
        left, estimate = deadline.left(), part.estimate()
        if estimate > left:
            record.end(part.name, Outcome("skipped", f"needs ~{estimate:.0f} s, "
                                                     f"{max(left, 0):.0f} s left"))
            say(f"[{deadline.elapsed():5.0f} s] {part.name}: skipped (needs ~{estimate:.0f} s, "
                f"{max(left, 0):.0f} s left)")
            continue
        began = deadline.clock()
        record.start(part.name)  # before its marker: a Stop from now on is this part's
        try:
            say(f"[{deadline.elapsed():5.0f} s] >> {part.name} (~{estimate:.0f} s; "
                f"{left:.0f} s left)")
            outcome = Outcome("ok", part.run() or "")
        except BaseException as exc:  # a Stop ends the check; anything else, this part
            stop = stop_from(exc)
            if stop is not None:
                record.parts[part.name].seconds = deadline.clock() - began
                raise stop from None
            traceback.print_exc()
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            outcome = Outcome("FAIL", f"{type(exc).__name__}: {first}")
        outcome.seconds = deadline.clock() - began
        record.end(part.name, outcome)
        say(f"[{deadline.elapsed():5.0f} s] {part.name}: {outcome.status}"
            f"{' (' + outcome.detail + ')' if outcome.detail else ''} ({outcome.seconds:.0f} s)")
        if signals is not None:
            signals.check()


def run_subprocess(args: list[str], env: dict[str, str], log: Path,
                   signals: StopSignals) -> subprocess.CompletedProcess:
    """Run `args` in a session of its own, output into `log`; whatever ends the wait (its end,
    the deadline, a Stop, even one that came while it started) its whole process group is
    gone afterwards."""
    with open(log, "w", encoding="utf-8") as out:
        with signals.held():
            proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        try:  # the deadline's SIGALRM comes first; this timeout is for a run without one
            signals.check()
            code = proc.wait(timeout=max(signals.deadline.left(), 0.0) + 5.0)
        except subprocess.TimeoutExpired:
            raise Stop("deadline") from None
        finally:
            _end_group(proc)
    return subprocess.CompletedProcess(args, code, log.read_text(encoding="utf-8"), "")


def _end_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the process group, SIGKILL after a few seconds if anything remains."""
    for signum, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
        try:  # the leader is gone; its workers may not be
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
