"""Random pretraining instances, no text: what the test suite and the benchmarks that need only the records'
shapes write (`example_proto` makes each a TFRecord).

Example:

>>> import numpy as np
>>> instance = random_instance(np.random.default_rng(0), seq_length=16, max_predictions=4, vocab_size=64)
>>> sorted(instance), instance["input_ids"].shape
(['input_ids', 'input_mask', 'masked_lm_ids', 'masked_lm_positions', 'masked_lm_weights', 'next_sentence_labels', \
'segment_ids'], (16,))
"""

from __future__ import annotations

import numpy as np


def random_instance(
    rng: np.random.Generator, seq_length: int, max_predictions: int, vocab_size: int
) -> dict[str, np.ndarray]:
    """One unpacked instance: 6 to `seq_length` tokens of ids in [5, vocab_size) (below 5: the special tokens), two
    segments, 1 to `max_predictions` masked positions past [CLS] and a random next-sentence label."""
    length = int(rng.integers(6, seq_length + 1))
    ids = np.zeros(seq_length, np.int64)
    ids[:length] = rng.integers(5, vocab_size, length)
    mask = (np.arange(seq_length) < length).astype(np.int64)
    segments = ((np.arange(seq_length) >= length // 2) & (mask > 0)).astype(np.int64)
    count = int(rng.integers(1, max_predictions + 1))
    positions = np.zeros(max_predictions, np.int64)
    positions[:count] = np.sort(rng.choice(np.arange(1, length), count, replace=False))
    labels = np.zeros(max_predictions, np.int64)
    labels[:count] = rng.integers(5, vocab_size, count)
    weights = np.zeros(max_predictions, np.float32)
    weights[:count] = 1.0
    return {
        "input_ids": ids,
        "input_mask": mask,
        "segment_ids": segments,
        "masked_lm_positions": positions,
        "masked_lm_ids": labels,
        "masked_lm_weights": weights,
        "next_sentence_labels": np.array([rng.integers(0, 2)], np.int64),
    }
