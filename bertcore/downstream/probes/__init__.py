"""Zero-shot probes of a masked language model: what it knows of which word fits a slot,
read without fine-tuning.

- `masked_lm.py`: the model and its tokenizer as one scorer of masked positions, batched;
- `pll.py`: a sentence's pseudo-log-likelihood (Salazar et al. 2020) and PLL-word-l2r (Kauf &
  Ivanova 2023);
- `minimal_pairs.py`: BLiMP-style pairs (good above bad) scored by both;
- `differing_words.py`: the words a pair differs in, and whether one is split into pieces;
- `cloze.py`: LAMA-style cloze items, precision at 1 and 10;
- `frequencies.py`: token and word counts of the train split, the baselines they give;
- `builtin.py`: such probes made from any corpus's held-out val split;
- `probe_files.py`: reading the user's JSON Lines files, one line's error at a time;
- `probe_items.py`: what the model got on each item behind each figure, for the intervals;
- `probing.py`: all of them over one model, into one report (`run_probes`).
"""
