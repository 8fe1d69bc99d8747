"""`bert mlflow-sync`: log into the MLflow store the results that waited for it.

A stage whose store was locked (past `$BERT_MLFLOW_LOCK_WAIT` seconds) or failed while it
logged keeps its results in the store's pending folder (`mlflow.db.pending/` beside a SQLite
store: `bertcore/common/pending.py`). The next stage that reaches the store logs them; this
command does it now, as `wandb sync` does for offline runs. Nothing to log: it says so and
leaves the store untouched.
"""

from __future__ import annotations

import click

from bertcore.common.tracking import TrackingConfig
from bertstages.options import params_options
from bertstages.params import load_params, read_params
from bertstages.repo import tracking_uri

PARAMS = {"tracking": TrackingConfig}  # the store the stages log into


@click.command()
@params_options
def command(params_file, overrides):
    """Log into MLflow the results a locked or failing store did not take."""
    config = read_params(load_params(params_file, overrides, PARAMS), PARAMS)["tracking"]
    uri = tracking_uri(config)
    from bertcore.common.mlflow_client import sync_pending
    from bertcore.common.pending import pending_dir

    logged, left = sync_pending(uri)
    if not logged and not left:
        click.echo(f"mlflow-sync: nothing waits for {uri}", err=True)
        return
    click.echo(f"mlflow-sync: logged {logged} pending result(s) into {uri}"
               + (f"; {left} still wait in {pending_dir(uri)}" if left else ""), err=True)
