"""A tiny pretraining setup for the training tests: a synthetic corpus with learnable
structure (documents stay on one topic, so masked words and NSP are predictable), its vocab and
samples built in-process, and a tiny model config."""

from __future__ import annotations

import random
from pathlib import Path

import yaml

from bertcore.data.samples.build import build_samples
from bertcore.data.samples.config import SamplesConfig
from bertcore.data.vocab.config import VocabConfig
from bertcore.data.vocab.files import save_vocab, vocab_fingerprint
from bertcore.data.vocab.training import LineBatches, train_tokenizer
from bertcore.model.bert import BertConfig

TOPICS = {
    "farm": "cow horse sheep barn field tractor farmer hay",
    "sea": "ship sail wave harbor captain anchor fish island",
    "city": "street tower train bridge market crowd taxi office",
    "space": "rocket planet orbit star moon comet engine pilot",
    "forest": "tree wolf deer river moss owl path cabin",
    "kitchen": "bread oven knife soup spoon salt butter cook",
}
VERBS = ["sees", "finds", "likes", "follows", "paints", "carries", "watches", "counts"]
ADJECTIVES = ["big", "small", "red", "old", "quiet", "bright", "dark", "green"]


def corpus_documents(n: int, seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    docs = []
    for _ in range(n):
        words = TOPICS[rng.choice(sorted(TOPICS))].split()
        sentences = []
        for _ in range(rng.randint(6, 10)):
            a, b = rng.sample(words, 2)
            sentences.append(
                f"the {rng.choice(ADJECTIVES)} {a} {rng.choice(VERBS)} the {b} ."
            )
        docs.append(sentences)
    return docs


def write_corpus(folder: Path, train_docs: int = 60, val_docs: int = 12, seed: int = 0) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for split, n, s in (("train", train_docs, seed), ("val", val_docs, seed + 1)):
        docs = corpus_documents(n, s)
        text = "\n\n".join("\n".join(doc) for doc in docs) + "\n"
        (folder / f"{split}.txt").write_text(text, encoding="utf-8")


def build_data(root: Path, *, vocab_size: int = 96, max_seq_length: int = 32,
               dupe_factor: int = 2, train_docs: int = 60, val_docs: int = 12,
               phase2_length: int | None = None) -> Path:
    """data/corpus, data/vocab, data/samples under `root`; returns root/"data".
    `phase2_length`: also the samples of BERT's second phase, at that length, as the samples
    stage builds them with phase2 on (data/samples/phase2)."""
    data = root / "data"
    write_corpus(data / "corpus", train_docs, val_docs)
    vocab_config = VocabConfig(vocab_size=vocab_size, min_frequency=1)
    tokenizer = train_tokenizer(LineBatches(data / "corpus" / "train.txt"), vocab_config)
    (data / "vocab").mkdir(parents=True, exist_ok=True)
    save_vocab(tokenizer, data / "vocab")
    samples_config = SamplesConfig(max_seq_length=max_seq_length, dupe_factor=dupe_factor,
                                   workers=1)
    (data / "samples").mkdir(parents=True, exist_ok=True)
    corpus = {s: data / "corpus" / f"{s}.txt" for s in ("train", "val")}
    build_samples(corpus, tokenizer, data / "samples", samples_config,
                  vocab_fingerprint(data / "vocab"), phase2_length=phase2_length)
    return data


TINY_MODEL = dict(preset="tiny", hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                  intermediate_size=64, max_position_embeddings=64)


def tiny_config(vocab_size: int, dropout: float = 0.1, **changes) -> BertConfig:
    overrides = {k: v for k, v in TINY_MODEL.items() if k != "preset"}
    overrides.update(changes)
    return BertConfig.from_preset("tiny", vocab_size=vocab_size, hidden_dropout_prob=dropout,
                                  attention_probs_dropout_prob=dropout, **overrides)


def tiny_params(**sections) -> dict:
    """A params dict for the pretrain stage with tiny values; `sections` update sections."""
    params = {
        "model": dict(TINY_MODEL),
        "masking": {"mlm_probability": 0.15, "max_predictions_per_seq": 5, "whole_word": False},
        "train": {"max_steps": 8, "batch_size": 8, "learning_rate": 0.003, "warmup_steps": 2,
                  "log_every": 2, "eval_every": 4, "checkpoint_every": 4, "keep_last": 2,
                  "seed": 7, "nproc_per_node": 1},
        # 30 of the probes' sentences (100 by default): their code runs all the same
        "eval": {"batch_size": 16, "seed": 3, "probe_sentences": 30},
        "tracking": {"uri": None, "experiment": "tiny", "log_checkpoints": "last"},
    }
    for name, values in sections.items():
        params.setdefault(name, {}).update(values)
    return params


def write_params(path: Path, **sections) -> dict:
    params = tiny_params(**sections)
    path.write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    return params
