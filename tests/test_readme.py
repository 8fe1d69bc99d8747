"""The README's first screen, before the stage table: how to set up and run (its first two
commands), then what a user gets: where the model lands, one line that tries it, and how to
open MLflow; each command as the real `bert` and `mlflow` parse it, on the paths the
pipeline writes."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click

from bertcore.common.tracking import TrackingConfig
from bertstages.cli import cli
from bertstages.infer import PIPELINE_MODEL
from bertstages.repo import tracking_uri

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def first_screen() -> str:
    """The README up to its stage table."""
    text = README.read_text(encoding="utf-8")
    return text[:text.index("| stage |")]


def command_lines(text: str, program: str) -> list[list[str]]:
    """The arguments of each line or inline code that runs `program` (from .venv/bin or not)."""
    found = []
    for line in re.findall(rf"(?:^\s*|`)(?:\.venv/bin/)?({program} [^`\n#]+)", text, re.M):
        found.append(shlex.split(line)[len(program.split()):])
    return found


def parsed(command: click.Command, name: str, args: list[str]) -> dict:
    """The values `command` parses from `args` (a bad option or argument raises)."""
    return command.make_context(name, list(args), resilient_parsing=False).params


def test_the_first_two_commands_are_setup_and_run_then_setup_and_test():
    block = re.search(r"```bash\n(.*?)```", first_screen(), re.S).group(1)
    assert [line.split("#")[0].strip() for line in block.splitlines()] == [
        "make repro", "make test"]


def test_the_first_screen_says_where_the_model_lands_and_how_to_try_it():
    screen = first_screen()
    assert f"`{PIPELINE_MODEL}/`" in screen  # the export stage's folder, fill-mask's default
    (args,) = command_lines(screen, "bert fill-mask")
    fill_mask = cli.get_command(click.Context(cli), "fill-mask")
    values = parsed(fill_mask, "fill-mask", args)
    assert "[MASK]" in values["text"]
    assert values["model_dir"] in (None, PIPELINE_MODEL)  # the model the pipeline wrote


def test_the_first_screen_opens_mlflow_on_the_store_the_stages_write(monkeypatch):
    from mlflow.cli import cli as mlflow_cli

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(ROOT)
    (args,) = command_lines(first_screen(), "mlflow ui")
    ui = mlflow_cli.get_command(click.Context(mlflow_cli), "ui")
    uri = parsed(ui, "ui", args)["backend_store_uri"]
    relative = uri.removeprefix("sqlite:///")
    assert uri.startswith("sqlite:///") and not relative.startswith("/")
    # from the repository's root, the database every stage logs into by default
    assert f"sqlite:///{(ROOT / relative).resolve()}" == tracking_uri(TrackingConfig())
