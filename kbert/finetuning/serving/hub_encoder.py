"""The TF Hub encoder SavedModel's object: `input_word_ids`, `input_mask`, `input_type_ids` in; BERT's outputs out.

Invariant: the object computes `BertEncoder` itself (its layers are what the functions trace, GELU included), under
the interface of Model Garden's `export_tfhub` (tf-models-official 2.20, `export_model`):

- the object itself, `(inputs, training=False)`: int32 `[batch, seq]` inputs -> float32 `pooled_output`
  `[batch, width]`, `default` (the same), `sequence_output` `[batch, seq, width]` and `encoder_outputs`, the list
  of every block's output; `training=True` applies dropout (fine-tuning through `hub.KerasLayer(trainable=True)`);
- `mlm` (where the checkpoint holds a masked-LM head): the same inputs plus `masked_lm_positions` int32
  `[batch, predictions]` -> the same outputs (no `default`) and `mlm_logits` `[batch, predictions, vocab]`;
- `vocab_file` (an asset), `do_lower_case` (a bool variable), and TF Hub's reusable-SavedModel attributes
  `variables`, `trainable_variables`, `regularization_losses`.

Example:

```python
hub_encoder = HubEncoder(pretrainer.encoder, pretrainer.mlm_head, "vocab.txt", lower_case=True)
tf.saved_model.save(hub_encoder, "export/encoder", signatures={"serving_default": hub_encoder.serving_default})
```
"""

from __future__ import annotations

import tensorflow as tf

from kbert.finetuning.serving.hub_preprocess import HUB_NAMES
from kbert.modeling import BertEncoder
from kbert.modeling.heads import MaskedLMHead

INPUTS = {name: tf.TensorSpec([None, None], tf.int32, name=name) for name in HUB_NAMES.values()}
MLM_INPUTS = {**INPUTS, "masked_lm_positions": tf.TensorSpec([None, None], tf.int32, name="masked_lm_positions")}


def _encode(encoder: BertEncoder, inputs: dict, training: bool) -> dict:
    outputs = encoder({ours: inputs[hub] for ours, hub in HUB_NAMES.items()}, training=training)
    return tf.nest.map_structure(lambda t: tf.cast(t, tf.float32), outputs)


class _Reusable(tf.train.Checkpoint):
    """A SavedModel object with `__call__`, traced with and without dropout, and the attributes `hub.KerasLayer`
    reads. A tf.train.Checkpoint, not a tf.Module: tf.Module keeps `variables` for a property of its own."""

    def __init__(self, layers: list, call, spec: dict):
        super().__init__()
        self.variables = [v for layer in layers for v in layer.variables]
        self.trainable_variables = [v for layer in layers for v in layer.trainable_variables]
        self.regularization_losses = []
        self.__call__ = tf.function(call)
        for training in (False, True):
            self.__call__.get_concrete_function(spec, training=training)


class HubEncoder(_Reusable):
    """The encoder SavedModel's root (see the module docstring); `mlm_head` None leaves `mlm` out."""

    def __init__(self, encoder: BertEncoder, mlm_head: MaskedLMHead | None, vocab_file: str, lower_case: bool):

        def call(inputs, training=False):
            outputs = _encode(encoder, inputs, training)
            return {"default": outputs["pooled_output"], **outputs}

        super().__init__([encoder], call, INPUTS)
        self.vocab_file = tf.saved_model.Asset(vocab_file)
        self.do_lower_case = tf.Variable(lower_case, trainable=False, name="do_lower_case")
        if mlm_head is not None:
            self.mlm = _masked_lm(encoder, mlm_head)

    @tf.function(input_signature=[INPUTS])
    def serving_default(self, inputs: dict) -> dict:
        """The root's outputs flat, as a serving signature needs them: `encoder_outputs_0`, `encoder_outputs_1`..."""
        outputs = self.__call__(inputs)
        flat = {name: value for name, value in outputs.items() if name != "encoder_outputs"}
        flat.update({f"encoder_outputs_{i}": value for i, value in enumerate(outputs["encoder_outputs"])})
        return flat


def _masked_lm(encoder: BertEncoder, head: MaskedLMHead) -> _Reusable:
    table = encoder.embeddings.word_embeddings.embeddings

    def call(inputs, training=False):
        outputs = _encode(encoder, inputs, training)
        logits = head(outputs["sequence_output"], inputs["masked_lm_positions"], table, training=training)
        return {**outputs, "mlm_logits": tf.cast(logits, tf.float32)}

    return _Reusable([encoder, head], call, MLM_INPUTS)
