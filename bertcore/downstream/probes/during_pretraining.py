"""The built-in probes while pretraining: at each periodic evaluation (`train.eval_every`), the
held-out word cloze (P@1, P@10) and the swapped and close-frequency pairs (by PLL) of
`eval.probe_sentences` val sentences, beside the val MLM and NSP figures in
metrics/pretrain_eval.tsv and the MLflow run, so that a user sees the frequency plateau and
the step the model leaves it. The probes are drawn once (seeded by `eval.seed`) and scored by
the same code as the probe stage's (`builtin.py`, `cloze.py`, `minimal_pairs.py`), on fewer
sentences: the probe stage's figures are the ones to compare runs by. The pairs are scored by
PLL alone (`pll.py`), as before PLL-word-l2r came: the curves of earlier runs stay comparable,
and the cost of an evaluation does not grow.

The pretraining stage builds a `ProbeDraw` (what to draw from; training never imports this
package) and training calls `prepare(model)` once, then the result at every evaluation.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer

from bertcore.common.errors import BertError
from bertcore.downstream.probes.builtin import REPLACED, SWAPPED, BuiltinProbes, builtin_probes
from bertcore.downstream.probes.cloze import TOP_K, precision, score_cloze
from bertcore.downstream.probes.frequencies import TrainCounts, count_train
from bertcore.downstream.probes.masked_lm import MaskedLM
from bertcore.downstream.probes.minimal_pairs import pair_report, score_pairs
from bertcore.downstream.probes.pll import PLL
from bertcore.model.bert import BertPretrainingModel

log = logging.getLogger("bert.pretrain")


@dataclass(frozen=True)
class ProbeDraw:
    """What the probes are drawn from: `sentences` sentences of `val_file` (seeded), the
    frequencies of `train_file`, read with `tokenizer`."""

    tokenizer: Tokenizer
    val_file: Path
    train_file: Path
    sentences: int
    seed: int
    batch_size: int = 256  # masked copies per forward pass

    def prepare(self, model: BertPretrainingModel, device: torch.device
                ) -> PretrainingProbes | None:
        """The probes drawn for `model` (its tokenizer, its longest sequence), the model left
        in the mode it was in; None (with a warning) when the val split has nothing to probe."""
        was_training = model.training
        try:
            lm = MaskedLM(model, self.tokenizer, device, self.batch_size)
            counts = count_train(self.train_file, lm)
            probes = builtin_probes(self.val_file, lm, counts, self.sentences, self.seed,
                                    setting="eval.probe_sentences")
        except BertError as error:
            log.warning("no probes while pretraining: %s", error)
            return None
        finally:
            model.train(was_training)
        return PretrainingProbes(lm, counts, probes)


@dataclass(frozen=True)
class PretrainingProbes:
    lm: MaskedLM  # the model being trained, with its tokenizer
    counts: TrainCounts
    probes: BuiltinProbes

    def __call__(self, model: BertPretrainingModel) -> dict[str, float | None]:
        """The probes' figures for `model` (the one they were prepared for) as it is now,
        scored as the probe stage scores them (None over no item: an empty cell); the model
        is left in the mode it was in."""
        lm = self.lm if model is self.lm.model else MaskedLM(
            model, self.lm.tokenizer, self.lm.device, self.lm.batch_size)
        was_training = model.training
        model.eval()
        try:
            cloze = score_cloze(lm, self.probes.cloze, progress=False)
            pairs = score_pairs(lm, self.probes.pairs, self.counts, progress=False,
                                word_l2r=False)
        finally:
            model.train(was_training)
        swapped, replaced = ([s for s in pairs if s.pair.group == group]
                             for group in (SWAPPED, REPLACED))
        guess = self.counts.most_frequent(lm, 1)
        return {"cloze_p_at_1": precision(cloze, 1), "cloze_p_at_10": precision(cloze, TOP_K),
                "swapped_pairs": pair_report(swapped, PLL)[0]["accuracy"],
                "replaced_pairs": pair_report(replaced, PLL)[0]["accuracy"],
                # not logged: what training/evaluation/plateau.py judges the plateau by
                "cloze_frequency_p_at_1": precision(cloze, 1, guess),
                "swapped_pairs_n": len(swapped)}
