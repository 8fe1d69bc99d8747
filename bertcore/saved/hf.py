"""Weights on disk: our own format, and Hugging Face's `BertForPreTraining` format.

- `save_model` / `load_model`: `model.safetensors` + `config.json` with our parameter names.
  `load_model` also reads any BERT directory in Hugging Face format (so pretraining can start
  from a checkpoint the user has on disk).
- `export_hf`: a directory `transformers.BertForPreTraining.from_pretrained` loads with no
  missing or unexpected weight: HF names, the tied decoder keys left out as HF leaves them out,
  plus the tokenizer files. `export_hf_classifier`: the same for
  `BertForSequenceClassification`, with `id2label`/`label2id`.
- Pruned heads: transformers 5 has no per-layer head counts, so a pruned model is exported in
  full shapes with the pruned heads' query/key/value rows and biases and output-projection
  columns zero (the same function); config.json keeps `pruned_heads` as transformers 4.x
  wrote it, and `load_model` rebuilds the smaller model from it (from full, zeroed shapes or
  from 4.x's physically pruned ones).

HF's parameter names and its config.json are `hf_names`'s. Only safetensors are written; a
legacy `pytorch_model.bin` is read with `weights_only=True`.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file
from safetensors.torch import save as safetensors_bytes

from bertcore.common.atomic import atomic_file, write_json
from bertcore.common.errors import BertError
from bertcore.model.bert import BertConfig, BertPretrainingModel, head_units
from bertcore.model.classifier import BertForSequenceClassification
from bertcore.saved.hf_names import from_hf_state_dict, hf_config_dict, to_hf_state_dict

log = logging.getLogger(__name__)

WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"
TOKENIZER_FILES = (
    "vocab.txt",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)
FORMAT_KEY = "bertcore_format"  # in our config.json; HF's has model_type instead
FORMAT_VERSION = 1
# The parts a BERT file may lack (BertModel, BertForMaskedLM), as a user knows them.
HEAD_GROUPS = {
    "pooler.": "the pooler (bert.pooler)",
    "mlm_head.": "the MLM transform and output bias (cls.predictions)",
    "nsp_head.": "the NSP head (cls.seq_relationship)",
}


# -------------------------------------------------------------------------- save and load
def save_model(model: BertPretrainingModel, model_dir: str | Path) -> None:
    """Write model.safetensors (our names) + config.json into `model_dir` (created if needed).
    Each file is written atomically; wrap the call in `atomic_dir` for a whole-directory swap."""
    model_dir = Path(model_dir)
    state = model.state_dict()
    refuse_nonfinite(state)
    model_dir.mkdir(parents=True, exist_ok=True)
    _write_safetensors(state, model_dir / WEIGHTS_NAME)
    write_json(model_dir / CONFIG_NAME, {FORMAT_KEY: FORMAT_VERSION, **model.config.to_dict()})


def export_hf(
    model: BertPretrainingModel, out_dir: str | Path, vocab_dir: str | Path | None = None
) -> None:
    """Write a Hugging Face `BertForPreTraining` directory: config.json, model.safetensors
    (HF names, tied keys left out) and, given `vocab_dir`, its tokenizer files."""
    _export(model, Path(out_dir), vocab_dir, (), {})


def export_hf_classifier(
    model: BertForSequenceClassification,
    out_dir: str | Path,
    vocab_dir: str | Path | None = None,
) -> None:
    """Write a Hugging Face `BertForSequenceClassification` directory (with `id2label` and
    `label2id` from `model.labels`; a regression head as `problem_type: regression`, one
    label) and, given `vocab_dir`, its tokenizer files."""
    # a regression head has one output and no class names (transformers names it LABEL_0)
    labels = model.labels or ["LABEL_0"]
    settings = dict(
        architectures=["BertForSequenceClassification"],
        id2label={str(i): label for i, label in enumerate(labels)},
        label2id={label: i for i, label in enumerate(labels)},
        problem_type="regression" if model.is_regression else "single_label_classification",
    )
    _export(model, Path(out_dir), vocab_dir, ("classifier.weight", "classifier.bias"), settings)


def _export(model: BertPretrainingModel | BertForSequenceClassification, out_dir: Path,
            vocab_dir: str | Path | None, own_keys: tuple[str, ...], settings: dict) -> None:
    """The encoder under HF's names plus `own_keys` as they are, config.json with `settings`
    over `hf_config_dict`'s, and the tokenizer files of `vocab_dir`."""
    config = model.config
    tokenizer_files = _tokenizer_files(Path(vocab_dir), config) if vocab_dir else []
    state = model.state_dict()
    refuse_nonfinite(state)
    out_dir.mkdir(parents=True, exist_ok=True)
    tensors = to_hf_state_dict(zero_pruned_heads(state, config), config.num_hidden_layers)
    tensors.update({key: state[key] for key in own_keys})
    _write_safetensors(tensors, out_dir / WEIGHTS_NAME)
    dtype = next(model.parameters()).dtype
    write_json(out_dir / CONFIG_NAME, {**hf_config_dict(config, dtype), **settings})
    for source in tokenizer_files:
        if source.name == "tokenizer_config.json":
            # The tokenizer must not hand transformers more tokens than the model has positions.
            tokenizer_settings = json.loads(source.read_text(encoding="utf-8"))
            tokenizer_settings["model_max_length"] = config.max_position_embeddings
            write_json(out_dir / source.name, tokenizer_settings)
            continue
        with atomic_file(out_dir / source.name, "wb") as handle, source.open("rb") as src:
            shutil.copyfileobj(src, handle)


def load_model(
    model_dir: str | Path, strict: bool = True, config: BertConfig | None = None
) -> BertPretrainingModel:
    """Load our directory (save_model) or any BERT directory in Hugging Face format, on the CPU.

    With `strict=False`, a file without the pooler / MLM / NSP heads (e.g. a BertModel or
    BertForMaskedLM checkpoint) still loads: those heads keep their fresh init (drawn from
    torch's global generator, as a new model's), their names are in `model.missing_weights`,
    and a warning names each group. Encoder weights must always be there.
    `config`: build the model with it instead of config.json's (e.g. other dropout rates)."""
    model_dir = Path(model_dir)
    config = config or read_config(model_dir)
    tensors = read_weights(model_dir)
    if "embeddings.tokens.weight" in tensors:  # our own names
        state, unexpected = tensors, []
    else:
        state, unexpected = from_hf_state_dict(tensors, config.num_hidden_layers)
    state = drop_pruned_heads(state, config, model_dir)
    model = BertPretrainingModel(config)
    try:
        result = model.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # shapes that disagree with config.json
        detail = str(exc).strip().splitlines()[-1].strip()
        raise BertError(f"{model_dir}: weights do not fit its config.json ({detail})") from None
    bad = first_nonfinite(state)
    if bad is not None:
        raise BertError(f"weights file {weights_path(model_dir)} is damaged: {bad} holds NaN or "
                        "infinite values; export or save the model again")
    missing = list(result.missing_keys)
    unexpected = sorted(set(unexpected) | set(result.unexpected_keys))
    if unexpected:
        log.warning(
            "%s: ignored %d unknown weights, e.g. %s", model_dir, len(unexpected), unexpected[0]
        )
    body_missing = [name for name in missing if not name.startswith(tuple(HEAD_GROUPS))]
    if body_missing or (strict and missing):
        raise BertError(
            f"{model_dir} lacks {len(missing)} weights of a BERT with this config.json, e.g. "
            f"{(body_missing or missing)[0]}: is it a BERT checkpoint matching its config?"
        )
    for prefix, group in HEAD_GROUPS.items():  # the groups the missing names belong to
        if any(name.startswith(prefix) for name in missing):
            log.warning("%s has no weights for %s: it starts from a fresh init", model_dir, group)
    model.missing_weights = missing
    return model


def load_classifier(model_dir: str | Path, config: BertConfig,
                    labels: list[str]) -> BertForSequenceClassification:
    """The classifier `export_hf_classifier` wrote into `model_dir`, built with the `config`
    and `labels` it was fine-tuned with: the same weights, bit for bit."""
    tensors = read_weights(Path(model_dir))
    state, _ = from_hf_state_dict(tensors, config.num_hidden_layers)
    state = drop_pruned_heads(state, config, model_dir)
    state.update({key: tensors[key] for key in ("classifier.weight", "classifier.bias")})
    model = BertForSequenceClassification(config, labels)
    model.load_state_dict(state)
    return model


def read_config(model_dir: Path) -> BertConfig:
    """BertConfig from config.json (ours or HF's), with one-line errors for what is unusable."""
    path = Path(model_dir) / CONFIG_NAME
    if not Path(model_dir).is_dir():
        raise BertError(f"model directory not found: {model_dir}")
    if not path.is_file():
        raise BertError(f"no {CONFIG_NAME} in {model_dir}: point at a saved or exported model dir")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise BertError(f"{path} is not valid JSON") from None
    if FORMAT_KEY not in data and data.get("model_type", "bert") != "bert":
        raise BertError(f"{path} describes a {data.get('model_type')!r} model, not BERT")
    if data.get("position_embedding_type", "absolute") != "absolute":
        raise BertError(f"{path}: only absolute position embeddings are supported")
    return BertConfig.from_dict(data)


def weights_path(model_dir: Path) -> Path:
    """The weights file of a model dir, or a one-line error saying none is there."""
    model_dir = Path(model_dir)
    for name in (WEIGHTS_NAME, f"{WEIGHTS_NAME}.index.json", "pytorch_model.bin"):
        if (model_dir / name).is_file():
            return model_dir / name
    raise BertError(
        f"no model weights ({WEIGHTS_NAME}) in {model_dir}: export or save a model there"
    )


def weight_files(model_dir: Path) -> list[Path]:
    """The files holding a model dir's weights: one file, or a shard index and its shards."""
    path = weights_path(model_dir)
    if not path.name.endswith(".index.json"):
        return [path]
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
        shards = sorted(set(index["weight_map"].values()))
    except (ValueError, KeyError, TypeError, AttributeError):
        raise BertError(f"{path} is not a valid weights index: export the model again") from None
    return [path, *(path.parent / shard for shard in shards)]


def read_weights(model_dir: Path) -> dict[str, torch.Tensor]:
    """All tensors of a model dir on the CPU: safetensors (single or sharded), or a legacy
    pytorch_model.bin read with weights_only=True (never arbitrary pickle). A truncated or
    corrupt file is a one-line error naming it."""
    tensors = {}
    for path in weight_files(model_dir):
        try:
            if path.suffix == ".bin":
                tensors.update(torch.load(path, map_location="cpu", weights_only=True))
            elif not path.name.endswith(".index.json"):
                tensors.update(load_file(path))
        except FileNotFoundError:
            raise BertError(f"weights file {path} is missing: export or save the model again"
                            ) from None
        except Exception as exc:  # SafetensorError, an unpickling or zip error, an I/O error
            detail = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
            raise BertError(
                f"weights file {path} is damaged or truncated ({type(exc).__name__}: {detail}): "
                "export or save the model again"
            ) from None
    return tensors


# ------------------------------------------------------------------------------ pruned heads
def _attention_names(layer: int) -> tuple[str, str, str]:
    prefix = f"layers.{layer}.attention."
    return f"{prefix}qkv.weight", f"{prefix}qkv.bias", f"{prefix}out.weight"


def zero_pruned_heads(
    state: dict[str, torch.Tensor], config: BertConfig
) -> dict[str, torch.Tensor]:
    """Our-named tensors of a pruned model (smaller attention projections) in full shapes: the
    pruned heads' query/key/value rows and biases and output-projection columns are zero."""
    state = dict(state)
    full = config.hidden_size
    for layer in config.pruned_heads:
        rows, cols = head_units(config.kept_heads(layer), config.head_size, full)
        qkv_w, qkv_b, out_w = _attention_names(layer)
        for name in (qkv_w, qkv_b):
            small = state[name]
            state[name] = small.new_zeros((3 * full, *small.shape[1:])).index_copy(0, rows, small)
        small = state[out_w]
        state[out_w] = small.new_zeros((small.shape[0], full)).index_copy(1, cols, small)
    return state


def drop_pruned_heads(
    state: dict[str, torch.Tensor], config: BertConfig, source: str | Path
) -> dict[str, torch.Tensor]:
    """Our-named tensors with full-size attention projections (an export with zeroed heads)
    cut down to the heads config.pruned_heads keeps; already smaller ones are left as they are."""
    state = dict(state)
    full = config.hidden_size
    for layer in config.pruned_heads:
        qkv_w, qkv_b, out_w = _attention_names(layer)
        if qkv_w not in state or state[qkv_w].shape[0] != 3 * full:
            continue
        rows, cols = head_units(config.kept_heads(layer), config.head_size, full)
        dropped = torch.ones(3 * full, dtype=torch.bool)
        dropped[rows] = False
        if state[qkv_w][dropped].any() or state[out_w][:, dropped[:full]].any():
            log.warning("%s: layer %d's pruned heads have non-zero weights; dropped as "
                        "config.json's pruned_heads says", source, layer)
        state[qkv_w] = state[qkv_w][rows]
        state[qkv_b] = state[qkv_b][rows]
        state[out_w] = state[out_w][:, cols]
    return state


def first_nonfinite(tensors: dict[str, torch.Tensor]) -> str | None:
    """The name of the first floating-point tensor holding NaN or an infinity, or None."""
    return next((name for name, t in tensors.items() if t.is_floating_point()
                 and not torch.isfinite(t).all()), None)


def refuse_nonfinite(tensors: dict[str, torch.Tensor]) -> None:
    """BertError before a model is written when a weight is NaN or infinite: such a model is
    no result (it predicts nothing), and a run that made it must not end as if it had one."""
    bad = first_nonfinite(tensors)
    if bad is not None:
        raise BertError(f"the model's weights hold NaN or infinite values ({bad}): training "
                        "diverged, and no model was written; lower the learning rate")


# ------------------------------------------------------------------------------- helpers
def _write_safetensors(tensors: dict[str, torch.Tensor], path: Path) -> None:
    cpu = {name: t.detach().to("cpu").contiguous() for name, t in tensors.items()}
    data = safetensors_bytes(cpu, metadata={"format": "pt"})  # "pt": what transformers expects
    with atomic_file(path, "wb") as handle:
        handle.write(data)


def _tokenizer_files(vocab_dir: Path, config: BertConfig) -> list[Path]:
    if not vocab_dir.is_dir():
        raise BertError(f"vocab directory not found: {vocab_dir}")
    files = [vocab_dir / name for name in TOKENIZER_FILES if (vocab_dir / name).is_file()]
    if not any(f.name in ("vocab.txt", "tokenizer.json") for f in files):
        raise BertError(f"no tokenizer (tokenizer.json or vocab.txt) in {vocab_dir}")
    vocab_txt = vocab_dir / "vocab.txt"
    if vocab_txt.is_file():
        size = sum(1 for _ in vocab_txt.open(encoding="utf-8"))
        if size > config.vocab_size:
            raise BertError(
                f"{vocab_txt} has {size} tokens but the model only {config.vocab_size}: "
                "export with the vocab the model was trained with"
            )
    return files

