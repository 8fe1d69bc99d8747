"""`bert export`: the pretrained model as a Hugging Face `BertForPreTraining` folder, with the
tokenizer files, loadable by `transformers` with `from_pretrained`, a model card
(README.md) with what made it and the figures of evaluate, probe and GLUE (the reports in
`--metrics-dir` made from these weights) beside their baselines, the files with which
`sentence_transformers.SentenceTransformer` loads it (mean pooling) and, with
`export.onnx: true`, the encoder as ONNX (`onnx/model.onnx`)."""

from __future__ import annotations

import os

import click

from bertcore.common.errors import BertError
from bertcore.data.corpus.config import CorpusConfig
from bertcore.data.samples.config import SamplesConfig
from bertcore.data.vocab.config import VocabConfig
from bertcore.model.config import ModelConfig
from bertcore.saved.config import CardConfig, ExportConfig
from bertcore.training.config import MaskingConfig, Phase2Config, TrainConfig
from bertstages.apart import keep_outputs_apart
from bertstages.options import folder_option, pretrained_option, stage_options, vocab_option
from bertstages.params import load_params, read_params

# What the stage reads of params.yaml (dvc.yaml lists the same: tests/test_stage_params.py):
# export's own, the card's metadata, and the sections that make the model, which its card lists
PARAMS = {"export": ExportConfig, "card": CardConfig, "corpus": CorpusConfig,
          "vocab": VocabConfig, "samples": SamplesConfig, "model": ModelConfig,
          "masking": MaskingConfig, "train": TrainConfig, "phase2": Phase2Config}


@click.command()
@pretrained_option
@vocab_option
@folder_option("--out", "out_dir", "models/hf", "Where the Hugging Face folder goes.")
@folder_option("--metrics-dir", "metrics_dir", "metrics",
               "The reports the model card shows (pretrain, eval, probe, glue .json).",
               reads=True)
@stage_options
def command(model_dir, vocab_dir, out_dir, metrics_dir, params_file, overrides):
    """Export to Hugging Face format: config.json, model.safetensors, tokenizer files, README.md."""
    params = load_params(params_file, overrides, PARAMS)
    sections = read_params(params, PARAMS)
    keep_outputs_apart()
    if not os.path.isdir(metrics_dir) and click.get_current_context().get_parameter_source(
            "metrics_dir") is not click.core.ParameterSource.DEFAULT:
        raise BertError(f"--metrics-dir {metrics_dir} does not exist: point it at the folder "
                        "of the reports the card shows (pretrain.json, eval.json, ...)")
    # torch, once the params are read (cli.py)
    from bertcore.saved.card_meta import card_meta
    from bertcore.training.run.export import export_pretrained

    reproduce = {name: params[name] for name in PARAMS
                 if name not in ("export", "card") and name in params}
    meta = card_meta(sections["card"], sections["corpus"].source)
    onnx = sections["export"].onnx
    shown = export_pretrained(model_dir, vocab_dir, out_dir, metrics_dir, reproduce, meta, onnx)
    none = ("no report made from these weights" if os.path.isdir(metrics_dir)
            else f"no reports: {metrics_dir} does not exist")
    click.echo(f"export: Hugging Face BertForPreTraining with its model card ("
               f"{', '.join(shown) or none}), sentence-transformers files"
               f"{', onnx/model.onnx' if onnx else ''} -> {out_dir}", err=True)
