"""tests/helpers/preloaded.py: a command forked from the preloaded interpreter does what the same
command started from scratch does, in its own folder and environment."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

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


def test_the_bert_that_dvc_starts_is_forked_and_gives_what_a_fresh_one_gives(tmp_path):
    """`dvc_env`'s `bert` on PATH: a stage's command is forked (the server counts it) in the
    stage's folder, with its stdout, stderr and exit code; one whose environment differs at
    load time (a thread count) starts from scratch."""
    venv_bin = Path(sys.executable).parent
    dvc = shutil.which("dvc", path=str(venv_bin))
    env = {**os.environ, "PYTHONPATH": str(REPO), "DVC_NO_ANALYTICS": "1",
           "PATH": f"{venv_bin}{os.pathsep}{os.environ['PATH']}"}
    forking = preloaded.dvc_env(env)
    (tmp_path / "dvc.yaml").write_text(
        "stages:\n"
        "  run:\n"
        "    cmd: bert --help > help.txt; bert no-such-command 2> error.txt;"
        " echo $? > code.txt; OMP_NUM_THREADS=3 bert --help > threads.txt\n"
        "    outs: [help.txt, error.txt, code.txt, threads.txt]\n")
    subprocess.run([dvc, "init", "--no-scm", "-q"], cwd=tmp_path, env=env, check=True)
    before = preloaded.forked_by_shims(env)
    subprocess.run([dvc, "repro", "-q"], cwd=tmp_path, env=forking, check=True, timeout=300)
    assert preloaded.forked_by_shims(env) == before + 2
    fresh_help = from_scratch(["--help"], tmp_path, env)
    fresh_error = from_scratch(["no-such-command"], tmp_path, env)
    assert (tmp_path / "help.txt").read_text() == fresh_help.stdout
    assert (tmp_path / "threads.txt").read_text() == fresh_help.stdout
    assert (tmp_path / "error.txt").read_text() == fresh_error.stderr
    assert (tmp_path / "code.txt").read_text() == f"{fresh_error.returncode}\n"
