"""`bert export`: the pretrained model as a Hugging Face `BertForPreTraining` folder, with the
tokenizer files, loadable by `transformers` with `from_pretrained`."""

from __future__ import annotations

import click

from bertcore.atomic import atomic_dir
from bertcore.errors import BertError
from bertcore.hf import export_hf, load_model
from bertcore.vocab import read_vocab
from stages.options import stage_options
from stages.params import load_params


@click.command()
@click.option("--model", "model_dir", default="models/pretrained", show_default=True,
              type=click.Path(file_okay=False), help="Model folder (from `bert pretrain`).")
@click.option("--vocab", "vocab_dir", default="data/vocab", show_default=True,
              type=click.Path(file_okay=False), help="Vocabulary folder (tokenizer files).")
@click.option("--out", "out_dir", default="models/hf", show_default=True,
              type=click.Path(file_okay=False), help="Where the Hugging Face folder goes.")
@stage_options
def command(model_dir, vocab_dir, out_dir, params_file, overrides):
    """Export to Hugging Face format: config.json, model.safetensors, tokenizer files."""
    params = load_params(params_file, overrides)
    if params.get("export"):
        key = sorted(params["export"])[0]
        raise BertError(f"export.{key}: unknown key; the export section takes no keys yet")
    model = load_model(model_dir)
    tokens = read_vocab(vocab_dir)
    if model.config.vocab_size != len(tokens):
        raise BertError(f"the model in {model_dir} has {model.config.vocab_size} tokens, the "
                        f"vocabulary in {vocab_dir} {len(tokens)}: rerun `bert pretrain`")
    with atomic_dir(out_dir) as staging:
        export_hf(model, staging, vocab_dir)
    click.echo(f"export: Hugging Face BertForPreTraining -> {out_dir}", err=True)
