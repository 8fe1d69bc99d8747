"""BERT for sequence(-pair) classification, as transformers' BertForSequenceClassification:
the encoder, the tanh pooler over [CLS], dropout, one linear layer to the labels; with no
labels, a regression head of one output (transformers' `problem_type="regression"`, STS-B).

The encoder and pooler have the same parameter names as `BertPretrainingModel`, so a pretrained
model's weights load into it by name (its MLM and NSP heads are left behind);
`bertcore.saved.hf.export_hf_classifier` writes it in Hugging Face's format.
"""

from __future__ import annotations

import torch
from torch import nn

from bertcore.common.errors import require
from bertcore.model.bert import BertConfig, BertPretrainingModel, Embeddings, EncoderLayer, Pooler


class BertForSequenceClassification(nn.Module):
    def __init__(self, config: BertConfig, labels: list[str]):
        super().__init__()
        require(len(labels) != 1, "labels", labels, "at least two classes, or none (regression)")
        self.config = config
        self.labels = list(labels)  # class index -> label name (id2label); [] for regression
        self.embeddings = Embeddings(config)
        layers = range(config.num_hidden_layers)
        self.layers = nn.ModuleList(EncoderLayer(config, i) for i in layers)
        self.pooler = Pooler(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)  # HF: classifier_dropout=None
        self.classifier = nn.Linear(config.hidden_size, len(labels) or 1)
        self.apply(self._init_weights)

    # BERT's init, the encoder pass, AdamW's groups and the count are exactly those of the
    # pretraining model (they only read config, embeddings, layers and parameters), so they
    # are shared rather than copied.
    _init_weights = BertPretrainingModel._init_weights
    encode = BertPretrainingModel.encode
    param_groups = BertPretrainingModel.param_groups
    num_parameters = BertPretrainingModel.num_parameters

    @property
    def is_regression(self) -> bool:
        return not self.labels

    @classmethod
    def from_pretrained_model(
        cls, pretrained: BertPretrainingModel, labels: list[str]
    ) -> BertForSequenceClassification:
        """Encoder and pooler from `pretrained`; the classifier layer freshly initialised."""
        model = cls(pretrained.config, labels)
        result = model.load_state_dict(pretrained.state_dict(), strict=False)  # heads left out
        assert set(result.missing_keys) == {"classifier.weight", "classifier.bias"}, result
        return model.to(next(pretrained.parameters()).device)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        unpad: bool = False,
    ) -> torch.Tensor:
        """Logits [B, num_labels] ([B, 1] for regression: the predicted value). `unpad`: the
        encoder on the real tokens alone (`BertPretrainingModel.encode`)."""
        pooled = self.pooler(self.encode(input_ids, token_type_ids, attention_mask, unpad))
        return self.classifier(self.dropout(pooled))
