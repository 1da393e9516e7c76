"""`BertClassifier`: `BertEncoder`'s pooled output, dropout, and one dense layer (class logits or a regression value).

Invariant: the encoder's variables keep the paths of a pretraining model's (`bert/...`), so kbert and Google
checkpoints load into `model.encoder` unchanged; the outputs are float32 whatever the precision policy.

Example:

```python
model = BertClassifier(BertConfig.load("bert_base"), num_outputs=3)
model({"input_ids": ids, "input_mask": mask, "segment_ids": segments})  # [batch, 3] float32 logits
```
"""

from __future__ import annotations

import keras
from keras import ops

from kbert.modeling import BertConfig, BertEncoder
from kbert.modeling.embeddings import truncated_normal


class BertClassifier(keras.Model):
    """`num_outputs` logits for classification, or 1 output for regression, from the [CLS] pooled output.

    `dropout` defaults to the model's `hidden_dropout_prob` (0.1 in BERT's fine-tuning recipe).
    """

    def __init__(self, config: BertConfig, num_outputs: int, dropout: float | None = None, **kwargs):
        kwargs.setdefault("name", "bert_classifier")
        super().__init__(**kwargs)
        self.config = config
        self.num_outputs = num_outputs
        self.dropout_rate = config.hidden_dropout_prob if dropout is None else dropout
        self.encoder = BertEncoder(config, dtype=self.dtype_policy, name="bert")
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=self.dtype_policy)
        self.classifier = keras.layers.Dense(num_outputs, kernel_initializer=truncated_normal(config),
                                             dtype=self.dtype_policy, name="classifier")
        self.classifier.build((None, config.hidden_size))
        self.built = True

    def call(self, inputs, training=None):
        pooled = self.encoder(inputs, training=training)["pooled_output"]
        return ops.cast(self.classifier(self.dropout(pooled, training=training)), "float32")
