"""`BertPretrainer`: the encoder with masked-LM and next-sentence heads, trainable with `model.fit`."""

from __future__ import annotations

import keras

from kbert.modeling.config import BertConfig
from kbert.modeling.encoder import BertEncoder
from kbert.modeling.heads import SENTENCE_HEAD_INITIALIZER, MaskedLMHead, NextSentenceHead
from kbert.modeling.losses import METRICS, pretraining_loss_terms, pretraining_metrics
from kbert.modeling.packing import gather_tokens
from kbert.modeling.weight_names import WeightName


@keras.saving.register_keras_serializable(package="kbert")
class BertPretrainer(keras.Model):
    """BERT with its pretraining heads. Takes the batch dict of Google's TFRecord features.

    Weights exist right after construction (all shapes come from the config), so checkpoints can be loaded
    before the first call.

    Example:

    ```python
    model = BertPretrainer(BertConfig.load("bert_tiny"))
    model.compile(optimizer=kbert.optimizers.LAMB(1e-3))
    model.fit(kbert.data.pretraining_dataset("train.tfrecord-*", 128, 20, 32), steps_per_epoch=100)
    model(batch)["mlm_logits"].shape  # [B, max_predictions, vocab_size]
    ```
    """

    def __init__(self, config: BertConfig, stop_gradient_below: int = 0, dropout_below_cut: bool = True, **kwargs):
        kwargs.setdefault("name", "bert_pretrainer")
        super().__init__(**kwargs)
        self.config = config
        # The pooler is the sentence head's tanh layer in pretraining, drawn as its classifier is.
        self.encoder = BertEncoder(
            config,
            stop_gradient_below=stop_gradient_below,
            dropout_below_cut=dropout_below_cut,
            pooler_initializer=SENTENCE_HEAD_INITIALIZER,
            dtype=self.dtype_policy,
            name="bert",
        )
        self.mlm_head = MaskedLMHead(config, dtype=self.dtype_policy, name="predictions")
        self.nsp_head = (
            NextSentenceHead(config, dtype=self.dtype_policy, name="seq_relationship") if config.sentence_head else None
        )
        self._metric_trackers = [keras.metrics.Mean(name=name) for name in METRICS[1:]]
        self.built = True

    def call(self, inputs, training=None):
        """`mlm_logits` [B, P, V]; `nsp_logits` [B, 2], or [B, K, 2] on packed rows (each sequence's [CLS]), and
        none for MLM-only batches (no `next_sentence_labels`) or a model without a sentence head
        (`BertConfig.sentence_head`)."""
        encoded = self.encoder(inputs, training=training)
        table = self.encoder.embeddings.word_embeddings.embeddings
        outputs = {"mlm_logits": self.mlm_head(encoded["sequence_output"], inputs["masked_lm_positions"], table)}
        if "next_sentence_labels" not in inputs or self.nsp_head is None:
            return outputs
        pooled = encoded["pooled_output"]
        if "next_sentence_positions" in inputs:
            pooled = self.encoder.pooler(gather_tokens(encoded["sequence_output"], inputs["next_sentence_positions"]))
        outputs["nsp_logits"] = self.nsp_head(pooled)
        return outputs

    def weight_names(self) -> list[WeightName]:
        """Every weight's names (`kbert.modeling.weight_names`): the encoder's, then the heads'."""
        heads = self.mlm_head.weight_names() + (self.nsp_head.weight_names() if self.nsp_head is not None else [])
        return self.encoder.weight_names() + heads

    def sentence_head_variables(self) -> list:
        """The pooler's and the next-sentence head's weights: what MLM-only batches leave untouched (none in a
        masked-LM-only model)."""
        if self.nsp_head is None:
            return []
        return [*self.encoder.pooler.weights, *self.nsp_head.weights]

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        metrics = pretraining_metrics(pretraining_loss_terms(x, y_pred))
        for tracker in self._metric_trackers:
            tracker.update_state(metrics[tracker.name])
        return metrics["loss"] + sum(self.losses) if self.losses else metrics["loss"]

    def get_config(self):
        return {
            "config": self.config.to_dict(),
            "stop_gradient_below": self.encoder.stop_gradient_below,
            "dropout_below_cut": self.encoder.dropout_below_cut,
            "name": self.name,
            "dtype": keras.saving.serialize_keras_object(self.dtype_policy),
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if "dtype" in config:
            config["dtype"] = keras.saving.deserialize_keras_object(config["dtype"])
        return cls(BertConfig.from_dict(config.pop("config")), **config)
