"""google-research/bert's static masking, vectorized with NumPy, for rows of any layout (sentence pairs, MLM-only).

Invariants: a prediction is never [CLS], [SEP] or padding; a row of `length` real tokens ([CLS]/[SEP] counted)
gets `min(max_predictions, max(1, round(length * masked_lm_prob)))` predictions (fewer only when its candidates
or, with whole-word masking, its words do not fill that budget), positions ascending in the first slots, each
chosen token becoming [MASK] 80%, itself 10%, a random id 10%. Whole-word masking joins a piece that continues a
word to the piece before it, except right after [CLS] or [SEP]: words never span segments or documents.

Which pieces continue a word is the tokenizer's to say (WordPiece's `##` pieces, a tokenizer.json's word ids), so
tokens travel from the tokenizer through instances.py and full_sentences.py marked: a piece that continues a word
as `~id` (negative, `mark_continuations`). `with_masks` reads the marks and writes plain ids.

[CLS] and [SEP] are found by id: the tokenizers never yield their ids from text (WordPiece splits "[SEP]" into
"[", "sep", "]"; a tokenizer.json encodes special tokens in text as text), so every one in a row is one the layout
placed.

Example:

```python
ids = SpecialIds.from_vocabulary(load_vocabulary("vocab.txt"))
features = with_masks({"input_ids": tokens, "input_mask": input_mask, ...}, lengths, config, ids, rng)
```
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Protocol

import numpy as np

# BERT's masking rate: the share of tokens chosen for prediction, statically (here) and dynamically.
BERT_MASKED_LM_PROB = 0.15


def predictions_needed(masked_lm_prob: float, seq_length: int) -> int:
    """The masked positions a sequence of `seq_length` needs at `masked_lm_prob`: that share of its
    `seq_length - 2` maskable tokens ([CLS] and [SEP] never are), rounded up (30% of 128: 38)."""
    return math.ceil(round(masked_lm_prob * (seq_length - 2), 6))


@dataclasses.dataclass(frozen=True)
class SpecialIds:
    """The ids that masking and the layouts need from a tokenizer; `unk_id` is None for one without [UNK]."""

    cls_id: int
    sep_id: int
    mask_id: int
    vocab_size: int
    unk_id: int | None

    @classmethod
    def from_vocabulary(cls, vocab: Sequence[str]) -> SpecialIds:
        """From a WordPiece vocabulary's tokens alone, without TensorFlow: the data tool's parent process masks
        rows too, and may fork its workers only while it has run no TensorFlow op. (A tokenizer.json's come from
        hf_tokenizer.py.)"""
        index = {token: i for i, token in enumerate(vocab)}
        return cls(
            cls_id=index["[CLS]"],
            sep_id=index["[SEP]"],
            mask_id=index["[MASK]"],
            vocab_size=len(vocab),
            unk_id=index["[UNK]"],
        )


def mark_continuations(ids: np.ndarray, continues: np.ndarray) -> np.ndarray:
    """`ids` with each piece that continues a word (`continues`, bool) as `~id`: how tokens travel to `with_masks`."""
    return np.where(continues, ~ids, ids)


class MaskingSettings(Protocol):
    """The masking fields of `instances.InstanceConfig` (a protocol: instances.py imports this module)."""

    max_predictions_per_seq: int
    masked_lm_prob: float
    do_whole_word_mask: bool
    no_masking: bool


def with_masks(
    features: dict[str, np.ndarray],
    lengths: np.ndarray,
    settings: MaskingSettings,
    ids: SpecialIds,
    rng: np.random.Generator,
) -> dict[str, np.ndarray]:
    """Laid-out rows `features` (int64 `input_ids` [N, L], real up to `lengths` [N]) with masks, unless
    `settings.no_masking`: the masked `input_ids` and `masked_lm_positions`, `masked_lm_ids` (int64) and
    `masked_lm_weights` (float32) [N, max_predictions_per_seq], 0-padded. `original_ids` keeps the ids before
    masking (for statistics; not a file feature). `input_ids` may hold `mark_continuations`' marks; what comes
    back holds plain ids."""
    continues = features["input_ids"] < 0
    tokens = np.where(continues, ~features["input_ids"], features["input_ids"])
    features = {**features, "input_ids": tokens, "original_ids": tokens}
    if settings.no_masking:
        return features
    max_predictions = settings.max_predictions_per_seq
    columns = np.arange(tokens.shape[1])[None, :]
    candidates = (columns < lengths[:, None]) & (tokens != ids.cls_id) & (tokens != ids.sep_id)
    num_to_predict = np.minimum(
        max_predictions, np.maximum(1, np.round(lengths * settings.masked_lm_prob).astype(np.int64))
    )
    if settings.do_whole_word_mask:
        chosen = _whole_word_choice(tokens, continues, candidates, num_to_predict, ids, rng)
    else:
        # Random keys on the candidates; the `num_to_predict` smallest per row are a uniform sample.
        keys = np.where(candidates, rng.random(tokens.shape), 2.0)
        ranks = np.argsort(np.argsort(keys, axis=1), axis=1)
        chosen = candidates & (ranks < num_to_predict[:, None])
    return {**features, **_apply_masks(tokens, chosen, max_predictions, ids, rng)}


def _whole_word_choice(
    tokens: np.ndarray,
    continues: np.ndarray,
    candidates: np.ndarray,
    num_to_predict: np.ndarray,
    ids: SpecialIds,
    rng: np.random.Generator,
) -> np.ndarray:
    """Google's whole-word choice: words in random order, skipping any that would overshoot the budget."""
    chosen = np.zeros_like(candidates)
    starts = candidates & ~continues
    starts[:, 1:] |= (tokens[:, :-1] == ids.cls_id) | (tokens[:, :-1] == ids.sep_id)
    for row in range(len(tokens)):
        positions = np.flatnonzero(candidates[row])
        word_starts = np.flatnonzero(starts[row, positions])
        word_lengths = np.diff(np.append(word_starts, len(positions)))
        budget, count = int(num_to_predict[row]), 0
        for word in rng.permutation(len(word_starts)).tolist():
            if count >= budget:
                break
            length = int(word_lengths[word])
            if count + length > budget:
                continue
            chosen[row, positions[word_starts[word] : word_starts[word] + length]] = True
            count += length
    return chosen


def _apply_masks(
    tokens: np.ndarray, chosen: np.ndarray, max_predictions: int, ids: SpecialIds, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """80% [MASK], 10% unchanged, 10% a random id at the chosen positions; the prediction features."""
    count = chosen.sum(axis=1)
    slot = np.arange(max_predictions)[None, :]
    valid = slot < count[:, None]
    # Chosen columns first, in ascending order (a stable sort of "not chosen" keeps the column order).
    positions = np.argsort(~chosen, axis=1, kind="stable")[:, :max_predictions]
    positions = np.where(valid, positions, 0)
    rows = np.broadcast_to(np.arange(len(tokens))[:, None], positions.shape)
    original = np.where(valid, tokens[rows, positions], 0)
    draw = rng.random(positions.shape)
    random_ids = rng.integers(0, ids.vocab_size, positions.shape)
    replacement = np.where(draw < 0.8, ids.mask_id, np.where(draw < 0.9, original, random_ids))
    masked = tokens.copy()
    masked[rows[valid], positions[valid]] = replacement[valid]
    return {
        "input_ids": masked,
        "masked_lm_positions": positions.astype(np.int64),
        "masked_lm_ids": original.astype(np.int64),
        "masked_lm_weights": valid.astype(np.float32),
    }
