"""The encoder of a Hugging Face BERT folder as an ONNX model: `onnx/model.onnx` inside the
folder, where the Hugging Face Hub's tools look for it (optimum, sentence-transformers'
`backend="onnx"`, transformers.js).

It is the folder's `BertModel` as transformers loads it (the encoder and the pooler of the
`BertForPreTraining` export; no MLM or NSP head): inputs `input_ids`, `attention_mask`,
`token_type_ids` (int64, `batch` x `sequence`), outputs `last_hidden_state` (`batch` x
`sequence` x hidden) and `pooler_output` (`batch` x hidden), both axes dynamic (a sequence at
most `max_position_embeddings` long). Exported by torch's exporter (`torch.export`, which
needs the packages `onnx` and `onnxscript`: the `onnx` extra), at float32; the same weights
and torch give the same bytes."""

from __future__ import annotations

import contextlib
import importlib.util
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch

from bertcore.common.atomic import atomic_file
from bertcore.common.errors import BertError
from bertcore.common.held_logs import logs_quiet

ONNX_DIR = "onnx"  # inside the export (atomic_dir's layout)
ONNX_FILE = f"{ONNX_DIR}/model.onnx"
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OUTPUTS = ("last_hidden_state", "pooler_output")
EXPORTER_PACKAGES = ("onnx", "onnxscript")
_ONE_FILE_LIMIT = 2**31 - (1 << 24)  # protobuf's 2 GB, less room for the graph
# The exporter's logs: each operator of torchvision it skips is a warning
_EXPORTER_LOGGERS = ("torch.onnx", "onnxscript", "onnx_ir")


def require_exporter() -> None:
    """BertError, in one line, when the exporter's packages are not installed."""
    missing = [name for name in EXPORTER_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise BertError(f"export.onnx needs {' and '.join(missing)}, which "
                        f"{'is' if len(missing) == 1 else 'are'} not installed: "
                        "pip install 'bertpretrain[onnx]'")


class _Encoder(torch.nn.Module):
    """BertModel with positional inputs and its two outputs as a tuple (what ONNX names)."""

    def __init__(self, bert: torch.nn.Module):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask, token_type_ids):
        out = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                        token_type_ids=token_type_ids)
        return out.last_hidden_state, out.pooler_output


def export_onnx(hf_dir: str | Path) -> Path:
    """Write `hf_dir/onnx/model.onnx` (atomically) from the BERT folder `hf_dir`; its path."""
    require_exporter()
    import transformers

    hf_dir = Path(hf_dir)
    # BertForPreTraining loads the export with no key left over; its `bert` is the BertModel
    with _no_progress_bar(transformers):
        bert = transformers.BertForPreTraining.from_pretrained(hf_dir).bert.eval()
    size = sum(p.numel() * p.element_size() for p in bert.parameters())
    if size >= _ONE_FILE_LIMIT:
        raise BertError(f"export.onnx: the encoder holds {size / 1e9:.1f} GB of weights, over "
                        "the 2 GB an ONNX file holds in one piece; export it without ONNX")
    config = bert.config
    length = min(8, config.max_position_embeddings)
    example = (torch.full((2, length), 1, dtype=torch.long),
               torch.ones(2, length, dtype=torch.long), torch.zeros(2, length, dtype=torch.long))
    axes = {0: torch.export.Dim("batch"),
            1: torch.export.Dim("sequence", max=config.max_position_embeddings)}
    # the exporter warns of what it does as asked (an axis named once for its three inputs)
    with torch.no_grad(), logs_quiet(_EXPORTER_LOGGERS), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(_Encoder(bert).eval(), example, dynamo=True, verbose=False,
                                    input_names=list(INPUTS), output_names=list(OUTPUTS),
                                    dynamic_shapes=(axes,) * len(INPUTS))
        data = program.model_proto.SerializeToString()
    path = hf_dir / ONNX_FILE
    path.parent.mkdir(exist_ok=True)
    with atomic_file(path, "wb") as handle:
        handle.write(data)
    return path


@contextlib.contextmanager
def _no_progress_bar(transformers) -> Iterator[None]:
    """Without transformers' bar of the weights it loads (the library prints nothing)."""
    shown = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            transformers.utils.logging.enable_progress_bar()
