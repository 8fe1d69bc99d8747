"""`bert export`: the pretrained model as a Hugging Face `BertForPreTraining` folder, with the
tokenizer files, loadable by `transformers` with `from_pretrained`."""

from __future__ import annotations

import click

from bertcore.common.atomic import atomic_dir
from bertcore.model.config import ExportConfig
from bertstages.apart import keep_outputs_apart
from bertstages.options import (
    folder_option,
    pretrained_option,
    stage_options,
    stops_at_once,
    vocab_option,
)
from bertstages.params import load_params, read_params

# What the stage reads of params.yaml (dvc.yaml lists the same: tests/test_stage_params.py)
PARAMS = {"export": ExportConfig}


@click.command()
@pretrained_option
@vocab_option
@folder_option("--out", "out_dir", "models/hf", "Where the Hugging Face folder goes.")
@stage_options
@stops_at_once
def command(model_dir, vocab_dir, out_dir, params_file, overrides):
    """Export to Hugging Face format: config.json, model.safetensors, tokenizer files."""
    read_params(load_params(params_file, overrides), PARAMS)  # no keys yet: refuses any
    keep_outputs_apart()
    # torch, once the params are read (cli.py)
    from bertcore.model.hf import export_hf
    from bertcore.model.pretrained import load_pretrained

    model, _ = load_pretrained(model_dir, vocab_dir)
    with atomic_dir(out_dir) as staging:
        export_hf(model, staging, vocab_dir)
    click.echo(f"export: Hugging Face BertForPreTraining -> {out_dir}", err=True)
