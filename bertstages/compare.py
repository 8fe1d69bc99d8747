"""`bert compare A B [C ...]`: the headline figures of two or more runs side by side, each with
its 95% interval over the items it was measured on, and each side's difference to the first
with its interval and verdict (`bertcore/compare/`). Not a DVC stage: it reads what the stages
wrote (their `metrics/*_items.json`) and writes only where it is told.

A side is one source, or several joined by commas, one per pretraining seed
(`recipe-s42,recipe-s1,recipe-s2`); a source is a folder holding `*_items.json` (or one
holding `metrics/`), `mlflow:<run id>`, or a DVC experiment or git revision of the repository
here. Seeds are paired when both sides' sources ran the same `train.seed`s in the same order,
as their params say (the params.yaml beside the folder or in the commit, the MLflow run's
params).

It logs to MLflow only when asked (`--mlflow`): a comparison is a question asked of runs
already recorded, and asking it again and again should not fill the store, nor make an
mlflow.db where none was.
"""

from __future__ import annotations

import dataclasses

import click
import yaml

from bertcore.common.errors import BertError
from bertcore.common.tracking import resolve_uri, sqlite_uri
from bertcore.training.config import TrainConfig
from bertstages.repo import repo_root, source_tags

PARAMS: dict = {}  # reads no params.yaml of its own: only those of the runs it compares
DEFAULT_SEED = next(f.default for f in dataclasses.fields(TrainConfig) if f.name == "seed")


def train_seed(source) -> int | None:
    """The pretraining seed `source` ran with; None when its params cannot be read."""
    if "train.seed" in source.run_params:
        value = source.run_params["train.seed"]
    elif source.params_yaml is not None:
        try:
            params = yaml.safe_load(source.params_yaml) or {}
        except yaml.YAMLError:
            return None
        train = params.get("train") if isinstance(params, dict) else None
        value = (train or {}).get("seed", DEFAULT_SEED) if isinstance(train or {}, dict) else None
    else:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _labels(sides: tuple[str, ...], names: str | None) -> list[str]:
    if names is None:
        return [side.split(",")[0] for side in sides]
    labels = [name.strip() for name in names.split(",")]
    if len(labels) != len(sides) or not all(labels):
        raise BertError(f"--names gives {len(labels)} names for {len(sides)} sides: one each, "
                        "joined by commas")
    return labels


@click.command()
@click.argument("sides", nargs=-1, required=True, metavar="A B [C ...]")
@click.option("--names", default=None, metavar="A,B,...",
              help="The sides' labels (default: each side's first source).")
@click.option("--paired-only", is_flag=True,
              help="Refuse to compare sides that scored other items (another corpus, "
                   "vocabulary or item seed) instead of comparing them unpaired.")
@click.option("--markdown", "markdown_file", type=click.Path(dir_okay=False),
              help="Also write the tables as markdown to this file.")
@click.option("--json", "json_file", type=click.Path(dir_okay=False),
              help="Also write every number unrounded, the digests and the resolved sources "
                   "as JSON to this file.")
@click.option("--mlflow", "log_run", is_flag=True,
              help="Log the comparison as an MLflow run (differences as metrics, the markdown "
                   "and JSON as artifacts).")
@click.option("--tracking-uri", default=None,
              help="The MLflow store of mlflow:<run id> sources and of --mlflow (default: "
                   "$MLFLOW_TRACKING_URI, else mlflow.db at the repository's root).")
@click.option("--experiment", default="bert-compare", show_default=True,
              help="The MLflow experiment --mlflow logs into.")
def command(sides, names, paired_only, markdown_file, json_file, log_run, tracking_uri,
            experiment):
    """Compare runs' headline figures, with 95% intervals, each side against the first."""
    if len(sides) < 2:
        raise BertError("bert compare needs two sides or more: bert compare A B [C ...]")
    labels = _labels(sides, names)
    repo = repo_root()
    uri = resolve_uri(tracking_uri, sqlite_uri(repo / "mlflow.db"))
    # numpy and scipy, once the arguments are read (cli.py)
    from bertcore.compare.comparison import compare
    from bertcore.compare.files import write_comparison_json, write_comparison_markdown
    from bertcore.compare.sides import make_side
    from bertcore.compare.sources import resolve_source
    from bertcore.compare.tables import table

    made = []
    for label, side in zip(labels, sides, strict=True):
        sources = [resolve_source(text.strip(), repo, uri) for text in side.split(",")]
        made.append(make_side(label, sources, [train_seed(s) for s in sources]))
    comparison = compare(made, paired_only)
    for line in table(comparison):
        click.echo(line)
    if markdown_file:
        click.echo(f"wrote {write_comparison_markdown(markdown_file, comparison)}", err=True)
    if json_file:
        click.echo(f"wrote {write_comparison_json(json_file, comparison)}", err=True)
    if log_run:
        from bertcore.compare.logged import log_comparison

        run_id = log_comparison(uri, experiment, comparison, source_tags("compare"))
        click.echo(f"logged MLflow run {run_id} in the experiment {experiment} of {uri}",
                   err=True)
