"""Dynamic (RoBERTa-style) masking of unmasked pretraining batches, drawn from a seed.

Each batch is masked from its own seed, so the masks are a function of (seed, batch): a run with the same
`train.seed` masks the same records the same way, a resumed run draws the masks the uninterrupted run would have,
and each pass over the data still draws new ones (the pipeline keys the seed by the batch's index in the stream).
`masked_lm_prob` of the real tokens (of the words, with whole-word masking) are selected, at most
`max_predictions` positions, never [PAD]/[CLS]/[SEP]/[MASK] (nor, with a tokenizer.json, any other special
token); each chosen token becomes [MASK] 80%, a random id (any below the vocabulary's size) 10%, itself 10%. Output
shapes are static: predictions are padded to `max_predictions`.

The special ids and, for whole-word masking, which pieces continue a word come from the records' tokenizer: a
WordPiece vocabulary file (`##` pieces continue a word) or a Hugging Face tokenizer.json (word_boundaries.py).
A word never spans a special token: the piece after one starts a word, as in static masking (masking.py).

The selection follows tensorflow-text's `RandomItemSelector` and `MaskValuesChooser` (ceil(rate x selectable
items) a row, capped at `max_predictions`; an item is selectable when none of its pieces is special), in dense
stateless ops: tensorflow-text draws from stateful random ops that take no seed per batch, so under a parallel
`tf.data` map its masks could not be reproduced nor resumed.

Example:

```python
masker = DynamicMasker.from_vocab_file("vocab.txt", max_predictions=20, whole_word=True)
masker = DynamicMasker.from_tokenizer("tokenizers/modernbert", max_predictions=20, whole_word=True)
dataset = tf.data.Dataset.zip((unmasked_batches, tf.data.Dataset.counter()))
dataset = dataset.map(lambda batch, i: masker(batch, seed=[7, i]))  # adds masked_lm_positions / ids / weights
```
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from kbert.data.hf_tokenizer import HfTokenizer
from kbert.data.masking import BERT_MASKED_LM_PROB
from kbert.data.word_boundaries import word_starts
from kbert.data.wordpiece.vocab_file import BERT_SPECIAL_IDS, MASKING_TOKENS, read_vocabulary


class DynamicMasker:
    """Masks a parsed batch dict (`input_ids`, `input_mask`, ...) and adds the masked-LM features.

    Args:
      vocab_size: random replacements are drawn from [0, vocab_size).
      max_predictions: masked positions per sequence (padded to it, never exceeded).
      mask_id: id of [MASK].
      unmaskable_ids: ids never selected ([PAD], [CLS], [SEP], [MASK], ...); a piece after one starts a word.
      continues_word: for whole-word masking, a bool per vocabulary id: True for a piece that continues a word
        (WordPiece's `##` pieces).
      selection_rate, mask_token_rate, random_token_rate: 0.15 / 0.8 / 0.1 as in BERT.
    """

    def __init__(
        self,
        vocab_size: int,
        max_predictions: int,
        *,
        mask_id: int = BERT_SPECIAL_IDS["[MASK]"],
        unmaskable_ids: Sequence[int] = tuple(BERT_SPECIAL_IDS[t] for t in MASKING_TOKENS),
        continues_word: Sequence[bool] | None = None,
        selection_rate: float = BERT_MASKED_LM_PROB,
        mask_token_rate: float = 0.8,
        random_token_rate: float = 0.1,
    ):
        if mask_token_rate + random_token_rate > 1:
            raise ValueError(f"mask_token_rate + random_token_rate = {mask_token_rate + random_token_rate} > 1.")
        self.vocab_size = vocab_size
        self.max_predictions = max_predictions
        self.mask_id = mask_id
        self.selection_rate, self.mask_token_rate, self.random_token_rate = (
            selection_rate,
            mask_token_rate,
            random_token_rate,
        )
        self.whole_word = continues_word is not None
        self._continues_word = None if continues_word is None else tf.constant(np.asarray(continues_word, bool))
        self._unmaskable = tf.constant([int(i) for i in unmaskable_ids], tf.int32)

    @classmethod
    def from_vocab_file(cls, vocab_file: str, max_predictions: int, whole_word: bool = False, **kwargs):
        """A masker whose special ids (and `##` pieces, with `whole_word`) come from a vocabulary file."""
        vocab = read_vocabulary(vocab_file, required=MASKING_TOKENS, flag="data.vocab_file")
        index = {token: i for i, token in enumerate(vocab)}
        continues_word = [token.startswith("##") for token in vocab] if whole_word else None
        return cls(
            len(vocab),
            max_predictions,
            mask_id=index["[MASK]"],
            unmaskable_ids=[index[token] for token in MASKING_TOKENS],
            continues_word=continues_word,
            **kwargs,
        )

    @classmethod
    def from_tokenizer(cls, path: str, max_predictions: int, whole_word: bool = False, **kwargs):
        """A masker whose special ids come from a Hugging Face tokenizer.json (the file or its directory): it never
        selects the tokenizer's `special_token_ids`; with `whole_word`, words are cut by `word_starts`."""
        tokenizer = HfTokenizer(path, flag="data.tokenizer")
        return cls(
            tokenizer.vocab_size,
            max_predictions,
            mask_id=tokenizer.special_ids.mask_id,
            unmaskable_ids=tokenizer.special_token_ids,
            continues_word=~word_starts(tokenizer) if whole_word else None,
            **kwargs,
        )

    def _items(self, ids: tf.Tensor, position: tf.Tensor, special: tf.Tensor) -> tf.Tensor:
        """[B, S] index of the unit each token is masked with: its word (whole-word masking) or itself, given each
        token's `position` in its row and whether it is `special`."""
        if not self.whole_word:
            return position
        # A row starts a word, and so does the piece after a special token, even a stray continuing piece (a
        # segment truncated at its front, a line whose first piece lacks the word-start marker).
        after_special = tf.concat([tf.ones_like(special[:, :1]), special[:, :-1]], axis=1)
        starts = tf.logical_not(tf.gather(self._continues_word, ids)) | after_special
        return tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1

    def __call__(self, batch: dict[str, tf.Tensor], seed) -> dict[str, tf.Tensor]:
        """The batch with `input_ids` masked and `masked_lm_positions/ids/weights` [B, max_predictions] added,
        drawn from `seed` (two integers, as for `tf.random.stateless_uniform`)."""
        input_ids = batch["input_ids"]
        ids = tf.cast(input_ids, tf.int32)
        rows, seq_length = tf.shape(ids)[0], input_ids.shape[1]
        position = tf.broadcast_to(tf.range(seq_length), tf.shape(ids))
        select_seed, value_seed, random_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 3))
        # Real tokens lead the row; a packed row's input_mask counts its sequences (1, 2, ...), not ones.
        real = tf.sequence_mask(tf.math.count_nonzero(batch["input_mask"], axis=1), seq_length)
        special = tf.reduce_any(tf.equal(ids[:, :, None], self._unmaskable), axis=2)

        # Units (words or tokens) by their index in the row: real, and selectable when none of their pieces is special.
        item = self._items(ids, position, special)
        flat_item = item + seq_length * tf.range(rows)[:, None]

        def per_item(values: tf.Tensor) -> tf.Tensor:  # any over each unit's tokens, [B, S] by unit index
            counts = tf.math.unsorted_segment_sum(tf.cast(values, tf.int32), flat_item, rows * seq_length)
            return tf.reshape(counts, [rows, seq_length]) > 0

        selectable = per_item(real) & ~per_item(real & special)
        # As tensorflow-text: ceil(rate x selectable units) a row, capped at max_predictions, uniformly at random.
        wanted = tf.math.ceil(tf.reduce_sum(tf.cast(selectable, tf.float32), axis=1) * self.selection_rate)
        wanted = tf.cast(tf.minimum(wanted, self.max_predictions), tf.int32)
        scores = tf.where(selectable, tf.random.stateless_uniform([rows, seq_length], select_seed), -1.0)
        rank = tf.argsort(tf.argsort(scores, axis=1, direction="DESCENDING", stable=True), axis=1, stable=True)
        chosen = selectable & (rank < wanted[:, None])
        token_chosen = tf.gather(chosen, item, batch_dims=1) & real
        # Whole words can overflow max_predictions: keep the (ascending) words whose last piece still fits.
        filled = tf.cumsum(tf.cast(token_chosen, tf.int32), axis=1)
        overflows = per_item(token_chosen & (filled > self.max_predictions))
        keep = token_chosen & ~tf.gather(overflows, item, batch_dims=1)

        # Kept positions in ascending order, then padding, cut (or padded) to max_predictions.
        ordered = tf.sort(tf.where(keep, position, seq_length + position), axis=1)
        ordered = tf.pad(
            ordered, [[0, 0], [0, max(0, self.max_predictions - seq_length)]], constant_values=2 * seq_length
        )[:, : self.max_predictions]
        kept = ordered < seq_length
        positions = tf.where(kept, ordered, 0)
        labels = tf.where(kept, tf.gather(ids, positions, batch_dims=1), 0)

        # [MASK] mask_token_rate of the time, a random id random_token_rate, else the token itself.
        draw = tf.random.stateless_uniform([rows, seq_length], value_seed)
        random_ids = tf.random.stateless_uniform([rows, seq_length], random_seed, 0, self.vocab_size, tf.int32)
        masked = tf.where(keep & (draw < self.mask_token_rate), self.mask_id, ids)
        replaced = keep & (draw > self.mask_token_rate) & (draw < self.mask_token_rate + self.random_token_rate)
        masked = tf.where(replaced, random_ids, masked)

        out = dict(batch)
        out["input_ids"] = tf.cast(masked, input_ids.dtype)
        out["masked_lm_positions"] = positions  # int32, as `ids`
        out["masked_lm_ids"] = labels
        out["masked_lm_weights"] = tf.cast(kept, tf.float32)
        return out
