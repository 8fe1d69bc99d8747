"""The `probe:` section of params.yaml."""

from __future__ import annotations

from typing import Literal

from bertcore.common.validation import Int, integer, params_section, text

PathText = text(allowed="a path", min_length=1)


@params_section
class ProbeConfig:
    """What `bert probe` scores, and how."""

    # null: the pipeline's models/pretrained (with data/vocab); or a BERT folder in Hugging
    # Face format with its tokenizer (Google's BERT-tiny, an export), scored by the same code
    model: PathText | None = None
    minimal_pairs: PathText | None = None  # BLiMP JSON Lines: a file or a folder of *.jsonl
    cloze: PathText | None = None  # LAMA JSON Lines: a file or a folder of *.jsonl
    builtin_sentences: integer(ge=0) = 500  # held-out val sentences probed (0: none)
    seed: Int = 12345  # which val sentences, which word of each, which replacement
    batch_size: integer(ge=1) = 256  # masked copies per forward pass
    # which score tells a minimal pair apart in each probe's `accuracy` (both are scored and
    # reported: `accuracy_pll`, `accuracy_pll_word_l2r`): pll_word_l2r (Kauf & Ivanova 2023)
    # masks the rest of a word with each of its pieces; pll (Salazar et al. 2020) one token
    scoring: Literal["pll_word_l2r", "pll"] = "pll_word_l2r"
