"""The Python model of a logged Hugging Face folder: what `mlflow.pyfunc` and `mlflow models
serve` run (MLflow's models from code: `mlflow_models.py` logs this file with the model, which
imports nothing of this project, so it serves wherever mlflow, torch and transformers are).

fill-mask: one row per [MASK] of each input text, in order: `input` (the text's row), `mask`
(which [MASK] of it, from 0), `tokens` and `scores` (the `top_k` likeliest, most likely first;
the param `top_k`, by default the model config's). The same columns for one [MASK] or several.
text-classification: one row per input, `label` and `score`; a sentence-pair classifier reads
`text` and `text_pair`. A text longer than the model's positions is cut to them. The texts come
as a table (rows of `text`) or as `{"text": [...]}` (the column's list)."""

from __future__ import annotations

from typing import Any

import mlflow
import pandas as pd


class HFPipelineModel(mlflow.pyfunc.PythonModel):
    """transformers' pipeline of `task` (the model config) on the artifact `model`."""

    def load_context(self, context: Any) -> None:
        import transformers

        self.task = context.model_config["task"]
        self.pairs = bool(context.model_config.get("pairs"))
        self.top_k = int(context.model_config.get("top_k", 1))
        folder = context.artifacts["model"]
        level = transformers.logging.get_verbosity()
        transformers.logging.set_verbosity_error()  # the heads a pipeline has no use for
        try:
            self.pipe = transformers.pipeline(self.task, model=folder, tokenizer=folder)
        finally:
            transformers.logging.set_verbosity(level)

    def predict(self, context: Any, model_input: pd.DataFrame,
                params: dict[str, Any] | None = None) -> pd.DataFrame:
        if self.task == "fill-mask":
            top_k = int((params or {}).get("top_k", self.top_k))
            return self._fill_mask(_column(model_input, "text"), top_k)
        return self._classify(model_input)

    def _fill_mask(self, texts: list[str], top_k: int) -> pd.DataFrame:
        if top_k < 1:
            raise ValueError(f"top_k is {top_k}: ask for 1 token or more")
        rows = []
        for row, text in enumerate(texts):
            found = self.pipe(text, top_k=top_k, tokenizer_kwargs={"truncation": True})
            masks = found if found and isinstance(found[0], list) else [found]  # one [MASK]
            for mask, candidates in enumerate(masks):
                rows.append({"input": row, "mask": mask,
                             "tokens": [c["token_str"] for c in candidates],
                             "scores": [float(c["score"]) for c in candidates]})
        return pd.DataFrame(rows, columns=["input", "mask", "tokens", "scores"])

    def _classify(self, model_input: pd.DataFrame) -> pd.DataFrame:
        texts = _column(model_input, "text")
        if self.pairs:
            texts = [{"text": a, "text_pair": b}
                     for a, b in zip(texts, _column(model_input, "text_pair"), strict=True)]
        found = self.pipe(texts, truncation=True)
        return pd.DataFrame([{"label": f["label"], "score": float(f["score"])} for f in found],
                            columns=["label", "score"])


def _column(model_input: pd.DataFrame, name: str) -> list[str]:
    """The texts of a column in order: `{"text": [...]}` comes as one row holding the list."""
    texts: list[str] = []
    for cell in model_input[name]:
        texts.extend([cell] if isinstance(cell, str) else list(cell))
    return texts


mlflow.models.set_model(HFPipelineModel())
