"""What one work unit becomes: its documents read, tokenized in batches (tensorflow-text's WordPiece or a
tokenizer.json's `encode_batch`, tokenizer_source.py), turned into instances `dupe_factor` times, masked and
serialized, all with random streams seeded from (seed, unit index).

The objective "nsp" makes sentence pairs over the unit's shuffled documents (instances.py) and shuffles them; "mlm"
cuts full rows from the unit's documents, shuffled anew for each pass (full_sentences.py), and hands back its
leftover tokens, which `LeftoverRows` joins across units, in unit order, into rows of their own, masked with a
stream of (seed, index of the unit that completes them). The local tool (create_pretraining_data.py) and the Beam
pipeline (beam_pretraining_data.py) both run units through this module, so they write the same records.

Example:

```python
processor = UnitProcessor(Job(TokenizerSource("vocab.txt"), InstanceConfig(max_seq_length=128), 12345, False))
output = processor(unit)  # output.records: serialized tf.train.Examples
```
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from kbert.data import full_sentences, work_units
from kbert.data import instances as instances_lib
from kbert.data.creation_summary import Summary
from kbert.data.masking import SpecialIds
from kbert.data.tfrecord_writer import encode_examples
from kbert.data.tokenizer_source import TokenizerSource


@dataclasses.dataclass(frozen=True)
class Job:
    tokenizer: TokenizerSource
    config: instances_lib.InstanceConfig
    random_seed: int
    use_v2_feature_names: bool
    input_format: work_units.InputFormat = work_units.TEXT


@dataclasses.dataclass
class UnitOutput:
    """A work unit's records and totals; for "mlm" also its leftover tokens, which the parent carries on."""

    index: int
    records: list[bytes]
    summary: Summary
    leftover: np.ndarray


# Instances masked and encoded per NumPy batch: bounds the [N, max_seq_length] temporaries.
_BATCH_INSTANCES = 4096


class Encoder:
    """Masks, serializes and counts batches of instances.

    It needs the special ids only, never a TensorFlow op, so the parent holds one too (for the MLM rows it
    completes from the units' leftovers) and can still fork its workers.
    """

    def __init__(self, job: Job, ids: SpecialIds):
        self.job = job
        self.ids = ids

    def pairs(self, pairs: Sequence[instances_lib.Pair], rng: np.random.Generator, summary: Summary) -> list[bytes]:
        return self._encode(
            len(pairs), lambda s, e: instances_lib.mask_and_pad(pairs[s:e], self.job.config, self.ids, rng), summary
        )

    def rows(self, rows: full_sentences.Rows, rng: np.random.Generator, summary: Summary) -> list[bytes]:
        def features(start: int, end: int) -> dict[str, np.ndarray]:
            batch = full_sentences.Rows(rows.bodies[start:end], rows.lengths[start:end])
            return full_sentences.row_features(batch, self.job.config, self.ids, rng)

        return self._encode(len(rows.lengths), features, summary)

    def _encode(
        self, count: int, features_of: Callable[[int, int], dict[str, np.ndarray]], summary: Summary
    ) -> list[bytes]:
        records = []
        for start in range(0, count, _BATCH_INSTANCES):
            features = features_of(start, start + _BATCH_INSTANCES)
            records.extend(encode_examples(features, self.job.use_v2_feature_names))
            self._count(features, summary)
        return records

    def _count(self, features: dict[str, np.ndarray], summary: Summary) -> None:
        summary.instances += len(features["input_ids"])
        summary.capacity += features["input_ids"].size
        summary.tokens += int(features["input_mask"].sum())
        summary.padded_rows += int(np.count_nonzero(features["input_mask"][:, -1] == 0))
        if self.ids.unk_id is not None:
            summary.unk_tokens += int(np.count_nonzero(features["original_ids"] == self.ids.unk_id))
        if "next_sentence_labels" in features:
            summary.random_next += int(features["next_sentence_labels"].sum())
        if "masked_lm_weights" in features:
            summary.masked += int(features["masked_lm_weights"].sum())


class UnitProcessor:
    """Turns one work unit into serialized records; one per process, holding the tokenizer."""

    def __init__(self, job: Job):
        self.job = job
        self.tokenizer = job.tokenizer.load()
        self.encoder = Encoder(job, self.tokenizer.special_ids)

    def __call__(self, unit: work_units.WorkUnit) -> UnitOutput:
        texts, read_stats = work_units.read_documents(unit, split_sentences=self.job.config.objective == "nsp")
        summary = Summary(
            units=1,
            lines=read_stats.lines,
            repaired_lines=read_stats.repaired_lines,
            replaced_chars=read_stats.replaced_chars,
        )
        docs = self._tokenize(texts)
        summary.documents = len(docs)
        summary.dropped_documents = len(texts) - len(docs)
        rng = instances_lib.InstanceRng(self.job.random_seed, unit.index)
        if self.job.config.objective == "mlm":
            rows, leftover = self._full_rows(docs, rng)
            return UnitOutput(unit.index, self.encoder.rows(rows, rng.np, summary), summary, leftover)
        records = self.encoder.pairs(self._pairs(docs, rng), rng.np, summary)
        return UnitOutput(unit.index, records, summary, np.zeros([0], np.int32))

    def _pairs(self, docs: list[list[np.ndarray]], rng: instances_lib.InstanceRng) -> list[instances_lib.Pair]:
        config = self.job.config
        rng.py.shuffle(docs)
        pairs = [
            pair
            for _ in range(config.dupe_factor)
            for doc_index in range(len(docs))
            for pair in instances_lib.pairs_from_document(docs, doc_index, config, rng)
        ]
        return [pairs[i] for i in rng.np.permutation(len(pairs))]  # Google shuffles the instances

    def _full_rows(
        self, docs: list[list[np.ndarray]], rng: instances_lib.InstanceRng
    ) -> tuple[full_sentences.Rows, np.ndarray]:
        sep_id = self.encoder.ids.sep_id
        streams = []
        for _ in range(self.job.config.dupe_factor):
            rng.py.shuffle(docs)  # each pass puts other documents side by side
            streams.append(full_sentences.document_stream(docs, sep_id))
        return full_sentences.cut_rows(np.concatenate(streams), self.job.config.max_seq_length - 2, sep_id)

    def _tokenize(self, texts: list[list[str]]) -> list[list[np.ndarray]]:
        ids, splits = self.tokenizer.tokenize_marked([line for doc in texts for line in doc])
        docs, line = [], 0
        for doc in texts:
            sentences = [ids[splits[j] : splits[j + 1]] for j in range(line, line + len(doc))]
            line += len(doc)
            sentences = [s for s in sentences if len(s)]  # lines of only control characters or spaces
            if sentences:
                docs.append(sentences)
        return docs


class LeftoverRows:
    """The rows that the units' leftovers ("mlm") complete, fed in unit order; the input's end closes the last one.

    Invariant: the records depend only on the leftovers, their unit indices and the seed.
    """

    def __init__(self, encoder: Encoder):
        self.encoder = encoder
        self.carry = full_sentences.Carry(encoder.job.config.max_seq_length - 2, encoder.ids.sep_id)

    def add(self, index: int, leftover: np.ndarray, summary: Summary) -> list[bytes]:
        """The records of the row (at most one) that unit `index`'s leftover completes."""
        rng = instances_lib.InstanceRng.parent(self.encoder.job.random_seed, index)
        return self.encoder.rows(self.carry.add(leftover), rng, summary)

    def finish(self, num_units: int, summary: Summary) -> list[bytes]:
        """The records of the output's one padded row, masked with the stream of no unit's index."""
        rng = instances_lib.InstanceRng.parent(self.encoder.job.random_seed, num_units)
        return self.encoder.rows(self.carry.last_row(), rng, summary)
