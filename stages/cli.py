"""The `bert` command: one subcommand per stage plus the commands people reach for once a
model exists. Subcommands are imported lazily, so `bert corpus` never pays for torch."""

from __future__ import annotations

import errno
import importlib
import logging
import os
import sys
from pathlib import Path

import click

from bertcore.common.atomic import NoSpaceError
from bertcore.common.errors import BertError

# name -> "module:attribute" of a click.Command
COMMANDS = {
    "corpus": "stages.corpus:command",
    "vocab": "stages.vocab:command",
    "samples": "stages.samples:command",
    "pretrain": "stages.pretrain:command",
    "evaluate": "stages.evaluate:command",
    "export": "stages.export:command",
    "finetune": "stages.finetune:command",
    "prune": "stages.prune:command",
    "fill-mask": "stages.infer:fill_mask",
    "nsp": "stages.infer:nsp",
}


class UserFacingError(click.ClickException):
    """A BertError shown as `Error: <message>` with the error's own exit code."""

    def __init__(self, error: BertError):
        super().__init__(str(error))
        self.exit_code = error.exit_code


class BertGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module, _, attr = target.partition(":")
        return getattr(importlib.import_module(module), attr)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except BertError as error:
            raise UserFacingError(error) from None
        except OSError as error:  # the machine's doing, not ours: a full disk, permissions
            if error.errno in (errno.ENOSPC, errno.EDQUOT):
                raise UserFacingError(NoSpaceError(error.filename or Path.cwd())) from None
            if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS) and error.filename:
                message = (f"cannot write or read {error.filename}: {error.strerror}; fix its "
                           "permissions or point the command elsewhere")
                raise UserFacingError(BertError(message)) from None
            raise


@click.group(cls=BertGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Log debug messages.")
def cli(verbose: bool) -> None:
    """Pretrain BERT (MLM + NSP) from scratch; every DVC stage is a subcommand."""
    level = logging.DEBUG if verbose else logging.INFO
    fmt = "%(levelname)s %(name)s: %(message)s"
    logging.basicConfig(level=level, format=fmt, stream=sys.stderr)


def main() -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    cli(prog_name="bert")
