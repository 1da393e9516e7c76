"""Text files to pretraining TFRecords: work units over worker processes, merged in unit order.

Each work unit (about `unit_bytes` of whole documents, documents.py) is read, tokenized in one batched
tensorflow-text call, turned into instances `dupe_factor` times, masked and serialized, all with random streams
seeded from (seed, unit index). The objective "nsp" makes sentence pairs over the unit's shuffled documents
(instances.py) and shuffles them; "mlm" cuts full rows from the unit's documents, shuffled anew for each pass
(full_sentences.py), and hands back its leftover tokens, which the parent joins across units into rows of its own,
masked with a stream of (seed, index of the unit that completes them). The parent writes the records in unit
order, round-robin over the output files. So the bytes written depend on the seed, the input and `unit_bytes`,
never on `num_workers`, and memory is bounded by the units in flight (two per worker), never by the corpus.

Example:

```python
summary = create_pretraining_data(
    ["corpus.txt"], ["train.tfrecord"], "vocab.txt", do_lower_case=True,
    config=InstanceConfig(max_seq_length=128, max_predictions_per_seq=20), num_workers=4)
print(summary.format())
```
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import multiprocessing
import time
from typing import Callable, Iterator, Sequence

import numpy as np

from kbert.data import documents as documents_lib
from kbert.data import full_sentences
from kbert.data import instances as instances_lib
from kbert.data import outputs
from kbert.data.masking import SpecialIds
from kbert.data.tfrecord_writer import ShardedWriter, encode_examples
from kbert.data.tokenization import WordpieceTokenizer, load_vocabulary
from kbert.errors import ConfigError


@dataclasses.dataclass
class Summary:
    """Totals over all work units, printed at the end of a run."""

    units: int = 0
    lines: int = 0
    repaired_lines: int = 0
    replaced_chars: int = 0
    documents: int = 0
    dropped_documents: int = 0
    instances: int = 0
    tokens: int = 0
    unk_tokens: int = 0
    masked: int = 0
    random_next: int = 0
    capacity: int = 0  # instances * max_seq_length
    padded_rows: int = 0
    seconds: float = 0.0
    objective: str = "nsp"

    def add(self, other: "Summary") -> None:
        for field in dataclasses.fields(self):
            if field.name not in ("seconds", "objective"):
                setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))

    def format(self) -> str:
        instances = max(self.instances, 1)
        tokens = max(self.tokens, 1)
        fill = self.tokens / max(self.capacity, 1)
        if self.objective == "mlm":
            labels = "objective mlm: full rows of consecutive text, no next_sentence_labels"
            padding = (f"padding {self.capacity - self.tokens:,} positions ({100 * (1 - fill):.2g}%) in "
                       f"{self.padded_rows:,} row(s), the output's last")
        else:
            labels = f"next_sentence_labels=1: {self.random_next / instances:.1%}"
            padding = f"mean fill {fill:.1%} of max_seq_length"
        lines = [
            f"documents: {self.documents:,} ({self.dropped_documents:,} without tokens dropped) "
            f"from {self.lines:,} lines in {self.units:,} work units",
            f"instances: {self.instances:,} ({self.instances / max(self.seconds, 1e-9):,.0f}/s in "
            f"{self.seconds:,.1f} s); {labels}",
            f"tokens: {self.tokens:,}; [UNK] rate {self.unk_tokens / tokens:.3%}; {padding}",
            f"masked share: {self.masked / tokens:.2%} of tokens ({self.masked / instances:.1f} per instance)",
        ]
        if self.repaired_lines:
            lines.append(
                f"non-UTF-8 input: {self.repaired_lines:,} lines repaired, {self.replaced_chars:,} characters "
                "replaced by U+FFFD"
            )
        return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class _Job:
    vocab_file: str
    do_lower_case: bool
    config: instances_lib.InstanceConfig
    random_seed: int
    use_v2_feature_names: bool


@dataclasses.dataclass
class _UnitOutput:
    """A work unit's records and totals; for "mlm" also its leftover tokens, which the parent carries on."""

    index: int
    records: list[bytes]
    summary: Summary
    leftover: np.ndarray


_worker: "_UnitProcessor | None" = None
# Instances masked and encoded per NumPy batch: bounds the [N, max_seq_length] temporaries.
_BATCH_INSTANCES = 4096


class _Encoder:
    """Masks, serializes and counts batches of instances.

    It needs the vocabulary only, never a TensorFlow op, so the parent holds one too (for the MLM rows it
    completes from the units' leftovers) and can still fork its workers.
    """

    def __init__(self, job: _Job, vocab: Sequence[str]):
        self.job = job
        self.ids = SpecialIds.from_vocabulary(vocab)
        self.unk_id = vocab.index("[UNK]")

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
        summary.unk_tokens += int(np.count_nonzero(features["original_ids"] == self.unk_id))
        if "next_sentence_labels" in features:
            summary.random_next += int(features["next_sentence_labels"].sum())
        if "masked_lm_weights" in features:
            summary.masked += int(features["masked_lm_weights"].sum())


class _UnitProcessor:
    """Turns one work unit into serialized records; one per process, holding the tokenizer."""

    def __init__(self, job: _Job):
        self.job = job
        self.tokenizer = WordpieceTokenizer(job.vocab_file, lower_case=job.do_lower_case)
        self.encoder = _Encoder(job, self.tokenizer.vocab)

    def __call__(self, unit: documents_lib.WorkUnit) -> _UnitOutput:
        texts, read_stats = documents_lib.read_documents(unit)
        summary = Summary(
            units=1, lines=read_stats.lines, repaired_lines=read_stats.repaired_lines,
            replaced_chars=read_stats.replaced_chars,
        )
        docs = self._tokenize(texts)
        summary.documents = len(docs)
        summary.dropped_documents = len(texts) - len(docs)
        rng = instances_lib.InstanceRng(self.job.random_seed, unit.index)
        if self.job.config.objective == "mlm":
            rows, leftover = self._full_rows(docs, rng)
            return _UnitOutput(unit.index, self.encoder.rows(rows, rng.np, summary), summary, leftover)
        records = self.encoder.pairs(self._pairs(docs, rng), rng.np, summary)
        return _UnitOutput(unit.index, records, summary, np.zeros([0], np.int32))

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
        ids, splits = self.tokenizer.tokenize([line for doc in texts for line in doc])
        docs, line = [], 0
        for doc in texts:
            sentences = [ids[splits[j]:splits[j + 1]] for j in range(line, line + len(doc))]
            line += len(doc)
            sentences = [s for s in sentences if len(s)]  # lines of only control characters or spaces
            if sentences:
                docs.append(sentences)
        return docs


def _init_worker(job: _Job) -> None:
    global _worker
    _worker = _UnitProcessor(job)


def _process_unit(unit: documents_lib.WorkUnit) -> _UnitOutput:
    return _worker(unit)


@contextlib.contextmanager
def _outputs_in_unit_order(
    units: Sequence[documents_lib.WorkUnit], job: _Job, num_workers: int, start_method: str
) -> Iterator[Iterator[_UnitOutput]]:
    """The units' outputs, in unit order. With several workers, the pool is started and its first window (two
    units per worker) submitted on entry, before the caller opens any output file; the next unit is submitted as
    each output is taken."""
    if num_workers == 1:
        yield map(_UnitProcessor(job), units)
        return
    context = multiprocessing.get_context(start_method)
    if start_method == "forkserver":
        context.set_forkserver_preload([__name__])
    with concurrent.futures.ProcessPoolExecutor(
        num_workers, mp_context=context, initializer=_init_worker, initargs=(job,)
    ) as pool:
        in_flight = collections.deque(pool.submit(_process_unit, u) for u in units[:2 * num_workers])

        def in_order() -> Iterator[_UnitOutput]:
            for unit in units[2 * num_workers:]:
                yield in_flight.popleft().result()
                in_flight.append(pool.submit(_process_unit, unit))
            while in_flight:
                yield in_flight.popleft().result()

        yield in_order()


def create_pretraining_data(
    input_files: Sequence[str],
    output_files: Sequence[str],
    vocab_file: str,
    do_lower_case: bool,
    config: instances_lib.InstanceConfig,
    random_seed: int = 12345,
    num_workers: int = 1,
    use_v2_feature_names: bool = False,
    gzip: bool = False,
    unit_bytes: int = 1 << 20,
    progress: Callable[[Summary, int], None] | None = None,
    start_method: str = "forkserver",
) -> Summary:
    """Writes pretraining instances of `input_files` to `output_files`; returns the totals.

    Settings, file names, the vocabulary and the input are checked before any output is touched; the outputs are
    staged and replace existing files only once all are complete and none is empty (outputs.py, ShardedWriter),
    so a failed run leaves every file as it was. `progress(summary_so_far, total_units)` is
    called after each work unit. Workers start with `start_method`: "forkserver" (default) forks them from a fresh
    server that imported TensorFlow but ran no op, safe whatever this process did; "fork" saves that server's
    TensorFlow import (seconds) but deadlocks if this process has already run a TensorFlow op, so only a fresh
    process (the command-line tool) may use it.
    """
    config.validate()
    outputs.check_outputs(output_files, {"--input_file": input_files, "--vocab_file": [vocab_file]})
    vocab = load_vocabulary(vocab_file)  # fail on a bad vocabulary before reading the corpus
    if num_workers < 1:
        raise ConfigError(f"--num_workers={num_workers} must be at least 1.")
    if unit_bytes < 1:
        raise ConfigError(f"--work_unit_mb: a work unit of {unit_bytes} bytes; give a positive size, e.g. 1 (MiB).")
    if start_method not in ("fork", "forkserver", "spawn"):
        raise ValueError(f"start_method={start_method!r}: use 'forkserver', 'fork' or 'spawn'.")
    start = time.time()
    units = list(documents_lib.plan_work_units(input_files, unit_bytes))
    job = _Job(vocab_file, do_lower_case, config, random_seed, use_v2_feature_names)
    encoder = _Encoder(job, vocab)
    carry = full_sentences.Carry(config.max_seq_length - 2, encoder.ids.sep_id)
    summary = Summary(objective=config.objective)

    def write(records: list[bytes], writer: ShardedWriter) -> None:
        for record in records:
            writer.write(record)

    with _outputs_in_unit_order(units, job, num_workers, start_method) as unit_outputs, \
            ShardedWriter(output_files, gzip=gzip) as writer:
        for output in unit_outputs:
            write(output.records, writer)
            # The row a unit's leftover completes (only "mlm" leaves any) follows the unit's own rows.
            parent_rng = instances_lib.InstanceRng.parent(random_seed, output.index)
            write(encoder.rows(carry.add(output.leftover), parent_rng, output.summary), writer)
            summary.add(output.summary)
            summary.seconds = time.time() - start
            if progress is not None:
                progress(summary, len(units))
        # The end of the input closes the last row: the one padded row, masked with the stream of no unit's index.
        write(encoder.rows(carry.last_row(), instances_lib.InstanceRng.parent(random_seed, len(units)), summary),
              writer)
    summary.seconds = time.time() - start
    return summary
