"""Options shared by every stage command: `--params FILE` and repeatable `--set key=value`."""

from __future__ import annotations

from collections.abc import Callable

import click


def stage_options(func: Callable) -> Callable:
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
        help="The params file to read.",
    )(func)
    return func
