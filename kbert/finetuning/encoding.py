"""Tokenization and packing inside tf.data: `[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]`, padded to `seq_length`.

Invariant: a pair longer than `seq_length - 3` word pieces is cut from the end of the longer segment, one piece at
a time, exactly as google-research/bert's `_truncate_seq_pair` does (ties cut `b`); in closed form the kept
lengths are `a' = min(a, max(m - b, ceil(m / 2)))` and `b' = min(b, m - a')`. A single segment keeps its first
`seq_length - 2` pieces. Batches are the `BertEncoder` batch dict (`input_ids`, `input_mask`, `segment_ids`, int32).

Example:

```python
encoder = PairEncoder("vocab.txt", seq_length=128)
dataset = encoder.dataset(data.train, batch_size=32, training=True, seed=1)  # ({"input_ids", ...}, label)
encoder.count_truncated(data.train)  # examples that lose word pieces
```
"""

from __future__ import annotations

from typing import Optional

import tensorflow as tf
import tensorflow_text as tft

from kbert.data.tokenization import load_vocabulary
from kbert.finetuning.examples import Examples

_COUNT_BATCH = 1024


def _keep_first(pieces: tf.RaggedTensor, keep: tf.Tensor) -> tf.RaggedTensor:
    """The first `keep[i]` pieces of each row `i`."""
    positions = tf.ragged.range(pieces.row_lengths(), dtype=tf.int64)
    return tf.ragged.boolean_mask(pieces, positions < tf.expand_dims(keep, 1))


def pair_lengths(len_a: tf.Tensor, len_b: tf.Tensor, budget: int) -> tuple[tf.Tensor, tf.Tensor]:
    """The lengths google-research/bert's `_truncate_seq_pair` leaves (see the module docstring)."""
    half = (budget + 1) // 2
    keep_a = tf.minimum(len_a, tf.maximum(budget - len_b, half))
    return keep_a, tf.minimum(len_b, budget - keep_a)


class PairEncoder:
    """WordPiece (tensorflow-text `FastBertTokenizer`) over the pretraining vocabulary, then BERT's packing."""

    def __init__(self, vocab_file: str, seq_length: int, lower_case: bool = True):
        self.vocab = load_vocabulary(vocab_file)
        self.seq_length = seq_length
        ids = {token: i for i, token in enumerate(self.vocab)}
        self.cls_id, self.sep_id, self.pad_id = ids["[CLS]"], ids["[SEP]"], ids["[PAD]"]
        self._tokenizer = tft.FastBertTokenizer(vocab=self.vocab, token_out_type=tf.int64,
                                                lower_case_nfd_strip_accents=lower_case, unknown_token="[UNK]")

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def _trim(self, text_a: tf.Tensor, text_b: Optional[tf.Tensor] = None) -> tuple[list[tf.RaggedTensor], tf.Tensor]:
        """The kept pieces of each segment and, per example, whether anything was cut."""
        a = self._tokenizer.tokenize(text_a)
        if text_b is None:
            keep_a = tf.minimum(a.row_lengths(), self.seq_length - 2)
            return [_keep_first(a, keep_a)], keep_a < a.row_lengths()
        b = self._tokenizer.tokenize(text_b)
        keep_a, keep_b = pair_lengths(a.row_lengths(), b.row_lengths(), self.seq_length - 3)
        cut = (keep_a < a.row_lengths()) | (keep_b < b.row_lengths())
        return [_keep_first(a, keep_a), _keep_first(b, keep_b)], cut

    def encode(self, text_a: tf.Tensor, text_b: Optional[tf.Tensor] = None) -> dict[str, tf.Tensor]:
        """Batched strings -> `{"input_ids", "input_mask", "segment_ids"}`, each int32 [batch, seq_length]."""
        segments, _ = self._trim(text_a, text_b)
        ids, segment_ids = tft.combine_segments(segments, start_of_sequence_id=self.cls_id,
                                                end_of_segment_id=self.sep_id)
        shape = [None, self.seq_length]
        return {
            "input_ids": tf.cast(ids.to_tensor(default_value=self.pad_id, shape=shape), tf.int32),
            "input_mask": tf.cast(tf.ones_like(ids).to_tensor(shape=shape), tf.int32),
            "segment_ids": tf.cast(segment_ids.to_tensor(shape=shape), tf.int32),
        }

    @staticmethod
    def _texts(examples: Examples) -> tuple:
        return (examples.text_a,) if examples.text_b is None else (examples.text_a, examples.text_b)

    def dataset(self, examples: Examples, batch_size: int, training: bool = False, seed: int = 0,
                with_labels: bool = True) -> tf.data.Dataset:
        """Batches of `(features, label)` (or `features` only); training shuffles each epoch and drops the
        last partial batch (every step then sees `batch_size` examples, as the schedule assumes)."""
        texts = self._texts(examples)
        dataset = tf.data.Dataset.from_tensor_slices(texts)
        if with_labels:
            dataset = tf.data.Dataset.zip(dataset, tf.data.Dataset.from_tensor_slices(examples.labels))
        if training:
            dataset = dataset.shuffle(len(examples), seed=seed, reshuffle_each_iteration=True)
        dataset = dataset.batch(batch_size, drop_remainder=training)
        if with_labels:
            dataset = dataset.map(lambda t, y: (self.encode(*t), y), num_parallel_calls=tf.data.AUTOTUNE)
        else:
            dataset = dataset.map(lambda *t: self.encode(*t), num_parallel_calls=tf.data.AUTOTUNE)
        return dataset.prefetch(tf.data.AUTOTUNE)

    def count_truncated(self, examples: Examples) -> int:
        """How many of `examples` lose word pieces to `seq_length` (one eager tokenization pass, nothing kept)."""
        texts = self._texts(examples)
        cut = 0
        for start in range(0, len(examples), _COUNT_BATCH):
            batch = [tf.constant(column[start:start + _COUNT_BATCH]) for column in texts]
            cut += int(tf.reduce_sum(tf.cast(self._trim(*batch)[1], tf.int32)))
        return cut
