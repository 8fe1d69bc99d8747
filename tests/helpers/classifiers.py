"""A fine-tuned folder scored by transformers alone: what a user who has only the folder gets."""

from __future__ import annotations

from pathlib import Path

import torch


def transformers_accuracy(folder: Path, examples) -> float:
    """The accuracy of `folder`'s `BertForSequenceClassification`, with its own tokenizer and
    id2label, on `examples` (each with `.text` and `.label`)."""
    import transformers

    model = transformers.BertForSequenceClassification.from_pretrained(folder).eval()
    tokenizer = transformers.BertTokenizerFast.from_pretrained(folder)
    inputs = tokenizer([e.text for e in examples], padding=True, return_tensors="pt")
    with torch.no_grad():
        predicted = model(**inputs).logits.argmax(-1).tolist()
    correct = sum(model.config.id2label[p] == e.label
                  for p, e in zip(predicted, examples, strict=True))
    return correct / len(examples)
