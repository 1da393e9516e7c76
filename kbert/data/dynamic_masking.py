"""Dynamic (RoBERTa-style) masking of unmasked pretraining batches with tensorflow-text's masking ops.

Each pass over the data draws new masks: `masked_lm_prob` of the real tokens (of the words, with whole-word
masking), at most `max_predictions` positions, never [PAD]/[CLS]/[SEP]/[MASK]; each chosen token becomes [MASK]
80%, a random id 10%, itself 10%. Output shapes are static: predictions are padded to `max_predictions`.

Example:

```python
masker = DynamicMasker.from_vocab_file("vocab.txt", max_predictions=20, whole_word=True)
dataset = unmasked_batches.map(masker)   # adds masked_lm_positions / masked_lm_ids / masked_lm_weights
```
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf
import tensorflow_text as text

from kbert.data.masking import BERT_MASKED_LM_PROB
from kbert.data.vocab_file import BERT_SPECIAL_IDS, MASKING_TOKENS, read_vocabulary

class DynamicMasker:
    """Masks a parsed batch dict (`input_ids`, `input_mask`, ...) and adds the masked-LM features.

    Args:
      vocab_size: random replacements are drawn from [0, vocab_size).
      max_predictions: masked positions per sequence (padded to it, never exceeded).
      mask_id: id of [MASK].
      unmaskable_ids: ids never selected ([PAD], [CLS], [SEP], [MASK]).
      continues_word: for whole-word masking, a bool per vocabulary id: True for `##` pieces.
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
        self.vocab_size = vocab_size
        self.max_predictions = max_predictions
        self.whole_word = continues_word is not None
        self._continues_word = None if continues_word is None else tf.constant(np.asarray(continues_word, bool))
        self._selector = text.RandomItemSelector(
            max_selections_per_batch=max_predictions,
            selection_rate=selection_rate,
            unselectable_ids=[int(i) for i in unmaskable_ids],
        )
        self._chooser = text.MaskValuesChooser(vocab_size, mask_id, mask_token_rate, random_token_rate)

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

    def _items(self, tokens: tf.RaggedTensor) -> tuple[tf.RaggedTensor, tf.RaggedTensor]:
        """The units masked atomically ([B, (words), (pieces)] or [B, (tokens)]) and each token's unit index."""
        if not self.whole_word:
            return tokens, tf.ragged.range(tokens.row_lengths())
        starts = tf.logical_not(tf.gather(self._continues_word, tokens.flat_values))
        # A row always starts a word, even if its first token is a stray `##` piece.
        starts = tf.tensor_scatter_nd_update(
            starts, tokens.row_starts()[:, None], tf.ones_like(tokens.row_starts(), tf.bool)
        )
        word_index = tf.cumsum(tf.cast(starts, tf.int64)) - 1
        words = tf.RaggedTensor.from_value_rowids(tokens.flat_values, word_index)
        words_per_row = tf.reduce_sum(tf.cast(tokens.with_flat_values(starts), tf.int64), axis=1)
        return tf.RaggedTensor.from_row_lengths(words, words_per_row), tokens.with_flat_values(word_index)

    def __call__(self, batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """The batch with `input_ids` masked and `masked_lm_positions/ids/weights` [B, max_predictions] added."""
        input_ids = batch["input_ids"]
        seq_length = input_ids.shape[1]
        # Real tokens lead the row; a packed row's input_mask counts its sequences (1, 2, ...), not ones.
        lengths = tf.math.count_nonzero(batch["input_mask"], axis=1, dtype=batch["input_mask"].dtype)
        tokens = tf.RaggedTensor.from_tensor(tf.cast(input_ids, tf.int64), lengths=lengths)
        items, token_item = self._items(tokens)
        masked_tokens, positions, labels = text.mask_language_model(items, self._selector, self._chooser, axis=1)

        # Whole words can overflow max_predictions: keep the (ascending) words whose last piece still fits.
        item_of_position = tf.gather(token_item, positions, batch_dims=1)
        dense_items = item_of_position.to_tensor(default_value=tf.int64.max, shape=[None, seq_length])
        word_end = tf.searchsorted(dense_items, dense_items, side="right")
        valid = tf.sequence_mask(positions.row_lengths(), seq_length)
        keep = valid & (word_end <= self.max_predictions)
        dense_positions = positions.to_tensor(shape=[None, seq_length])

        masked_ids = masked_tokens.to_tensor(shape=[None, seq_length])
        dropped = tf.where(valid & ~keep)
        dropped_at = tf.stack([dropped[:, 0], tf.gather_nd(dense_positions, dropped)], axis=1)
        original = tf.gather_nd(tf.cast(input_ids, tf.int64), dropped_at)
        masked_ids = tf.tensor_scatter_nd_update(masked_ids, dropped_at, original)

        def predictions(values: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
            """[B, seq_length] -> [B, max_predictions], zero where not kept."""
            values = tf.cast(tf.where(keep, values, tf.zeros_like(values)), dtype)
            values = tf.pad(values, [[0, 0], [0, max(0, self.max_predictions - seq_length)]])
            return values[:, : self.max_predictions]

        out = dict(batch)
        out["input_ids"] = tf.cast(masked_ids, input_ids.dtype)
        out["masked_lm_positions"] = predictions(dense_positions, tf.int32)
        out["masked_lm_ids"] = predictions(labels.to_tensor(shape=[None, seq_length]), tf.int32)
        out["masked_lm_weights"] = predictions(tf.ones_like(keep, tf.float32), tf.float32)
        return out
