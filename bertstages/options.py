"""Options shared by the stage commands: `--params FILE`, repeatable `--set key=value`, the
folders one stage writes and others read (defaults as in dvc.yaml), and how a command that
writes its outputs whole or not at all answers SIGTERM and Ctrl-C (`stops_at_once`). Each
path option is noted in the command's context with what the command does with it (reads or
writes): `bertstages.apart` keeps the outputs apart from the inputs."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from pathlib import Path

import click

from bertcore.common.errors import BertError
from bertcore.common.interrupt import Interrupted, interrupt_on_signals
from bertcore.common.pool import WorkerDied
from bertcore.common.validation import DEVICE_PATTERN, DEVICES


def stage_options(func: Callable) -> Callable:
    """`params_options` on a stage that writes its outputs whole or not at all, which
    `stops_at_once`. Put it under the other options."""
    return params_options(stops_at_once(func))


def params_options(func: Callable) -> Callable:
    """Add `--params` and `--set` to a stage command (passed as `params_file`, `overrides`)."""
    func = click.option(
        "--set",
        "overrides",
        multiple=True,
        metavar="SECTION.KEY=VALUE",
        help="Override one value of params.yaml (repeatable), e.g. --set train.max_steps=10.",
    )(func)
    func = click.option(
        "--params",
        "params_file",
        default="params.yaml",
        show_default=True,
        type=click.Path(dir_okay=False),
        callback=_remember_input,
        help="The params file to read.",
    )(func)
    return func


def stops_at_once(func: Callable) -> Callable:
    """SIGTERM or Ctrl-C stop the command where it is: what it had begun to write is removed
    on the way out (a worker pool shut down), and the user reads one line; the exit code is
    128 + the signal's number, as for a process the signal killed. A worker process that
    died twice on a task (`WorkerDied`) stops it the same way, with exit code 1."""

    @functools.wraps(func)
    def run(*args, **kwargs):
        context = click.get_current_context()
        try:
            with interrupt_on_signals():
                return func(*args, **kwargs)
        except Interrupted as stop:
            error = BertError(interrupted_message(stop, context))
            error.exit_code = stop.exit_code
            raise error from None
        except WorkerDied as died:
            raise BertError(f"{died}: {_what_stays(context)}") from None

    return run


# ctx.meta key: a command that keeps work of a run stopped midway (GLUE's finished
# fine-tunes) puts here what says it (a callable: the words, or None when nothing is kept)
KEPT_WHEN_STOPPED = "bert.kept_when_stopped"


def _what_stays(context: click.Context) -> str:
    """After a stop before any output was put in place: that none was, and what a rerun
    starts from."""
    kept = context.meta.get(KEPT_WHEN_STOPPED)
    said = kept() if kept else None
    if said:
        return f"no output was written; {said}"
    return f"nothing was written; rerun `bert {context.info_name}` to start again"


def interrupted_message(stop: Interrupted, context: click.Context) -> str:
    """What is on disk after a signal: nothing new (and what a rerun starts from), or the
    outputs this run had put in place (each whole) while the others are the last run's."""
    if not stop.replaced:
        return f"interrupted by {stop}: {_what_stays(context)}"
    name = context.info_name
    shown = ", ".join(stop.replaced[:3])
    more = f" and {len(stop.replaced) - 3} more" if len(stop.replaced) > 3 else ""
    return (f"interrupted by {stop} after this run wrote {shown}{more} (each whole); any other "
            f"output is the last run's; rerun `bert {name}` to write them all")


# ctx.meta keys: {flag: path} of a command's path options, so that an error about a path
# (a full disk) can name the option that chose it (`option_for`); and the flags of those the
# command writes (the others it reads).
PATH_OPTIONS = "bert.path_options"
OUTPUT_OPTIONS = "bert.output_options"


def folder_option(flag: str, dest: str, default: str, help: str, reads: bool = False
                  ) -> Callable:
    """A folder path option showing its default: one the command writes, or `reads`."""
    return click.option(flag, dest, default=default, show_default=True, help=help,
                        type=click.Path(file_okay=False),
                        callback=_remember_input if reads else _remember_output)


def file_option(flag: str, dest: str, default: str, help: str) -> Callable:
    """A file path option showing its default: one the command writes."""
    return click.option(flag, dest, default=default, show_default=True, help=help,
                        type=click.Path(dir_okay=False), callback=_remember_output)


def _remember_input(ctx: click.Context, param: click.Parameter, value: str) -> str:
    ctx.meta.setdefault(PATH_OPTIONS, {})[param.opts[0]] = value
    return value


def _remember_output(ctx: click.Context, param: click.Parameter, value: str) -> str:
    ctx.meta.setdefault(OUTPUT_OPTIONS, set()).add(param.opts[0])
    return _remember_input(ctx, param, value)


def option_for(path: str | os.PathLike, meta: dict) -> str | None:
    """The path option (`--metrics`) whose file or folder holds `path`; None when none does."""
    target = Path(os.path.realpath(path))
    holders = [(len(Path(os.path.realpath(chosen)).parts), flag)
               for flag, chosen in meta.get(PATH_OPTIONS, {}).items()
               if (held := Path(os.path.realpath(chosen))) == target or held in target.parents]
    return max(holders)[1] if holders else None


corpus_option = folder_option("--corpus", "corpus_dir", "data/corpus",
                              "Corpus folder with train.txt and val.txt (from `bert corpus`).",
                              reads=True)
vocab_option = folder_option("--vocab", "vocab_dir", "data/vocab",
                             "Vocabulary folder (from `bert vocab`).", reads=True)
samples_option = folder_option("--samples", "samples_dir", "data/samples",
                               "Samples folder (from `bert samples`).", reads=True)
pretrained_option = folder_option("--model", "model_dir", "models/pretrained",
                                  "Model folder (from `bert pretrain`).", reads=True)


def _device(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if not re.match(DEVICE_PATTERN, value):
        raise click.BadParameter(f"{value!r} is no device; use {DEVICES}")
    return value


device_option = click.option("--device", default="auto", show_default=True, callback=_device,
                             help="auto, cpu, cuda, cuda:N.")
