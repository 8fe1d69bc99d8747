"""The params of what a model is saved with: the `export:` section (what an export holds
beside the weights: `bertcore.training.run.export`, `onnx_export`) and the `card:` section (what
the model cards' metadata say: `card_meta`). Nothing here imports torch (the stages read their
params before they import what computes)."""

from __future__ import annotations

from typing import Literal

from bertcore.common.validation import Bool, params_section, text


@params_section
class ExportConfig:
    """The `export:` section of params.yaml."""

    # also the encoder as ONNX, onnx/model.onnx in the export (saved/onnx_export.py): needs
    # the `onnx` extra
    onnx: Bool = False


# a language as the Hub's cards name it: an ISO 639-1 (or 639-3) code, with a region or not
_LANGUAGE = r"^[a-z]{2,3}(-[A-Za-z0-9]+)?$"
Language = text(pattern=_LANGUAGE, allowed="auto, null, a language code (en) or a list of them")


@params_section
class CardConfig:
    """The `card:` section of params.yaml: what the model cards' metadata say that the data
    cannot (`saved/card_meta.py` resolves `auto` from `corpus.source`). The weights are a
    function of the user's corpus, so their licence is the user's to state."""

    # the pretrained model's name: its card's model-index and the downstream cards' base_model
    # (the Hub repo it goes to); auto: bert-<the corpus's name>
    model_name: text(pattern=r"^[A-Za-z0-9][A-Za-z0-9_./-]*$",
                     allowed="auto or a Hub model name (letters, digits, - _ . /)") = "auto"
    # a Hub licence id (apache-2.0, mit, cc-by-4.0, other, unknown, ...); auto: the built-in
    # corpus's (other: psf-2.0, Python's documentation licence), else unknown
    license: text(pattern=r"^[a-z0-9][a-z0-9.+-]*$", allowed="auto or a Hub licence id") = "auto"
    license_name: str | None = None  # with license: other, its name and link
    license_link: str | None = None
    # the corpus's language(s); auto: en for the built-in corpus, else none said
    language: Literal["auto"] | Language | list[Language] | None = "auto"
    # the corpus's name in `datasets` and the results (a Hub dataset id where it is one);
    # auto: from corpus.source (python-docs, the hf: NAME, a file's or folder's name)
    dataset: text(pattern=r"\S", allowed="auto or a dataset name") = "auto"
