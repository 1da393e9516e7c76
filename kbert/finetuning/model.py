"""`BertClassifier`: a `BertEncoder`'s pooled output, dropout, and one dense layer (class logits or a regression value);
for a model without a pooler (ModernBERT's), Hugging Face's `ModernBertForSequenceClassification` head.

Invariant: the classifier is keras-hub's task pattern, a head around a backbone it is handed, and serialises as one:
`get_config` holds the encoder's own serialised config next to the head's arguments, so `model.save("m.keras")` and
`keras.saving.load_model` rebuild it. The encoder's variables keep a pretraining model's paths (`bert/...`), so kbert
and Google checkpoints load into `model.encoder` unchanged; the outputs are float32 whatever the precision policy.
A model with a pooler classifies from it exactly as BERT does (`pooling` None); one without pools the last hidden
states (`pooling` "cls": the first token's; "mean": the mean over real tokens, `input_mask`), then computes
dense -> the config's `head_act` (ModernBERT's `classifier_activation`) -> LayerNorm (biases with
`head_use_bias`) -> dropout -> the dense layer, as transformers' ModernBERT classifier does.

Example:

```python
model = BertClassifier(BertEncoder(BertConfig.load("bert_base")), num_outputs=3)
model({"input_ids": ids, "input_mask": mask, "segment_ids": segments})  # [batch, 3] float32 logits
modern = BertClassifier(BertEncoder(BertConfig.load("modernbert_base")), 2, dropout=0.0, pooling="mean")
```
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from kbert.choices import CLASSIFIER_POOLINGS
from kbert.errors import ConfigError
from kbert.modeling import BertEncoder
from kbert.modeling.embeddings import truncated_normal
from kbert.modeling.heads import head_transform


def pool(sequence_output, input_mask, pooling: str):
    """`[batch, seq, hidden]` -> `[batch, hidden]`: the first token's output ("cls") or the mean over the tokens
    `input_mask` marks ("mean", summed in float32)."""
    if pooling == "cls":
        return sequence_output[:, 0, :]
    mask = ops.cast(input_mask, "float32")[:, :, None]
    total = ops.sum(ops.cast(sequence_output, "float32") * mask, axis=1)
    return ops.cast(total / ops.sum(mask, axis=1), sequence_output.dtype)


@keras.saving.register_keras_serializable(package="kbert")
class BertClassifier(keras.Model):
    """`num_outputs` logits for classification, or 1 output for regression, from the [CLS] pooled output, or from
    the pooled hidden states and a dense -> activation -> LayerNorm head where the encoder has no pooler.

    Args:
        encoder: the backbone; the head computes in its dtype policy.
        num_outputs: the number of classes, or 1 for regression.
        dropout: the rate before the dense layer; defaults to the encoder's `hidden_dropout_prob` (0.1 in BERT's
            fine-tuning recipe).
        pooling: for an encoder without a pooler, "cls" or "mean" (module invariant); None for one with a pooler.
    """

    def __init__(
        self, encoder: BertEncoder, num_outputs: int, dropout: float | None = None, pooling: str | None = None, **kwargs
    ):
        if (encoder.pooler is None) != (pooling is not None):
            raise ConfigError(
                f"model.classifier_pooling={pooling}: a model with a pooler classifies from its pooled [CLS] output; "
                "unset it."
                if pooling
                else "model.classifier_pooling is needed for a model without a pooler (sentence_head: false, as "
                "ModernBERT's): set cls or mean."
            )
        if pooling is not None and pooling not in CLASSIFIER_POOLINGS:
            raise ConfigError(f"model.classifier_pooling={pooling!r}: choose one of {', '.join(CLASSIFIER_POOLINGS)}.")
        kwargs.setdefault("name", "bert_classifier")
        super().__init__(**kwargs)
        config = encoder.config
        self.encoder = encoder
        self.num_outputs = num_outputs
        self.pooling = pooling
        self.dropout_rate = config.hidden_dropout_prob if dropout is None else dropout
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=encoder.dtype_policy)
        if pooling is not None:
            self.head_dense, self.head_norm = head_transform(config, encoder.dtype_policy, "head_dense", "head_norm")
            self.head_dense.build((None, config.hidden_size))
            self.head_norm.build((None, config.hidden_size))
        self.classifier = keras.layers.Dense(
            num_outputs,
            kernel_initializer=truncated_normal(config.initializer_range),
            dtype=encoder.dtype_policy,
            name="classifier",
        )
        self.classifier.build((None, config.hidden_size))
        self.built = True

    def call(self, inputs, training=None):
        encoded = self.encoder(inputs, training=training)
        if self.pooling is None:
            pooled = encoded["pooled_output"]
        else:
            pooled = pool(encoded["sequence_output"], inputs["input_mask"], self.pooling)
            pooled = self.head_norm(self.head_dense(pooled))
        return ops.cast(self.classifier(self.dropout(pooled, training=training)), "float32")

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "encoder": keras.saving.serialize_keras_object(self.encoder),
            "num_outputs": self.num_outputs,
            "dropout": self.dropout_rate,
            "pooling": self.pooling,
        }

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> BertClassifier:
        config = dict(config)
        return cls(keras.saving.deserialize_keras_object(config.pop("encoder")), **config)
