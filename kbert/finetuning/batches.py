"""The batches `kbert-finetune` trains and evaluates on, each padded only as far as its longest sequence needs.

Invariant: a batch's width (its padded length) is the smallest of `bucket_widths(seq_length)` that holds its
longest sequence, and its rows are `TextEncoder.encode`'s with only padding cut off. Padding is masked, so a
model's outputs at real tokens, the pooled [CLS] output among them, equal those at full length up to float
rounding. Training batches come from an endless stream, reshuffled on every pass deterministically for the seed,
then grouped by width (tf.data's `group_by_window`): every batch holds exactly `batch_size` examples of one width,
and the rows a pass leaves in a half-filled group start the next pass's batches, so no example is dropped for
good. Evaluation batches keep the examples' order.

Example:

```python
train = training_batches(encoder, data.train, batch_size=32, seed=1)  # endless: give fit its steps per epoch
model.fit(train, epochs=3, steps_per_epoch=len(data.train) // 32)
model.predict(eval_batches(encoder, data.evals["eval"], batch_size=128))  # one row of outputs per example, in order
```
"""

from __future__ import annotations

import tensorflow as tf

from kbert.finetuning.encoding import TextEncoder, text_columns
from kbert.finetuning.examples import Examples

# tf.data converts its functions with autograph unless told not to: these have no Python control flow on tensors,
# and converting them with everything they call (the tokenizer and packing) slows every pipeline's build.
_plain = tf.autograph.experimental.do_not_convert
# The narrowest width: a multiple of 8, the tile that accelerators' matrix units (and oneDNN's kernels) fill.
_MIN_WIDTH = 8


def bucket_widths(seq_length: int) -> list[int]:
    """8, 16, 24, 32, 48, 64, 96, 128, ...: the powers of two from 8 and three times those from 8, below
    `seq_length`, then `seq_length`.

    A row of more than 16 tokens is padded to less than 1.5 times its length, and the widths stay few (8 at seq
    128, 12 at 512): each is a shape that XLA compiles its own program for.

    >>> bucket_widths(128), bucket_widths(100), bucket_widths(8)
    ([8, 16, 24, 32, 48, 64, 96, 128], [8, 16, 24, 32, 48, 64, 96, 100], [8])
    """
    lower = {w for k in range(_MIN_WIDTH.bit_length() - 1, seq_length.bit_length()) for w in (1 << k, 3 << k)}
    return sorted(w for w in lower if w < seq_length) + [seq_length]


def _bucket(lengths: tf.Tensor, widths: tf.Tensor) -> tf.Tensor:
    """For each length, the index of the narrowest width that holds it."""
    return tf.searchsorted(widths, tf.reshape(lengths, [-1]), side="left")


def _cut(features: dict[str, tf.Tensor], widths: tf.Tensor) -> dict[str, tf.Tensor]:
    """A batch at full length cut to the narrowest width that holds its longest row (only padding goes)."""
    longest = tf.reduce_max(tf.reduce_sum(features["input_mask"], axis=1))
    width = tf.gather(widths, _bucket(longest, widths))[0]
    return {name: value[:, :width] for name, value in features.items()}


def _texts_and_labels(examples: Examples, with_labels: bool) -> tf.data.Dataset:
    texts = tf.data.Dataset.from_tensor_slices(text_columns(examples))
    if not with_labels:
        return texts
    return tf.data.Dataset.zip(texts, tf.data.Dataset.from_tensor_slices(examples.labels))


def eval_batches(
    encoder: TextEncoder, examples: Examples, batch_size: int, with_labels: bool = True
) -> tf.data.Dataset:
    """Batches of `(features, label)` (or `features` only) in the examples' order, each cut to its width."""
    widths = tf.constant(bucket_widths(encoder.seq_length), tf.int32)
    dataset = _texts_and_labels(examples, with_labels).batch(batch_size)
    if with_labels:
        dataset = dataset.map(
            _plain(lambda t, y: (_cut(encoder.dataset_encode(*t), widths), y)), num_parallel_calls=tf.data.AUTOTUNE
        )
    else:
        dataset = dataset.map(
            _plain(lambda *t: _cut(encoder.dataset_encode(*t), widths)), num_parallel_calls=tf.data.AUTOTUNE
        )
    return dataset.prefetch(tf.data.AUTOTUNE)


def training_batches(encoder: TextEncoder, examples: Examples, batch_size: int, seed: int) -> tf.data.Dataset:
    """Endless batches of `(features, label)`, `batch_size` examples each, grouped by width (module invariant)."""
    widths = tf.constant(bucket_widths(encoder.seq_length), tf.int32)
    dataset = _texts_and_labels(examples, with_labels=True)
    dataset = dataset.shuffle(len(examples), seed=seed, reshuffle_each_iteration=True).repeat()
    # Tokenizing a batch of texts at once is far cheaper than one at a time; the rows are regrouped after.
    dataset = dataset.batch(batch_size).map(
        _plain(lambda t, y: (encoder.dataset_encode(*t), y)), num_parallel_calls=tf.data.AUTOTUNE
    )
    dataset = dataset.unbatch().group_by_window(
        key_func=_plain(
            lambda features, _: tf.cast(_bucket(tf.reduce_sum(features["input_mask"]), widths)[0], tf.int64)
        ),
        reduce_func=_plain(lambda _, rows: rows.batch(batch_size, drop_remainder=True)),
        window_size=batch_size,
    )
    dataset = dataset.map(_plain(lambda features, y: (_cut(features, widths), y)), num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.prefetch(tf.data.AUTOTUNE)
