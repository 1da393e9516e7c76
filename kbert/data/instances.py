"""google-research/bert's pretraining-instance algorithm over tokenized documents, masking vectorized with NumPy.

The algorithm (REFERENCE.md): per document, fill chunks of sentences up to a target length (`max_seq_length - 3`,
or with probability `short_seq_prob` a random length in [2, that]); split a chunk into A = its first k sentences
and B = the rest (label 0), or with probability 0.5, and always for a one-sentence chunk, B = a random span of
another document (label 1) with A's unused sentences given back; truncate the longer side from a random end; mask
`min(max_predictions, max(1, round(len * masked_lm_prob)))` positions, never [CLS] or [SEP], each becoming [MASK]
80%, itself 10%, a random id 10%. `sentence_order=True` gives ALBERT's sentence-order task instead: B is always
the actual next and A/B are swapped with probability 0.5 (label 1 = swapped).

Deviation from Google: the random next document comes from the same work unit (about a megabyte of text, hundreds
of documents) rather than from the whole corpus, which Google has to hold in memory. Truncation draws how many
tokens leave each end in one binomial draw, which has the same distribution as Google's token-by-token coin flips.

Example:

```python
rng = InstanceRng(seed=12345, unit_index=0)
for doc_index in range(len(documents)):
    for instance in instances_from_document(documents, doc_index, config, tokenizer_ids, rng):
        ...
```
"""

from __future__ import annotations

import dataclasses
import random
from typing import Iterator, Sequence

import numpy as np

Document = Sequence[np.ndarray]  # one int32 id array per sentence


@dataclasses.dataclass(frozen=True)
class InstanceConfig:
    """The settings of google-research/bert's `create_pretraining_data`, plus SOP and unmasked output."""

    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    dupe_factor: int = 10
    do_whole_word_mask: bool = False
    sentence_order: bool = False
    no_masking: bool = False

    def validate(self) -> None:
        if self.max_seq_length < 5:
            raise ValueError(f"--max_seq_length={self.max_seq_length} must be at least 5 ([CLS] A [SEP] B [SEP]).")
        if not self.no_masking and not 1 <= self.max_predictions_per_seq <= self.max_seq_length:
            raise ValueError(
                f"--max_predictions_per_seq={self.max_predictions_per_seq} must be in [1, max_seq_length]."
            )
        if not 0.0 < self.masked_lm_prob < 1.0:
            raise ValueError(f"--masked_lm_prob={self.masked_lm_prob} must be in (0, 1).")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise ValueError(f"--short_seq_prob={self.short_seq_prob} must be in [0, 1].")
        if self.dupe_factor < 1:
            raise ValueError(f"--dupe_factor={self.dupe_factor} must be at least 1.")


@dataclasses.dataclass(frozen=True)
class SpecialIds:
    """The ids masking needs from the vocabulary."""

    cls_id: int
    sep_id: int
    mask_id: int
    vocab_size: int
    is_continuation: np.ndarray  # bool [vocab_size]: `##` pieces


@dataclasses.dataclass
class Instance:
    """One training sequence before padding; `masked_positions` is empty when masking is off."""

    input_ids: np.ndarray  # int32 [n], masks applied
    segment_ids: np.ndarray  # int32 [n]
    next_sentence_label: int
    masked_positions: np.ndarray  # int32 [p], ascending
    masked_ids: np.ndarray  # int32 [p], the original ids


class InstanceRng:
    """The two random streams of one work unit, seeded from (seed, unit index) so no stream depends on a worker.

    `py` draws the scalar decisions (cheap per call), `np` the vectors of the masking.
    """

    def __init__(self, seed: int, unit_index: int):
        seq = np.random.SeedSequence([seed, unit_index])
        py_seed, np_seed = seq.spawn(2)
        self.py = random.Random(int(py_seed.generate_state(2, np.uint64)[0]))
        self.np = np.random.default_rng(np_seed)


def instances_from_document(
    documents: Sequence[Document],
    doc_index: int,
    config: InstanceConfig,
    ids: SpecialIds,
    rng: InstanceRng,
) -> Iterator[Instance]:
    """Yields the instances of `documents[doc_index]`, drawing random-next spans from the other `documents`."""
    document = documents[doc_index]
    max_num_tokens = config.max_seq_length - 3
    target_length = max_num_tokens
    if rng.py.random() < config.short_seq_prob:
        target_length = rng.py.randint(2, max_num_tokens)
    chunk: list[np.ndarray] = []
    chunk_length = 0
    i = 0
    while i < len(document):
        chunk.append(document[i])
        chunk_length += len(document[i])
        if i == len(document) - 1 or chunk_length >= target_length:
            a_end = rng.py.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            tokens_a = np.concatenate(chunk[:a_end])
            if len(chunk) == 1 or (not config.sentence_order and rng.py.random() < 0.5):
                label = 1
                tokens_b = _random_span(documents, doc_index, target_length - len(tokens_a), rng.py)
                i -= len(chunk) - a_end  # the unused sentences start the next chunk
            else:
                label = 0
                tokens_b = np.concatenate(chunk[a_end:])
                if config.sentence_order and rng.py.random() < 0.5:
                    tokens_a, tokens_b, label = tokens_b, tokens_a, 1
            tokens_a, tokens_b = _truncate_pair(tokens_a, tokens_b, max_num_tokens, rng.np)
            yield _make_instance(tokens_a, tokens_b, label, config, ids, rng.np)
            chunk, chunk_length = [], 0
        i += 1


def _random_span(documents: Sequence[Document], doc_index: int, target_length: int, rng: random.Random) -> np.ndarray:
    # Ten tries for another document, as Google; a unit with one document falls back to the same one.
    for _ in range(10):
        random_index = rng.randint(0, len(documents) - 1)
        if random_index != doc_index:
            break
    document = documents[random_index]
    span, length = [], 0
    for sentence in document[rng.randint(0, len(document) - 1):]:
        span.append(sentence)
        length += len(sentence)
        if length >= target_length:
            break
    return np.concatenate(span)


def _truncate_pair(a: np.ndarray, b: np.ndarray, max_num_tokens: int, rng: np.random.Generator):
    """Google's truncation: drop one token at a time from the longer side (B on ties) at a random end."""
    excess = len(a) + len(b) - max_num_tokens
    if excess <= 0:
        return a, b
    gap = abs(len(a) - len(b))
    from_longer = min(excess, gap)
    rest = excess - from_longer
    cut_a = (from_longer if len(a) > len(b) else 0) + rest // 2
    cut_b = (from_longer if len(b) > len(a) else 0) + (rest - rest // 2)
    return _cut(a, cut_a, rng), _cut(b, cut_b, rng)


def _cut(tokens: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    if count == 0:
        return tokens
    front = int(rng.binomial(count, 0.5))
    return tokens[front:len(tokens) - (count - front)]


def _make_instance(
    a: np.ndarray, b: np.ndarray, label: int, config: InstanceConfig, ids: SpecialIds, rng: np.random.Generator
) -> Instance:
    n = len(a) + len(b) + 3
    tokens = np.empty(n, np.int32)
    tokens[0] = ids.cls_id
    tokens[1:len(a) + 1] = a
    tokens[len(a) + 1] = ids.sep_id
    tokens[len(a) + 2:n - 1] = b
    tokens[n - 1] = ids.sep_id
    segments = np.zeros(n, np.int32)
    segments[len(a) + 2:] = 1
    if config.no_masking:
        empty = np.zeros(0, np.int32)
        return Instance(tokens, segments, label, empty, empty)
    positions = _choose_masked_positions(tokens, len(a), config, ids, rng)
    original = tokens[positions]
    draw = rng.random(len(positions))
    masked = tokens.copy()
    masked[positions[draw < 0.8]] = ids.mask_id
    randomized = positions[draw >= 0.9]
    masked[randomized] = rng.integers(0, ids.vocab_size, len(randomized), dtype=np.int32)
    return Instance(masked, segments, label, positions, original)


def _choose_masked_positions(
    tokens: np.ndarray, len_a: int, config: InstanceConfig, ids: SpecialIds, rng: np.random.Generator
) -> np.ndarray:
    n = len(tokens)
    num_to_predict = min(config.max_predictions_per_seq, max(1, int(round(n * config.masked_lm_prob))))
    candidates = np.concatenate([np.arange(1, len_a + 1), np.arange(len_a + 2, n - 1)]).astype(np.int32)
    if not config.do_whole_word_mask:
        chosen = rng.choice(candidates, size=min(num_to_predict, len(candidates)), replace=False)
        return np.sort(chosen).astype(np.int32)
    # A word starts at a piece that is not `##`, or right after [SEP] (a word never spans the two segments).
    starts = ~ids.is_continuation[tokens[candidates]]
    starts[0] = True
    starts[len_a] = True
    word_starts = np.flatnonzero(starts)
    word_lengths = np.diff(np.append(word_starts, len(candidates)))
    chosen_words, count = [], 0
    for word in rng.permutation(len(word_starts)).tolist():
        if count >= num_to_predict:
            break
        length = int(word_lengths[word])
        if count + length > num_to_predict:
            continue  # as Google: skip a word that would overshoot, try shorter ones
        chosen_words.append(word)
        count += length
    if not chosen_words:
        return np.zeros(0, np.int32)
    picked = np.concatenate([candidates[word_starts[w]:word_starts[w] + word_lengths[w]] for w in chosen_words])
    return np.sort(picked).astype(np.int32)
