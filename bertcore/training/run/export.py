"""The export stage: the pretrained model as a Hugging Face `BertForPreTraining` folder with its
tokenizer, its model card (README.md: `card.py`), whose figures are the reports in the
metrics folder made from these very weights, the sentence-transformers configuration that
embeds a text by mean pooling (`saved/sentence_embeddings.py`) and, when asked, the encoder
as ONNX (`saved/onnx_export.py`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bertcore.common.atomic import atomic_dir
from bertcore.saved.card import write_card
from bertcore.saved.card_meta import CardMeta
from bertcore.saved.hf import export_hf
from bertcore.saved.onnx_export import ONNX_DIR, export_onnx, require_exporter
from bertcore.saved.pretrained import load_pretrained
from bertcore.saved.run_reports import weights_sha256
from bertcore.saved.sentence_embeddings import write_sentence_config
from bertcore.training.run.card import pretrained_facts, read_report

REPORT_GROUPS = ("pretrain", "eval", "probe", "glue")  # metrics/<group>.json


def model_reports(metrics_dir: str | Path, weights: str | None) -> dict[str, tuple[dict, dict]]:
    """The reports in `metrics_dir` made from the weights of sha256 `weights`, by group:
    pretrain's too, whose details name the weights it wrote (a side run's, or an older
    run's, describe other weights)."""
    reports = {group: read_report(Path(metrics_dir) / f"{group}.json", group, weights)
               for group in REPORT_GROUPS}
    return {group: report for group, report in reports.items() if report is not None}


def export_pretrained(model_dir: str | Path, vocab_dir: str | Path, out_dir: str | Path,
                      metrics_dir: str | Path, reproduce: Mapping[str, Any],
                      meta: CardMeta, onnx: bool = False) -> list[str]:
    """Write `out_dir` whole: the Hugging Face folder, its card (`meta`: its name, licence,
    language and corpus), the sentence-transformers files and, with `onnx`,
    `onnx/model.onnx`; returns the groups of the reports the card shows. An earlier export's
    `onnx/` is replaced, or removed by one without it."""
    if onnx:
        require_exporter()  # before any work
    model, _ = load_pretrained(model_dir, vocab_dir)
    reports = model_reports(metrics_dir, weights_sha256(model_dir))
    facts = pretrained_facts(model.config, str(out_dir), reports, reproduce, meta)
    with atomic_dir(out_dir, layout=(ONNX_DIR,)) as staging:
        export_hf(model, staging, vocab_dir)
        write_card(staging, facts)
        write_sentence_config(staging, model.config)
        if onnx:
            export_onnx(staging)
    return list(reports)
