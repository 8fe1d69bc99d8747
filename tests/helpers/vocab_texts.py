"""Corpora and vocabularies for the vocab stage's tests: lines of prose with accents and CJK,
words each seen a given number of times, and BERT-layout token lists and tokenizer folders (a
`vocab.source`)."""

from __future__ import annotations

import random

PROSE = (
    "the quick brown fox jumps over a lazy dog while children play in the old park "
    "near river bank and birds sing songs about summer rain Café naïve résumé Über"
)


WORDS = PROSE.split()


CJK = ["我们喜欢自然语言处理。", "東京は日本の首都です。", "한국어 문장도 있습니다."]


def corpus_lines(seed: int = 0, n: int = 400) -> list[str]:
    rng = random.Random(seed)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14))) + "." for _ in range(n)]
    return lines + CJK * 5


def write_corpus(folder, lines) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    docs = [lines[i : i + 5] for i in range(0, len(lines), 5)]
    (folder / "train.txt").write_text("\n\n".join("\n".join(d) for d in docs) + "\n", "utf-8")


def word_lines(types: int, count: int, start: int = 0, seed: int = 0) -> list[str]:
    """Each of `types` distinct words (w<start>..) exactly `count` times, shuffled into lines
    of 10 words (with a capital and a full stop, which the normaliser and pre-tokeniser undo)."""
    words = [f"w{i}" for i in range(start, start + types)] * count
    random.Random(seed).shuffle(words)
    return [" ".join(words[i : i + 10]).capitalize() + "." for i in range(0, len(words), 10)]


# BERT's layout: [PAD] first, unused slots, then [UNK] [CLS] [SEP] [MASK] (ids 0, 3, 4, 5, 6)
LAYOUT = ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
LETTERS = list("abcdefghijklmnopqrstuvwxyz") + [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"]
COMMON = ["the", "quick", "brown", "fox", "jump", "##ed", "over", "lazy", "dog", "cafe",
          "café", "naive", ".", ",", "!", "?", "我", "们", "喜", "欢"]


def source_tokens(cased: bool) -> list[str]:
    extra = ["The", "Dog", "Café", "##S", "T", "D", "C"] if cased else []
    return LAYOUT + COMMON + extra + LETTERS


def save_source(folder, cased: bool = False):
    """A tokenizer folder as transformers' save_pretrained writes it (tokenizer.json and
    tokenizer_config.json, no vocab.txt in transformers 5)."""
    from transformers import BertTokenizerFast

    tokens = source_tokens(cased)
    hf = BertTokenizerFast(vocab={t: i for i, t in enumerate(tokens)}, do_lower_case=not cased)
    hf.save_pretrained(folder)
    return folder


def write_vocab_txt(path, tokens) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{t}\n" for t in tokens), encoding="utf-8")
