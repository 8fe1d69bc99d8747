"""An output never replaces what its command reads, nor another output: a stage writes each
output whole and renames it into place, so an output that is an input, holds one or sits
inside one would replace it (`bert glue --out X` with X the `--model` folder replaced the
pretrained model), and two outputs that overlap lose one of them. Checked once per command,
before any work, over its path options (`bertstages.options` notes which it writes) and the
paths its params name; under `dvc repro` it also says which of those paths dvc.yaml's deps
do not cover (`bertstages.dvcdeps`)."""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping
from pathlib import Path

import click

from bertcore.common.errors import BertError
from bertstages.dvcdeps import warn_unless_a_dep
from bertstages.options import OUTPUT_OPTIONS, PATH_OPTIONS

# Param values that name no path: a built-in corpus or task, a Hugging Face dataset
NOT_PATHS = ("builtin:", "hf:")


def keep_outputs_apart(params_paths: Mapping[str, str | None] | None = None,
                       warn_deps: bool = True) -> None:
    """BertError (one line) when an output option of the running command is, holds or sits
    inside one of its inputs or another output. `params_paths`: the paths the command reads
    because of its params, by dotted key (None: the key is not set); with `warn_deps`, each
    one set is then checked by `warn_unless_a_dep` (false: the stage checks what it reads)."""
    meta = click.get_current_context().meta
    options: dict[str, str] = meta.get(PATH_OPTIONS, {})
    outputs = [flag for flag in options if flag in meta.get(OUTPUT_OPTIONS, set())]
    inputs = {flag: path for flag, path in options.items() if flag not in outputs}
    inputs.update({key: path for key, path in (params_paths or {}).items()
                   if path and not path.startswith(NOT_PATHS)})
    command = click.get_current_context().command_path
    for flag in outputs:
        for key, path in inputs.items():
            if relation := _overlap(options[flag], path):
                raise BertError(f"{flag} {options[flag]} {relation} {key} ({path}), which "
                                f"{command} reads: point {flag} elsewhere")
    for number, flag in enumerate(outputs):
        for other in outputs[number + 1:]:
            if relation := _overlap(options[flag], options[other]):
                raise BertError(f"{flag} {options[flag]} {relation} {other} ({options[other]}),"
                                f" which {command} writes too: point one of them elsewhere")
    for key, path in (params_paths or {}).items():
        if warn_deps and path:
            warn_unless_a_dep(key, path)


def _overlap(output: str, other: str) -> str | None:
    """How the path `output` overlaps `other` ("is", "holds", "sits inside"), or None. Of a
    glob, the folder it searches counts as held, not as holding: an output beside the files
    it matches replaces none of them."""
    mine, theirs = _real(output), _real(_searched(other))
    if mine == theirs:
        return "is"
    if mine in theirs.parents:
        return "holds"
    if theirs in mine.parents and not glob.has_magic(other):
        return "sits inside"
    return None


def _real(path: str) -> Path:
    return Path(os.path.realpath(os.path.expanduser(path)))


def _searched(path: str) -> str:
    """A glob's path up to its first component with a wildcard (the folder it searches)."""
    if not glob.has_magic(path):
        return path
    parts = Path(path).parts
    literal = next(i for i, part in enumerate(parts) if glob.has_magic(part))
    return str(Path(*parts[:literal])) if literal else "."
