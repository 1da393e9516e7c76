"""google-research/bert's pretraining-instance algorithm over tokenized documents, masking vectorized with NumPy.

The algorithm (REFERENCE.md): per document, fill chunks of sentences up to a target length (`max_seq_length - 3`,
or with probability `short_seq_prob` a random length in [2, that]); split a chunk into A = its first k sentences
and B = the rest (label 0), or with probability 0.5, and always for a one-sentence chunk, B = a random span of
another document (label 1) with A's unused sentences given back; truncate the longer side from a random end; mask
as masking.py does. `sentence_order=True` gives ALBERT's sentence-order task instead: B is always
the actual next and A/B are swapped with probability 0.5 (label 1 = swapped). `InstanceConfig` also holds the
settings of the MLM-only objective (`objective="mlm"`, full_sentences.py), which share the masking settings.

Deviation from Google: the random next document comes from the same work unit (about a megabyte of text, hundreds
of documents) rather than from the whole corpus, which Google has to hold in memory. Truncation draws how many
tokens leave each end in one binomial draw, which has the same distribution as Google's token-by-token coin flips.

Example:

```python
rng = InstanceRng(seed=12345, unit_index=0)
pairs = [p for i in range(len(documents)) for p in pairs_from_document(documents, i, config, rng)]
features = mask_and_pad(pairs, config, special_ids, rng.np)
```
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import numpy as np

from kbert.data.masking import BERT_MASKED_LM_PROB, SpecialIds, with_masks
from kbert.errors import ConfigError

Document = Sequence[np.ndarray]  # one int32 id array per sentence, pieces continuing a word as ~id (masking.py)


class Pair(NamedTuple):
    """Segments A and B of one instance, without special tokens; label 1 = random next (NSP) or swapped (SOP)."""

    tokens_a: np.ndarray
    tokens_b: np.ndarray
    label: int


OBJECTIVES = ("nsp", "mlm")


@dataclasses.dataclass(frozen=True)
class InstanceConfig:
    """The settings of google-research/bert's `create_pretraining_data`, plus SOP, unmasked output and the
    MLM-only objective (`short_seq_prob` and `sentence_order` belong to the sentence pairs of "nsp")."""

    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = BERT_MASKED_LM_PROB
    short_seq_prob: float = 0.1
    dupe_factor: int = 10
    do_whole_word_mask: bool = False
    sentence_order: bool = False
    no_masking: bool = False
    objective: str = "nsp"

    def validate(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ConfigError(f"--objective={self.objective}: use one of {', '.join(OBJECTIVES)}.")
        if self.objective == "mlm" and self.sentence_order:
            raise ConfigError(
                "--sentence_order needs sentence pairs, which --objective=mlm does not write: drop "
                "--sentence_order, or use --objective=nsp."
            )
        shortest, layout = (3, "[CLS] x [SEP]") if self.objective == "mlm" else (5, "[CLS] A [SEP] B [SEP]")
        if self.max_seq_length < shortest:
            raise ConfigError(f"--max_seq_length={self.max_seq_length} must be at least {shortest} ({layout}).")
        if not self.no_masking and not 1 <= self.max_predictions_per_seq <= self.max_seq_length:
            raise ConfigError(
                f"--max_predictions_per_seq={self.max_predictions_per_seq} must be in [1, max_seq_length]."
            )
        if not 0.0 < self.masked_lm_prob < 1.0:
            raise ConfigError(f"--masked_lm_prob={self.masked_lm_prob} must be in (0, 1).")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise ConfigError(f"--short_seq_prob={self.short_seq_prob} must be in [0, 1].")
        if self.dupe_factor < 1:
            raise ConfigError(f"--dupe_factor={self.dupe_factor} must be at least 1.")


class InstanceRng:
    """The two random streams of one work unit, seeded from (seed, unit index) so no stream depends on a worker.

    `py` draws the scalar decisions (cheap per call), `np` the vectors of the masking; `parent` is a third stream
    of the same (seed, unit index), for the rows the parent process completes from units' leftovers.
    """

    def __init__(self, seed: int, unit_index: int):
        seq = np.random.SeedSequence([seed, unit_index])
        py_seed, np_seed = seq.spawn(2)
        self.py = random.Random(int(py_seed.generate_state(2, np.uint64)[0]))
        self.np = np.random.default_rng(np_seed)

    @staticmethod
    def parent(seed: int, unit_index: int) -> np.random.Generator:
        # The third child of the unit's SeedSequence (the worker's two are `spawn(2)`), drawn without the first two.
        return np.random.default_rng(np.random.SeedSequence([seed, unit_index], spawn_key=(2,)))


def pairs_from_document(
    documents: Sequence[Document],
    doc_index: int,
    config: InstanceConfig,
    rng: InstanceRng,
) -> Iterator[Pair]:
    """Yields the (A, B, label) pairs of `documents[doc_index]`, random-next spans drawn from the other `documents`.

    Pairs are truncated to fit `max_seq_length` with [CLS] and two [SEP]; `mask_and_pad` turns them into features.
    """
    document = documents[doc_index]
    max_num_tokens = config.max_seq_length - 3
    target_length = max_num_tokens
    if rng.py.random() < config.short_seq_prob:
        target_length = _randint(rng.py, 2, max_num_tokens)
    chunk: list[np.ndarray] = []
    chunk_length = 0
    i = 0
    while i < len(document):
        chunk.append(document[i])
        chunk_length += len(document[i])
        if i == len(document) - 1 or chunk_length >= target_length:
            a_end = _randint(rng.py, 1, len(chunk) - 1) if len(chunk) >= 2 else 1
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
            yield Pair(tokens_a, tokens_b, label)
            chunk, chunk_length = [], 0
        i += 1


def _randint(rng: random.Random, low: int, high: int) -> int:
    """Uniform in [low, high]; `random.Random.randint` costs several times more and is called per instance."""
    return low + int(rng.random() * (high - low + 1))


def _random_span(documents: Sequence[Document], doc_index: int, target_length: int, rng: random.Random) -> np.ndarray:
    # Ten tries for another document, as Google; a unit with one document falls back to the same one.
    for _ in range(10):
        random_index = _randint(rng, 0, len(documents) - 1)
        if random_index != doc_index:
            break
    document = documents[random_index]
    span, length = [], 0
    for sentence in document[_randint(rng, 0, len(document) - 1) :]:
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
    return tokens[front : len(tokens) - (count - front)]


def mask_and_pad(
    pairs: Sequence[Pair], config: InstanceConfig, ids: SpecialIds, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """`[CLS] A [SEP] B [SEP]` sequences of a batch of pairs, masked and padded: schema.py's features (v1 names).

    Returns int64 `input_ids`, `input_mask`, `segment_ids` [N, max_seq_length], `next_sentence_labels` [N, 1]
    and `original_ids`; unless `config.no_masking`, also the masked-LM features (masking.with_masks).
    """
    seq_length = config.max_seq_length
    len_a = np.array([len(p.tokens_a) for p in pairs], np.int64)
    len_b = np.array([len(p.tokens_b) for p in pairs], np.int64)
    lengths = len_a + len_b + 3
    rows = np.arange(len(pairs))
    tokens = np.zeros([len(pairs), seq_length], np.int64)
    for segment, first_column in ((0, np.ones_like(len_a)), (1, len_a + 2)):
        seg_lengths = len_b if segment else len_a
        flat = np.concatenate([p[segment] for p in pairs])
        row_of = np.repeat(rows, seg_lengths)
        column = np.arange(len(flat)) - np.repeat(np.cumsum(seg_lengths) - seg_lengths, seg_lengths)
        tokens[row_of, column + np.repeat(first_column, seg_lengths)] = flat
    tokens[:, 0] = ids.cls_id
    tokens[rows, len_a + 1] = ids.sep_id
    tokens[rows, lengths - 1] = ids.sep_id
    columns = np.arange(seq_length)[None, :]
    input_mask = (columns < lengths[:, None]).astype(np.int64)
    segment_ids = ((columns >= (len_a + 2)[:, None]) & (input_mask == 1)).astype(np.int64)
    features = {
        "input_ids": tokens,
        "input_mask": input_mask,
        "segment_ids": segment_ids,
        "next_sentence_labels": np.array([[p.label] for p in pairs], np.int64),
    }
    return with_masks(features, lengths, config, ids, rng)
