"""A Hugging Face model folder logged into an MLflow run with MLflow's transformers flavour
(`Tracker.log_transformers_model`): registrable in the Model Registry, loaded by
`mlflow.pyfunc` and `mlflow models serve`, and nothing downloaded on the way (no card from the
Hub, no requirements inferred over the network). A text longer than the model's positions is
cut to them (the tokenizer's `model_max_length`), as `bert fill-mask` does, not a tensor-size
error; a sentence-pair classifier takes its pairs as `text` and `text_pair`."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

_OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "MLFLOW_DISABLE_TELEMETRY": "true"}
# what they say of a model that is not the Hub's (no license, no card there): not the user's to fix
_MODEL_LOGGERS = ("mlflow.transformers", "mlflow.models", "transformers", "huggingface_hub")
# what the pipeline is called with at every predict (saved with the model, so serving too):
# each text cut to the model's positions; a pair's longer text first
_TRUNCATION = {"fill-mask": {"tokenizer_kwargs": {"truncation": True}},
               "text-classification": {"truncation": True}}


def log_pipeline(client: Any, run_id: str, uri: str, source: Mapping[str, str], folder: Path,
                 task: str, name: str, card: str | None, pairs: bool = False) -> None:
    """`Tracker.log_transformers_model`'s work: the pipeline built from the folder, logged
    into the run `run_id` of the store `uri` with the `mlflow.source.*` tags `source`
    (MLflow's fluent API: the run made active, then left in the state it was). `pairs`: a
    sentence-pair classifier, whose signature is the two texts (MLflow's default, one
    string, would score the first text alone)."""
    with _environment(_OFFLINE):
        import mlflow
        import mlflow.transformers
        import torch
        import transformers
        from huggingface_hub import ModelCard
    # the installed torch (without its local tag, +cpu: the wheel index decides the build) and
    # transformers, not requirements inferred over the network
    requirements = [f"torch=={torch.__version__.split('+')[0]}",
                    f"transformers=={transformers.__version__}"]
    bars = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()  # loading, writing: a tiny folder's bars
    # the store by the environment: mlflow.set_tracking_uri would outlive the call
    store = {**_OFFLINE, "MLFLOW_TRACKING_URI": uri, "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    with _environment(store), _quiet(_MODEL_LOGGERS):  # once imported: they set levels then
        pipe = transformers.pipeline(task, model=str(folder), tokenizer=str(folder))
        status = client.get_run(run_id).info.status
        try:
            with mlflow.start_run(run_id=run_id):
                mlflow.transformers.log_model(
                    pipe, name=name, task=task, model_card=ModelCard(card) if card else None,
                    pip_requirements=requirements, tags=source or None,
                    signature=pair_signature() if pairs else None,
                    model_config=_TRUNCATION.get(task))
        finally:
            client.update_run(run_id, status=status)  # not ended by this
            if bars:
                transformers.utils.logging.enable_progress_bar()


def pair_signature() -> Any:
    """A sentence-pair classifier's MLflow signature: the columns `text` and `text_pair` in
    (what transformers' text-classification pipeline takes as a pair), `label` and `score`
    out."""
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, Schema

    return ModelSignature(
        inputs=Schema([ColSpec("string", "text"), ColSpec("string", "text_pair")]),
        outputs=Schema([ColSpec("string", "label"), ColSpec("double", "score")]))


@contextlib.contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def _quiet(names: tuple[str, ...]) -> Iterator[None]:
    """Only errors from these loggers during the block."""
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
