"""The TF Hub preprocessing SavedModel's object: strings in; `input_word_ids`, `input_mask`, `input_type_ids` out.

Invariant: the ids are exactly `PairEncoder`'s (its tokenizer and `pack` are what the functions trace), under the
interface of Model Garden's `export_tfhub` (tf-models-official 2.20, `create_preprocessing`):

- the object itself: `sentences` `[batch]` string -> the three int32 `[batch, seq_length]` inputs;
- `tokenize(sentences)`: int32 `[batch, (words), (pieces)]`; `tokenize.get_special_tokens_dict()`: int32 scalars
  `vocab_size`, `start_of_sequence_id`, `end_of_segment_id`, `padding_id`, `mask_id`;
- `bert_pack_inputs(segments, seq_length=default)`: one or two int32 ragged segments (ragged rank 1 or 2) -> the
  three inputs, a pair cut longest segment first (which is what Model Garden's round-robin trimmer keeps too).

Example:

```python
preprocessor = HubPreprocessor(PairEncoder("vocab.txt", seq_length=128))
tf.saved_model.save(preprocessor, "export/preprocess", signatures={"serving_default": preprocessor.__call__})
```
"""

from __future__ import annotations

import itertools

import tensorflow as tf

from kbert.finetuning.encoding import PairEncoder, pack

# kbert's batch keys -> TF Hub's input names.
HUB_NAMES = {"input_ids": "input_word_ids", "input_mask": "input_mask", "segment_ids": "input_type_ids"}
SENTENCES = tf.TensorSpec([None], tf.string, name="sentences")


def hub_inputs(batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """kbert's batch dict under TF Hub's names."""
    return {hub: batch[ours] for ours, hub in HUB_NAMES.items()}


def _words(pieces: tf.RaggedTensor, continuation: tf.Tensor) -> tf.RaggedTensor:
    """`[batch, (pieces)]` -> `[batch, (words), (pieces)]`: a word starts at each piece that is not a `##` one."""
    starts = ~tf.gather(continuation, pieces.flat_values)
    # A row's first piece starts a word whatever it is, so every piece belongs to a word of its own row.
    starts |= tf.ragged.range(pieces.row_lengths()).flat_values == 0
    word_of_piece = tf.cumsum(tf.cast(starts, tf.int64)) - 1
    words = tf.RaggedTensor.from_value_rowids(
        pieces.flat_values, word_of_piece, nrows=tf.reduce_sum(tf.cast(starts, tf.int64))
    )
    return tf.RaggedTensor.from_row_lengths(
        words, tf.reduce_sum(pieces.with_flat_values(tf.cast(starts, tf.int64)), axis=1)
    )


class _SpecialTokens(tf.Module):
    def __init__(self, ids: dict[str, int]):
        super().__init__()
        self._ids = ids

    @tf.function(input_signature=[])
    def __call__(self) -> dict[str, tf.Tensor]:
        return {name: tf.constant(value, tf.int32) for name, value in self._ids.items()}


class _Tokenize(tf.Module):
    def __init__(self, encoder: PairEncoder):
        super().__init__()
        self._encoder = encoder
        self._continuation = tf.constant([token.startswith("##") for token in encoder.vocab])
        self.get_special_tokens_dict = _SpecialTokens(
            {
                "vocab_size": encoder.vocab_size,
                "start_of_sequence_id": encoder.cls_id,
                "end_of_segment_id": encoder.sep_id,
                "padding_id": encoder.pad_id,
                "mask_id": encoder.vocab.index("[MASK]"),
            }
        )

    @tf.function(input_signature=[SENTENCES])
    def __call__(self, sentences: tf.Tensor) -> tf.RaggedTensor:
        return tf.cast(_words(self._encoder.tokenize(sentences), self._continuation), tf.int32)


class _PackInputs(tf.Module):
    def __init__(self, encoder: PairEncoder):
        super().__init__()

        # The default length is the encoder's, but a caller may ask for another: a Python default argument.
        @tf.function(autograph=False)
        def bert_pack_inputs(inputs, seq_length=encoder.seq_length):
            segments = [s.merge_dims(1, -1) if s.ragged_rank > 1 else s for s in inputs]
            return hub_inputs(pack(segments, seq_length, **encoder.special_ids))

        self.__call__ = bert_pack_inputs
        # Traced for what TF Hub preprocessors accept: one or two segments, of pieces or of words of pieces.
        for rank, count in itertools.product((1, 2), (1, 2)):
            segment = tf.RaggedTensorSpec([None] * (rank + 1), tf.int32, ragged_rank=rank, row_splits_dtype=tf.int64)
            bert_pack_inputs.get_concrete_function([segment] * count, seq_length=tf.TensorSpec([], tf.int32))


class HubPreprocessor(tf.Module):
    """The preprocessing SavedModel's root (see the module docstring); `encoder` fixes the vocabulary, the
    lower-casing and the default `seq_length`."""

    def __init__(self, encoder: PairEncoder):
        super().__init__()
        self._encoder = encoder
        self.tokenize = _Tokenize(encoder)
        self.bert_pack_inputs = _PackInputs(encoder)

    @tf.function(input_signature=[SENTENCES])
    def __call__(self, sentences: tf.Tensor) -> dict[str, tf.Tensor]:
        return hub_inputs(self._encoder.encode(sentences))
