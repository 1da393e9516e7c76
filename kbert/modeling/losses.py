"""BERT pretraining loss as reducible sums, so a distributed loop can normalise over the global batch."""

from __future__ import annotations

from typing import Mapping

from keras import ops

LOSS_TERMS = ("mlm_loss_sum", "mlm_weight_sum", "mlm_correct_sum", "nsp_loss_sum", "nsp_correct_sum", "nsp_count")
METRICS = ("loss", "masked_lm_loss", "masked_lm_accuracy", "next_sentence_loss", "next_sentence_accuracy")

# Google's denominator guard: an all-padding batch gives loss 0, not NaN.
MLM_EPSILON = 1e-5


def pretraining_loss_terms(batch: Mapping, outputs: Mapping) -> dict:
    """Per-replica float32 sums of the masked-LM and next-sentence losses and hits.

    Example:

    ```python
    terms = pretraining_loss_terms(batch, model(batch))
    metrics = pretraining_metrics(terms)  # or after all-reducing each term across replicas
    ```
    """
    mlm_logits = ops.cast(outputs["mlm_logits"], "float32")
    nsp_logits = ops.cast(outputs["nsp_logits"], "float32")
    mlm_ids = ops.cast(batch["masked_lm_ids"], "int32")
    weights = ops.cast(batch["masked_lm_weights"], "float32")
    nsp_labels = ops.reshape(ops.cast(batch["next_sentence_labels"], "int32"), (-1,))

    mlm_ce = ops.sparse_categorical_crossentropy(mlm_ids, mlm_logits, from_logits=True)
    mlm_hits = ops.cast(ops.equal(ops.argmax(mlm_logits, axis=-1), mlm_ids), "float32")
    nsp_ce = ops.sparse_categorical_crossentropy(nsp_labels, nsp_logits, from_logits=True)
    nsp_hits = ops.cast(ops.equal(ops.argmax(nsp_logits, axis=-1), nsp_labels), "float32")
    return {
        "mlm_loss_sum": ops.sum(weights * mlm_ce),
        "mlm_weight_sum": ops.sum(weights),
        "mlm_correct_sum": ops.sum(weights * mlm_hits),
        "nsp_loss_sum": ops.sum(nsp_ce),
        "nsp_correct_sum": ops.sum(nsp_hits),
        "nsp_count": ops.cast(ops.shape(nsp_labels)[0], "float32"),
    }


def pretraining_metrics(terms: Mapping) -> dict:
    """`loss` = weighted MLM cross-entropy `sum(w*ce)/(sum(w)+1e-5)` + mean NSP cross-entropy, and accuracies."""
    mlm_loss = terms["mlm_loss_sum"] / (terms["mlm_weight_sum"] + MLM_EPSILON)
    nsp_loss = ops.divide_no_nan(terms["nsp_loss_sum"], terms["nsp_count"])
    return {
        "loss": mlm_loss + nsp_loss,
        "masked_lm_loss": mlm_loss,
        "masked_lm_accuracy": ops.divide_no_nan(terms["mlm_correct_sum"], terms["mlm_weight_sum"]),
        "next_sentence_loss": nsp_loss,
        "next_sentence_accuracy": ops.divide_no_nan(terms["nsp_correct_sum"], terms["nsp_count"]),
    }
