"""`BertClassifier`: a `BertEncoder`'s pooled output, dropout, and one dense layer (class logits or a regression value).

Invariant: the classifier is keras-hub's task pattern, a head around a backbone it is handed, and serialises as one:
`get_config` holds the encoder's own serialised config next to the head's arguments, so `model.save("m.keras")` and
`keras.saving.load_model` rebuild it. The encoder's variables keep a pretraining model's paths (`bert/...`), so kbert
and Google checkpoints load into `model.encoder` unchanged; the outputs are float32 whatever the precision policy.

Example:

```python
model = BertClassifier(BertEncoder(BertConfig.load("bert_base")), num_outputs=3)
model({"input_ids": ids, "input_mask": mask, "segment_ids": segments})  # [batch, 3] float32 logits
```
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from kbert.errors import ConfigError
from kbert.modeling import BertEncoder
from kbert.modeling.embeddings import truncated_normal


@keras.saving.register_keras_serializable(package="kbert")
class BertClassifier(keras.Model):
    """`num_outputs` logits for classification, or 1 output for regression, from the [CLS] pooled output.

    Args:
        encoder: the backbone; the head computes in its dtype policy.
        num_outputs: the number of classes, or 1 for regression.
        dropout: the rate before the dense layer; defaults to the encoder's `hidden_dropout_prob` (0.1 in BERT's
            fine-tuning recipe).
    """

    def __init__(self, encoder: BertEncoder, num_outputs: int, dropout: float | None = None, **kwargs):
        if encoder.pooler is None:
            raise ConfigError(
                "kbert-finetune classifies from the pooled [CLS] output, and this model has no pooler (sentence_head: "
                "false, as ModernBERT's); fine-tuning such models is not supported yet."
            )
        kwargs.setdefault("name", "bert_classifier")
        super().__init__(**kwargs)
        config = encoder.config
        self.encoder = encoder
        self.num_outputs = num_outputs
        self.dropout_rate = config.hidden_dropout_prob if dropout is None else dropout
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=encoder.dtype_policy)
        self.classifier = keras.layers.Dense(
            num_outputs,
            kernel_initializer=truncated_normal(config.initializer_range),
            dtype=encoder.dtype_policy,
            name="classifier",
        )
        self.classifier.build((None, config.hidden_size))
        self.built = True

    def call(self, inputs, training=None):
        pooled = self.encoder(inputs, training=training)["pooled_output"]
        return ops.cast(self.classifier(self.dropout(pooled, training=training)), "float32")

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "encoder": keras.saving.serialize_keras_object(self.encoder),
            "num_outputs": self.num_outputs,
            "dropout": self.dropout_rate,
        }

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> BertClassifier:
        config = dict(config)
        return cls(keras.saving.deserialize_keras_object(config.pop("encoder")), **config)
