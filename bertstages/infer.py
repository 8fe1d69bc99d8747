"""Commands people reach for once a model exists, on our export or any BERT dir in HF format:

bert fill-mask "Paris is the [MASK] of France."          (the pipeline's export, models/hf)
bert nsp --model DIR "It rained all day." "The streets were wet."
"""

from __future__ import annotations

from pathlib import Path

import click

from bertcore.common.errors import BertError

MASK, CLS, SEP = "[MASK]", "[CLS]", "[SEP]"
PIPELINE_MODEL = "models/hf"  # the export stage's output (dvc.yaml), the default --model

model_option = click.option(
    "--model", "model_dir", default=None, metavar="DIR",
    help=f"A model dir: our export, a saved model, or any BERT in HF format  [default: "
         f"{PIPELINE_MODEL}, the pipeline's export].")
vocab_option = click.option(
    "--vocab", "vocab_dir", default=None, metavar="DIR",
    help="Where the tokenizer files are, when the model dir has none (e.g. data/vocab); it "
         "must fit the model.")


@click.command("fill-mask")
@model_option
@vocab_option
@click.option("--top-k", default=5, show_default=True, type=click.IntRange(min=1))
@click.argument("text")
def fill_mask(model_dir: str | None, vocab_dir: str | None, top_k: int, text: str) -> None:
    """Predict the tokens hidden behind each [MASK] in TEXT (top-k with probabilities)."""
    import torch

    model_dir, model, tokenizer = load(model_dir, vocab_dir, "mlm")
    mask_id = special_id(tokenizer, MASK)
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    require_read(tokenizer, [ids], model_dir, vocab_dir, "the text")
    if mask_id not in ids:
        raise BertError(f"the text has no {MASK}: write {MASK} where a word should be guessed")
    limit = model.config.max_position_embeddings - 2
    if len(ids) > limit:
        if mask_id not in ids[:limit]:
            raise BertError(f"every {MASK} lies beyond the model's {limit + 2} positions")
        notice(f"the text has {len(ids) + 2} tokens; the model takes {limit + 2}: truncated")
        ids = ids[:limit]
    input_ids = torch.tensor([[special_id(tokenizer, CLS), *ids, special_id(tokenizer, SEP)]])
    positions = (input_ids[0] == mask_id).nonzero().flatten()
    with torch.no_grad():
        sequence = model.encode(input_ids)
        logits = model.mlm_head(sequence[0, positions], model.embeddings.tokens.weight)
        # ids past the tokenizer (embeddings padded to a round size) are no token to print
        probs = logits[:, : tokenizer.get_vocab_size()].softmax(dim=-1)
        top = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
    for n, (values, indices) in enumerate(zip(top.values, top.indices, strict=True), start=1):
        click.echo(f"{MASK} {n} of {len(positions)}:")
        for p, token_id in zip(values.tolist(), indices.tolist(), strict=True):
            click.echo(f"  {p:.4f}  {tokenizer.id_to_token(token_id)}")


@click.command("nsp")
@model_option
@vocab_option
@click.argument("sentence_a")
@click.argument("sentence_b")
def nsp(model_dir: str | None, vocab_dir: str | None, sentence_a: str, sentence_b: str) -> None:
    """Probability that SENTENCE_B follows SENTENCE_A (next sentence prediction)."""
    import torch

    model_dir, model, tokenizer = load(model_dir, vocab_dir, "nsp")
    if model.config.type_vocab_size < 2:
        raise BertError(f"{model_dir} has one segment type: it cannot score sentence pairs")
    a = tokenizer.encode(sentence_a, add_special_tokens=False).ids
    b = tokenizer.encode(sentence_b, add_special_tokens=False).ids
    empty = [name for name, ids in (("SENTENCE_A", a), ("SENTENCE_B", b)) if not ids]
    if empty:
        raise BertError(f"{' and '.join(empty)} {'is' if len(empty) == 1 else 'are'} empty: "
                        "give two sentences to score")
    require_read(tokenizer, [a, b], model_dir, vocab_dir, "the two sentences")
    limit = model.config.max_position_embeddings - 3
    if len(a) + len(b) > limit:
        notice(f"the pair has {len(a) + len(b) + 3} tokens; the model takes {limit + 3}: "
               "truncated (longest sentence first)")
        while len(a) + len(b) > limit:
            (a if len(a) >= len(b) else b).pop()
    cls, sep = special_id(tokenizer, CLS), special_id(tokenizer, SEP)
    input_ids = torch.tensor([[cls, *a, sep, *b, sep]])
    token_type_ids = torch.tensor([[0] * (len(a) + 2) + [1] * (len(b) + 1)])
    with torch.no_grad():
        nsp_logits = model(input_ids, token_type_ids).nsp_logits
    # Class 0 = "B follows A" (Google's and HF's convention).
    click.echo(f"P(B follows A) = {nsp_logits.softmax(dim=-1)[0, 0].item():.4f}")


# ------------------------------------------------------------------------------- helpers
def load(model_dir: str | None, vocab_dir: str | None, head: str):
    """(the folder, its model, its tokenizer) of --model, else of the pipeline's export, which
    must exist (`load_model_and_tokenizer`)."""
    from bertcore.saved.trained_model import load_model_and_tokenizer

    if model_dir is None:
        if not Path(PIPELINE_MODEL).is_dir():
            raise BertError(f"no model in {PIPELINE_MODEL}, the pipeline's export: run `dvc "
                            "repro export`, or pass --model DIR")
        model_dir = PIPELINE_MODEL
    return model_dir, *load_model_and_tokenizer(model_dir, vocab_dir, head)


def require_read(tokenizer, encoded: list[list[int]], model_dir: str, vocab_dir: str | None,
                 text: str) -> None:
    """Stop when the tokenizer reads most of the user's text as [UNK]: the answer would be
    the model's guess from nothing."""
    from bertcore.model.tokenizer import require_readable, tokenizer_folder, unknown_tokens

    folder = tokenizer_folder(Path(model_dir), Path(vocab_dir) if vocab_dir else None)
    require_readable(*unknown_tokens(tokenizer, encoded), folder, text)


def special_id(tokenizer, token: str) -> int:
    token_id = tokenizer.token_to_id(token)
    if token_id is None:
        raise BertError(f"the tokenizer has no {token} token: is it a BERT tokenizer?")
    return token_id


def notice(message: str) -> None:
    click.echo(f"Notice: {message}", err=True)
