"""A Hugging Face model folder logged into an MLflow run as an MLflow Model
(`Tracker.log_transformers_model`): registrable in the Model Registry, loaded by
`mlflow.pyfunc` and `mlflow models serve`, and nothing downloaded on the way (no card nor
licence looked up on the Hub, no requirements inferred over the network). The model is the
folder itself (the artifact `model`, its model card README.md in it) and the Python model of
`mlflow_served.py` (MLflow's models from code), whose contract the signature states: the
column `text` (and `text_pair` for a sentence-pair classifier) in; fill-mask's candidates with
their scores out, one row per [MASK] (the param `top_k`), a classifier's `label` and `score`.
No path of the machine that logged it is in it, and no licence file: the user's model has the
licence its card states, none unless they write one."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from bertcore.common.held_logs import logs_quiet

_OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "MLFLOW_DISABLE_TELEMETRY": "true"}
# what they say of a model that is not the Hub's (no license, no card there): not the user's to fix
_MODEL_LOGGERS = ("mlflow.transformers", "mlflow.models", "mlflow.pyfunc", "transformers",
                  "huggingface_hub")
EXAMPLE_TEXT = "the [MASK] of the module is set here."  # the input example (docs/tracking.md)
DEFAULT_TOP_K = 5  # fill-mask's candidates per [MASK] unless asked: as `bert fill-mask --top-k`
# the Python model logged with the folder: a file of its own, which imports nothing of ours
SERVED = Path(__file__).with_name("mlflow_served.py")
ARTIFACT = "model"  # the folder in the MLflow Model: artifacts/model


def log_pipeline(client: Any, run_id: str, uri: str, source: Mapping[str, str], folder: Path,
                 task: str, name: str, pairs: bool = False) -> None:
    """`Tracker.log_transformers_model`'s work: the folder and `task`'s Python model, logged
    into the run `run_id` of the store `uri` with the `mlflow.source.*` tags `source`
    (MLflow's fluent API: the run made active, then left in the state it was). `pairs`: a
    sentence-pair classifier, which predicts on `text` and `text_pair`."""
    with _environment(_OFFLINE):
        import mlflow
        import torch
        import transformers
    # the installed torch (without its local tag, +cpu: the wheel index decides the build) and
    # transformers, not requirements inferred over the network
    requirements = [f"torch=={torch.__version__.split('+')[0]}",
                    f"transformers=={transformers.__version__}"]
    bars = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()  # loading, writing: a tiny folder's bars
    # the store by the environment: mlflow.set_tracking_uri would outlive the call
    store = {**_OFFLINE, "MLFLOW_TRACKING_URI": uri, "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    signature, example = model_signature(task, pairs)
    with _environment(store), logs_quiet(_MODEL_LOGGERS):  # once imported: they set levels then
        status = client.get_run(run_id).info.status
        try:
            with mlflow.start_run(run_id=run_id):
                mlflow.models.Model.log(
                    artifact_path=None, name=name, flavor=_PortableModel,
                    python_model=str(SERVED), artifacts={ARTIFACT: str(folder)},
                    model_config={"task": task, "pairs": pairs, "top_k": DEFAULT_TOP_K},
                    signature=signature, input_example=example, pip_requirements=requirements,
                    tags=source or None, metadata={"task": task},
                    # MLflow would load the model back and predict on the example (1-2 s a
                    # model), only to warn on a failure, which logs_quiet hides: the example is
                    # saved for `mlflow models serve` all the same, and tests serve it
                    validate_serving_input=False)
        finally:
            client.update_run(run_id, status=status)  # not ended by this
            if bars:
                transformers.utils.logging.enable_progress_bar()


def model_signature(task: str, pairs: bool = False) -> tuple[Any, Any]:
    """The MLflow signature of `task`'s Python model (`mlflow_served.py`) and an input example
    (with fill-mask's param). fill-mask: `text` in; one row per [MASK]: `input`, `mask`,
    `tokens`, `scores` out; `top_k` (default `DEFAULT_TOP_K`). A classifier:
    `text` (and `text_pair`) in, `label` and `score` out."""
    import pandas as pd
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, ParamSchema, ParamSpec, Schema
    from mlflow.types.schema import Array

    if task == "fill-mask":
        return ModelSignature(
            inputs=Schema([ColSpec("string", "text")]),
            outputs=Schema([ColSpec("long", "input"), ColSpec("long", "mask"),
                            ColSpec(Array("string"), "tokens"),
                            ColSpec(Array("double"), "scores")]),
            params=ParamSchema([ParamSpec("top_k", "long", DEFAULT_TOP_K)]),
        ), (pd.DataFrame({"text": [EXAMPLE_TEXT]}), {"top_k": 3})
    columns = ["text", "text_pair"] if pairs else ["text"]
    example = {"text": ["the first sentence."], "text_pair": ["the second."]}
    return ModelSignature(
        inputs=Schema([ColSpec("string", column) for column in columns]),
        outputs=Schema([ColSpec("string", "label"), ColSpec("double", "score")]),
    ), pd.DataFrame({column: example[column] for column in columns})


class _PortableModel:
    """The flavour `Model.log` saves with: `mlflow.pyfunc`'s, then its MLmodel rid of the
    paths of this machine MLflow records (where the code and the folder were copied from,
    neither read at load) and the folder at `artifacts/model` whatever its name here."""

    @staticmethod
    def save_model(path: str, mlflow_model: Any, **kwargs: Any) -> None:
        import mlflow.pyfunc

        kwargs.pop("validate_serving_input", None)  # `Model.log`'s, which it passes on too
        mlflow.pyfunc.save_model(path, mlflow_model=mlflow_model, **kwargs)
        config = mlflow_model.flavors["python_function"]
        config["model_code_path"] = SERVED.name  # loaded from the model's folder by its name
        artifact = config["artifacts"][ARTIFACT]
        artifact.pop("uri", None)
        where = f"artifacts/{ARTIFACT}"
        if artifact["path"] != where:
            (Path(path) / artifact["path"]).rename(Path(path) / where)
            artifact["path"] = where
        mlflow_model.save(str(Path(path) / "MLmodel"))


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
