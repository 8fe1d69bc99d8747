"""The sentence-transformers configuration beside a Hugging Face export: `modules.json`,
`sentence_bert_config.json` and `1_Pooling/config.json`, so that
`sentence_transformers.SentenceTransformer(folder)` loads the folder as it is (offline) and
embeds a text as the mean of the encoder's last hidden states over its real tokens (padding
left out): the encoder as `transformers.BertModel` loads it, then mean pooling. No
normalisation module: a user who wants unit vectors says `normalize_embeddings=True`.

The files name the modules by their classic paths (`sentence_transformers.models.*`), which
every version of sentence-transformers since 2 resolves; none of them is imported here."""

from __future__ import annotations

from pathlib import Path

from bertcore.common.atomic import write_json
from bertcore.model.bert import BertConfig

POOLING_DIR = "1_Pooling"
# What the export writes for sentence-transformers (atomic_dir's layout: `POOLING_DIR`)
SENTENCE_FILES = ("modules.json", "sentence_bert_config.json", f"{POOLING_DIR}/config.json")
POOLING_MODES = ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens",
                 "weightedmean_tokens", "lasttoken")


def write_sentence_config(out_dir: str | Path, config: BertConfig) -> None:
    """Write the three files into `out_dir` (a Hugging Face BERT folder with its tokenizer):
    the encoder, at up to `max_position_embeddings` tokens, then mean pooling."""
    out_dir = Path(out_dir)
    write_json(out_dir / "modules.json", [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": POOLING_DIR,
         "type": "sentence_transformers.models.Pooling"},
    ])
    # the tokenizer lower-cases (or not) as it was trained: sentence-transformers must not
    write_json(out_dir / "sentence_bert_config.json",
               {"max_seq_length": config.max_position_embeddings, "do_lower_case": False})
    (out_dir / POOLING_DIR).mkdir(exist_ok=True)
    write_json(out_dir / POOLING_DIR / "config.json", {
        "word_embedding_dimension": config.hidden_size,
        **{f"pooling_mode_{mode}": mode == "mean_tokens" for mode in POOLING_MODES},
        "include_prompt": True,
    })
