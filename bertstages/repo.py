"""Where the pipeline's things live: the repository (also under `dvc exp run --temp`), its
MLflow store, and the model `bert pretrain` wrote with the vocabulary it was trained on."""

from __future__ import annotations

import os
from pathlib import Path

from bertcore.common.errors import BertError
from bertcore.common.tracking import TrackingConfig, resolve_uri, sqlite_uri
from bertcore.data.vocab.files import read_vocab


def repo_root(start: str | os.PathLike | None = None) -> Path:
    """The repository the pipeline runs in. `dvc exp run --temp/--queue` runs stages in a
    copy under `<repo>/.dvc/tmp/exps/...`: the real repo is the one above that copy (what is
    written inside the copy is thrown away)."""
    here = Path(start or os.environ.get("DVC_ROOT") or Path.cwd()).resolve()
    parts = here.parts
    for i in range(len(parts) - 2):
        if parts[i : i + 3] == (".dvc", "tmp", "exps"):
            return Path(*parts[:i])
    for candidate in (here, *here.parents):
        if (candidate / ".dvc").is_dir() or (candidate / ".git").exists():
            return candidate
    return here


def experiment_name() -> str | None:
    """The DVC experiment this command runs in: `dvc exp run` sets DVC_EXP_NAME for each
    stage's command (its own random name, or `--name`); None outside one."""
    return os.environ.get("DVC_EXP_NAME") or None


def tracking_uri(config: TrackingConfig) -> str:
    """tracking.uri, else $MLFLOW_TRACKING_URI, else mlflow.db at the repo root."""
    return resolve_uri(config.uri, sqlite_uri(repo_root() / "mlflow.db"))


def load_pretrained(model_dir: str | Path, vocab_dir: str | Path):
    """The model `bert pretrain` wrote and the vocabulary it must have been trained with."""
    from bertcore.model.hf import load_model  # torch: not for the stages that only read paths

    model = load_model(model_dir)
    tokens = read_vocab(vocab_dir)
    if model.config.vocab_size != len(tokens):
        raise BertError(f"the model in {model_dir} has {model.config.vocab_size} tokens, the "
                        f"vocabulary in {vocab_dir} {len(tokens)}: rerun `bert pretrain`")
    return model, tokens
