"""The `bert` command: one subcommand per stage plus the commands people reach for once a
model exists. Subcommands are imported lazily, so `bert corpus` never pays for torch.

A stage module imports at its top only click, the edge's helpers (options, params) and its
config classes (`<Section>Config`, in modules that import no torch: `bertcore/*/config.py`,
`common/tracking.py`); what computes (torch, numpy, mlflow) is imported inside the command,
after the params are read. So `bert --help`, a command's help and a bad value answer without
loading torch (well under a second)."""

from __future__ import annotations

import errno
import logging
import os
import pkgutil
import signal
import sys
from pathlib import Path

import click

from bertcore.common.atomic import ForeignFolderError
from bertcore.common.errors import BertError
from bertcore.common.filesystems import NoSpaceError
from bertcore.common.interrupt import signal_when_parent_dies
from bertstages.options import option_for

# Set by DVC in its stages' commands' environment (torchrun's processes inherit it).
STARTED_BY_DVC = "DVC_STAGE"
# Set by torchrun in its workers' environment.
STARTED_BY_TORCHRUN = "TORCHELASTIC_RUN_ID"
# The process that started this one, read as this module loads (torchrun's launcher, killed
# while its worker imports, is told from the process that adopted the worker).
LAUNCHER = os.getppid()

STAGES = ("corpus", "vocab", "samples", "pretrain", "evaluate", "export", "finetune", "prune",
          "probe", "glue")
# name -> "module:attribute" of a click.Command: each stage's is `command` in its own module
COMMANDS = {**{stage: f"bertstages.{stage}:command" for stage in STAGES},
            "fill-mask": "bertstages.infer:fill_mask", "nsp": "bertstages.infer:nsp",
            "compare": "bertstages.compare:command",
            "mlflow-sync": "bertstages.mlflow_sync:command"}


class BertGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        return pkgutil.resolve_name(COMMANDS[name]) if name in COMMANDS else None

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except BertError as error:
            shown = error
        except OSError as error:  # the machine's doing, not ours: a full disk, permissions
            if error.errno in (errno.ENOSPC, errno.EDQUOT):
                shown = NoSpaceError(error.filename or Path.cwd())
            elif error.errno in (errno.EACCES, errno.EPERM, errno.EROFS) and error.filename:
                shown = BertError(f"cannot write or read {error.filename}: {error.strerror}; fix "
                                  "its permissions or point the command elsewhere")
            else:
                raise
        # A full disk, or a folder of the user's: advise to point elsewhere the option that chose
        # the path (`--metrics` for metrics/x.json), which the library could not know.
        if isinstance(shown, NoSpaceError) and (flag := option_for(shown.path, ctx.meta)):
            shown = NoSpaceError(shown.path, f"point {flag} elsewhere")
        if isinstance(shown, ForeignFolderError) and (flag := option_for(shown.path, ctx.meta)):
            shown = shown.advising(f"point {flag} elsewhere")
        failure = click.ClickException(str(shown))  # shown as `Error: <message>`
        failure.exit_code = shown.exit_code
        raise failure


@click.group(cls=BertGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Log debug messages.")
def cli(verbose: bool) -> None:
    """Pretrain BERT (MLM + NSP) from scratch; every DVC stage is a subcommand."""
    level = logging.DEBUG if verbose else logging.INFO
    fmt = "%(levelname)s %(name)s: %(message)s"
    logging.basicConfig(level=level, format=fmt, stream=sys.stderr)
    if STARTED_BY_DVC in os.environ or STARTED_BY_TORCHRUN in os.environ:
        # DVC gone (SIGTERM to `dvc repro` alone: `timeout`, a CI cancel), no one would
        # record what the stage writes: it stops as on SIGTERM, its previous outputs kept.
        # torchrun's launcher gone (SIGKILL), its worker would wait for its store (in
        # torch's TCPStore, up to the group's 30-minute timeout) or train on unwatched.
        signal_when_parent_dies(signal.SIGTERM, LAUNCHER)


def main() -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    cli(prog_name="bert")
