"""A masked language model and its tokenizer as one thing that scores masked positions: text
to ids (with [CLS] and [SEP], checked to fit the model; with the words its tokens make up, a
`TokenizedSentence`), and the log-probabilities over the vocabulary at given positions of
padded batches, in eval mode and without gradients."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

from bertcore.common.errors import BertError
from bertcore.model.bert import BertPretrainingModel

MASK, CLS, SEP, PAD, UNK = "[MASK]", "[CLS]", "[SEP]", "[PAD]", "[UNK]"


@dataclass(frozen=True)
class TokenizedSentence:
    """A sentence's ids, [CLS] first and [SEP] last, and its words: a word is the tokens
    `ids[start:end]` the tokenizer made of one pre-tokenized word (BERT's: a token and its
    `##` continuations; a punctuation mark is a word of its own), [CLS] and [SEP] in none."""

    ids: tuple[int, ...]
    words: tuple[tuple[int, int], ...]  # (start, end) of each word, in order

    def word_tokens(self) -> list[tuple[int, ...]]:
        """Each word's ids, in order."""
        return [self.ids[start:end] for start, end in self.words]


@dataclass
class MaskedLM:
    model: BertPretrainingModel
    tokenizer: Tokenizer
    device: torch.device | str = "cpu"
    batch_size: int = 256  # rows (masked copies) per forward pass
    # the encoder on the real tokens alone: the same scores; off, as its batches are sorted by
    # length and pad little (benchmarks/probe_pll.py measured 0.91x the padded pass)
    unpad: bool = False

    def __post_init__(self):
        self.model.eval()
        ids = {token: self.tokenizer.token_to_id(token) for token in (MASK, CLS, SEP, PAD)}
        missing = [token for token, i in ids.items() if i is None]
        if missing:
            raise BertError(f"the tokenizer has no {missing[0]} token: is it a BERT tokenizer?")
        self.mask_id, self.cls_id, self.sep_id, self.pad_id = ids.values()
        self.unk_id = self.tokenizer.token_to_id(UNK)
        # ids past the tokenizer (embeddings padded to a round size) are no token to predict
        self.vocab_size = self.tokenizer.get_vocab_size()
        self.special_ids = {i for i in (*ids.values(), self.unk_id) if i is not None}
        # The cloze's candidates: whole-word tokens (alphabetic, no ## piece, no special token),
        # the set the frequency baseline guesses from, so that both rank the same words.
        self.word_mask = torch.tensor([self.is_word(i) for i in range(self.vocab_size)],
                                      dtype=torch.bool)

    def is_word(self, token_id: int) -> bool:
        """A whole-word token: alphabetic (so no ## piece and no punctuation), not special."""
        token = self.tokenizer.id_to_token(token_id)
        return token_id not in self.special_ids and bool(token) and token.isalpha()

    @property
    def max_tokens(self) -> int:
        return self.model.config.max_position_embeddings

    def word_ids(self, text: str) -> list[int]:
        """The ids of `text` alone, without [CLS] and [SEP]."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode(self, text: str) -> list[int]:
        """[CLS] text [SEP] as ids; a BertError (the caller says where) when too long."""
        return self._fitting([self.cls_id, *self.word_ids(text), self.sep_id])

    def tokenize(self, text: str) -> TokenizedSentence:
        """[CLS] text [SEP] as ids (as `encode`) with the words its tokens make up: the
        tokenizer's word ids, a run of tokens with the same one a word."""
        encoding = self.tokenizer.encode(text, add_special_tokens=False)
        ids = self._fitting([self.cls_id, *encoding.ids, self.sep_id])
        words: list[tuple[int, int]] = []
        for position, word in enumerate(encoding.word_ids, start=1):
            if words and word is not None and word == encoding.word_ids[words[-1][0] - 1]:
                words[-1] = (words[-1][0], position + 1)
            else:
                words.append((position, position + 1))
        return TokenizedSentence(tuple(ids), tuple(words))

    def _fitting(self, ids: list[int]) -> list[int]:
        if len(ids) > self.max_tokens:
            raise BertError(f"it has {len(ids)} tokens, the model takes at most "
                            f"{self.max_tokens}")
        return ids

    def single_token(self, word: str) -> int | None:
        """The id of `word` when the tokenizer makes it one known token (after its own
        normalisation, e.g. lower-casing), else None."""
        ids = self.word_ids(word)
        return ids[0] if len(ids) == 1 and ids[0] != self.unk_id else None

    def word_token(self, word: str) -> int | None:
        """The id of `word` when it is one whole-word token (`is_word`), else None."""
        token_id = self.single_token(word)
        return token_id if token_id is not None and self.is_word(token_id) else None

    @torch.no_grad()
    def log_probs_at(self, blocks: Sequence[torch.Tensor], positions: torch.Tensor
                     ) -> torch.Tensor:
        """Log-probabilities [N, vocabulary] at `positions[i]` of the i-th row of `blocks`
        (2-d id tensors, rows of one length each, lengths differing between blocks), padded
        here with an attention mask and run in one forward pass (unpadded inside, `unpad`)."""
        width = max(block.shape[1] for block in blocks)
        input_ids = torch.cat([F.pad(block, (0, width - block.shape[1]), value=self.pad_id)
                               for block in blocks])
        attention = torch.cat([F.pad(torch.ones_like(block), (0, width - block.shape[1]))
                               for block in blocks])
        input_ids, attention = input_ids.to(self.device), attention.to(self.device)
        hidden = self.model.encode(input_ids, attention_mask=attention, unpad=self.unpad)
        rows = torch.arange(len(input_ids), device=self.device)
        at = hidden[rows, positions.to(self.device)]
        logits = self.model.mlm_head(at, self.model.embeddings.tokens.weight)
        return logits[:, : self.vocab_size].float().log_softmax(dim=-1).cpu()
