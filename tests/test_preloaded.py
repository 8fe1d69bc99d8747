"""tests/helpers/preloaded.py: a command forked from the preloaded interpreter does what the same
command started from scratch does, in its own folder and environment."""

from __future__ import annotations

import os
import subprocess
import sys

from helpers import preloaded
from helpers.bert import REPO


def from_scratch(args: list[str], cwd, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bertstages", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_a_forked_command_gives_what_a_fresh_process_gives(tmp_path):
    (tmp_path / "params.yaml").write_text("train:\n  learning_rate: .inf\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for args in (["pretrain"], ["--help"], ["no-such-command"]):
        forked, fresh = preloaded.run(args, tmp_path, env, 120), from_scratch(args, tmp_path, env)
        assert (forked.returncode, forked.stdout, forked.stderr) == (
            fresh.returncode, fresh.stdout, fresh.stderr), args
    assert forked.returncode == 2 and "No such command" in forked.stderr


def test_each_command_has_its_own_folder_and_environment(tmp_path):
    """The params file is the command's folder's, and the environment the one given:
    COLUMNS, which click's help wraps to, in one call and not in the next."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("COLUMNS", None)
    good, bad = tmp_path / "good", tmp_path / "bad"
    for folder, value in ((good, "0.001"), (bad, "-1")):
        folder.mkdir()
        (folder / "params.yaml").write_text(f"train:\n  learning_rate: {value}\n")
    narrow = preloaded.run(["--help"], bad, {**env, "COLUMNS": "40"}, 120).stdout
    assert narrow == from_scratch(["--help"], bad, {**env, "COLUMNS": "40"}).stdout
    wide = preloaded.run(["--help"], good, env, 120).stdout
    assert wide == from_scratch(["--help"], good, env).stdout and wide != narrow
    first = preloaded.run(["pretrain"], bad, env, 120)
    assert first.returncode == 2 and "train.learning_rate" in first.stderr, first.stderr
    second = preloaded.run(["pretrain", "--samples", "none"], good, env, 120)
    assert second.returncode == 1 and "no samples at none" in second.stderr, second.stderr


def test_an_environment_read_at_load_gets_an_interpreter_of_its_own():
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    late = {**env, "PYTEST_CURRENT_TEST": "another", "PYTHONPATH": f"{REPO}{os.pathsep}x"}
    assert preloaded._load_time_key(env) == preloaded._load_time_key(late)
    assert preloaded._load_time_key(env) != preloaded._load_time_key(
        {**env, "OMP_NUM_THREADS": "2"})
