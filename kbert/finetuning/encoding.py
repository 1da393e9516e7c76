"""Tokenization and packing inside tf.data: `[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]`, padded to `seq_length`.
`TextEncoder` packs what a subclass tokenizes: `PairEncoder` with WordPiece in the graph, `TokenizerEncoder`
(`kbert.finetuning.tokenizer_encoding`) with a tokenizer.json outside it.

Invariant: a pair longer than `seq_length - 3` word pieces is cut from the end of the longer segment, one piece at
a time, exactly as google-research/bert's `_truncate_seq_pair` does (ties cut `b`); in closed form the kept
lengths are `a' = min(a, max(m - b, ceil(m / 2)))` and `b' = min(b, m - a')`. A single segment keeps its first
`seq_length - 2` pieces, whatever the tokenizer. Batches are the `BertEncoder` batch dict (`input_ids`,
`input_mask`, `segment_ids`, int32).

Example:

```python
encoder = PairEncoder("vocab.txt", seq_length=128)
encoder.encode(tf.constant(["a text"]), tf.constant(["its pair"]))  # {"input_ids", ...}, each [1, 128]
encoder.count_truncated(data.train)  # examples that lose word pieces
```

`kbert.finetuning.batches` builds the training and evaluation datasets from `encode`.

`pack` is the packing alone, on token ids, with `seq_length` a number or a scalar tensor: the serving SavedModels
(`kbert.finetuning.serving`) trace it, so what they compute is this module's packing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import tensorflow as tf
import tensorflow_text as tft

from kbert.data.wordpiece.vocab_file import load_vocabulary
from kbert.finetuning.examples import Examples

_COUNT_BATCH = 1024


def _keep_first(pieces: tf.RaggedTensor, keep: tf.Tensor) -> tf.RaggedTensor:
    """The first `keep[i]` pieces of each row `i`."""
    positions = tf.ragged.range(pieces.row_lengths(), dtype=tf.int64)
    return tf.ragged.boolean_mask(pieces, positions < tf.expand_dims(keep, 1))


def pair_lengths(len_a: tf.Tensor, len_b: tf.Tensor, budget) -> tuple[tf.Tensor, tf.Tensor]:
    """The lengths google-research/bert's `_truncate_seq_pair` leaves (see the module docstring)."""
    half = (budget + 1) // 2
    keep_a = tf.minimum(len_a, tf.maximum(budget - len_b, half))
    return keep_a, tf.minimum(len_b, budget - keep_a)


def trim(segments: list[tf.RaggedTensor], seq_length) -> tuple[list[tf.RaggedTensor], tf.Tensor]:
    """One or two segments of ids `[batch, (pieces)]` cut to fit `seq_length` with their special tokens, and per
    example whether anything was cut."""
    lengths = [s.row_lengths() for s in segments]
    budget = tf.cast(seq_length, lengths[0].dtype) - len(segments) - 1
    keep = [tf.minimum(lengths[0], budget)] if len(segments) == 1 else list(pair_lengths(*lengths, budget))
    cut = tf.reduce_any(tf.stack([k < n for k, n in zip(keep, lengths)]), axis=0)
    return [_keep_first(s, k) for s, k in zip(segments, keep)], cut


def _padded(ragged: tf.RaggedTensor, seq_length, value: int) -> tf.Tensor:
    width = tf.stack([ragged.nrows(), tf.cast(seq_length, tf.int64)])
    # The reshape gives a number `seq_length` back as a static shape.
    return tf.reshape(tf.cast(ragged.to_tensor(default_value=value, shape=width), tf.int32), [-1, seq_length])


def pack(segments: list[tf.RaggedTensor], seq_length, cls_id: int, sep_id: int, pad_id: int) -> dict[str, tf.Tensor]:
    """One or two segments of ids `[batch, (pieces)]` -> `{"input_ids", "input_mask", "segment_ids"}`, int32
    `[batch, seq_length]`: trimmed (`trim`), joined as `[CLS] a [SEP] (b [SEP])`, padded."""
    ids, segment_ids = tft.combine_segments(
        trim(segments, seq_length)[0], start_of_sequence_id=cls_id, end_of_segment_id=sep_id
    )
    return {
        "input_ids": _padded(ids, seq_length, pad_id),
        "input_mask": _padded(tf.ones_like(ids), seq_length, 0),
        "segment_ids": _padded(segment_ids, seq_length, 0),
    }


def text_columns(examples: Examples) -> tuple:
    """`(text_a,)` or `(text_a, text_b)`: the columns `PairEncoder.encode` takes."""
    return (examples.text_a,) if examples.text_b is None else (examples.text_a, examples.text_b)


class TextEncoder:
    """Batched strings -> packed ids: a subclass tokenizes (`tokenize`, `vocab_size`, `special_ids`), this packs.
    `segment_ids` false (set for a model without a token-type table, as ModernBERT's): every segment id is 0."""

    seq_length: int
    segment_ids: bool = True

    @property
    def vocab_size(self) -> int:
        raise NotImplementedError

    @property
    def special_ids(self) -> dict[str, int]:
        """`pack`'s token arguments."""
        raise NotImplementedError

    def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """Batched strings -> token ids `[batch, (pieces)]`, int64."""
        raise NotImplementedError

    def _segments(self, text_a: tf.Tensor, text_b: tf.Tensor | None = None) -> list[tf.RaggedTensor]:
        return [self.tokenize(t) for t in (text_a, text_b) if t is not None]

    def encode(self, text_a: tf.Tensor, text_b: tf.Tensor | None = None) -> dict[str, tf.Tensor]:
        """Batched strings -> `{"input_ids", "input_mask", "segment_ids"}`, each int32 [batch, seq_length]."""
        features = pack(self._segments(text_a, text_b), self.seq_length, **self.special_ids)
        if not self.segment_ids:
            features["segment_ids"] = tf.zeros_like(features["segment_ids"])
        return features

    @functools.cached_property
    def dataset_encode(self) -> Callable[..., dict[str, tf.Tensor]]:
        """`encode` as one `tf.function`, which the maps of `kbert.finetuning.batches` call. tf.data traces each
        map's function anew, and tracing the tokenizer's ragged ops is most of a small run's set-up (0.7 s a
        dataset on a 2-core CPU): the training, evaluation and test datasets share one trace."""
        return tf.function(self.encode, autograph=False)

    def count_truncated(self, examples: Examples) -> int:
        """How many of `examples` lose pieces to `seq_length` (one eager tokenization pass, nothing kept)."""
        texts = text_columns(examples)
        cut = 0
        for start in range(0, len(examples), _COUNT_BATCH):
            batch = [tf.constant(column[start : start + _COUNT_BATCH]) for column in texts]
            cut += int(tf.reduce_sum(tf.cast(trim(self._segments(*batch), self.seq_length)[1], tf.int32)))
        return cut


class PairEncoder(TextEncoder):
    """WordPiece (tensorflow-text `FastBertTokenizer`) over the pretraining vocabulary, then BERT's packing."""

    def __init__(self, vocab_file: str, seq_length: int, lower_case: bool = True):
        self.vocab = load_vocabulary(vocab_file)
        self.seq_length = seq_length
        ids = {token: i for i, token in enumerate(self.vocab)}
        self.cls_id, self.sep_id, self.pad_id = ids["[CLS]"], ids["[SEP]"], ids["[PAD]"]
        self._tokenizer = tft.FastBertTokenizer(
            vocab=self.vocab, token_out_type=tf.int64, lower_case_nfd_strip_accents=lower_case, unknown_token="[UNK]"
        )

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    @property
    def special_ids(self) -> dict[str, int]:
        return {"cls_id": self.cls_id, "sep_id": self.sep_id, "pad_id": self.pad_id}

    def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """Batched strings -> word-piece ids `[batch, (pieces)]`, int64."""
        return self._tokenizer.tokenize(texts)
