"""Text files to pretraining TFRecords: work units over worker processes, merged in unit order.

Each work unit (about `unit_bytes` of whole documents, documents.py) is read, tokenized in one batched
tensorflow-text call, turned into instances `dupe_factor` times over its shuffled documents, shuffled, and
serialized, all with random streams seeded from (seed, unit index). The parent writes the units' records in unit
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
import dataclasses
import multiprocessing
import time
from typing import Callable, Sequence

import numpy as np

from kbert.data import documents as documents_lib
from kbert.data import instances as instances_lib
from kbert.data import outputs
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
    seconds: float = 0.0

    def add(self, other: "Summary") -> None:
        for field in dataclasses.fields(self):
            if field.name != "seconds":
                setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))

    def format(self) -> str:
        instances = max(self.instances, 1)
        tokens = max(self.tokens, 1)
        lines = [
            f"documents: {self.documents:,} ({self.dropped_documents:,} without tokens dropped) "
            f"from {self.lines:,} lines in {self.units:,} work units",
            f"instances: {self.instances:,} ({self.instances / max(self.seconds, 1e-9):,.0f}/s in "
            f"{self.seconds:,.1f} s); next_sentence_labels=1: {self.random_next / instances:.1%}",
            f"tokens: {self.tokens:,}; [UNK] rate {self.unk_tokens / tokens:.3%}; "
            f"mean fill {self.tokens / max(self.capacity, 1):.1%} of max_seq_length",
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


_worker: "_UnitProcessor | None" = None
# Pairs masked and encoded per NumPy batch: bounds the [N, max_seq_length] temporaries.
_BATCH_PAIRS = 4096


class _UnitProcessor:
    """Turns one work unit into serialized records; one per process, holding the tokenizer."""

    def __init__(self, job: _Job):
        self.job = job
        self.tokenizer = WordpieceTokenizer(job.vocab_file, lower_case=job.do_lower_case)
        self.ids = instances_lib.SpecialIds(
            cls_id=self.tokenizer.cls_id,
            sep_id=self.tokenizer.sep_id,
            mask_id=self.tokenizer.mask_id,
            vocab_size=self.tokenizer.vocab_size,
            is_continuation=self.tokenizer.is_continuation,
        )

    def __call__(self, unit: documents_lib.WorkUnit) -> tuple[list[bytes], Summary]:
        config = self.job.config
        texts, read_stats = documents_lib.read_documents(unit)
        summary = Summary(
            units=1, lines=read_stats.lines, repaired_lines=read_stats.repaired_lines,
            replaced_chars=read_stats.replaced_chars,
        )
        docs = self._tokenize(texts)
        summary.documents = len(docs)
        summary.dropped_documents = len(texts) - len(docs)
        rng = instances_lib.InstanceRng(self.job.random_seed, unit.index)
        rng.py.shuffle(docs)
        pairs = [
            pair
            for _ in range(config.dupe_factor)
            for doc_index in range(len(docs))
            for pair in instances_lib.pairs_from_document(docs, doc_index, config, rng)
        ]
        pairs = [pairs[i] for i in rng.np.permutation(len(pairs))]  # Google shuffles the instances
        records = []
        for start in range(0, len(pairs), _BATCH_PAIRS):
            features = instances_lib.mask_and_pad(pairs[start:start + _BATCH_PAIRS], config, self.ids, rng.np)
            records.extend(encode_examples(features, self.job.use_v2_feature_names))
            self._count(features, summary)
        return records, summary

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

    def _count(self, features: dict[str, np.ndarray], summary: Summary) -> None:
        summary.instances += len(features["input_ids"])
        summary.capacity += features["input_ids"].size
        summary.tokens += int(features["input_mask"].sum())
        summary.unk_tokens += int(np.count_nonzero(features["original_ids"] == self.tokenizer.unk_id))
        summary.random_next += int(features["next_sentence_labels"].sum())
        if "masked_lm_weights" in features:
            summary.masked += int(features["masked_lm_weights"].sum())


def _init_worker(job: _Job) -> None:
    global _worker
    _worker = _UnitProcessor(job)


def _process_unit(unit: documents_lib.WorkUnit) -> tuple[list[bytes], Summary]:
    return _worker(unit)


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
    load_vocabulary(vocab_file)  # fail on a bad vocabulary before reading the corpus
    if num_workers < 1:
        raise ConfigError(f"--num_workers={num_workers} must be at least 1.")
    if unit_bytes < 1:
        raise ConfigError(f"--work_unit_mb: a work unit of {unit_bytes} bytes; give a positive size, e.g. 1 (MiB).")
    if start_method not in ("fork", "forkserver", "spawn"):
        raise ValueError(f"start_method={start_method!r}: use 'forkserver', 'fork' or 'spawn'.")
    start = time.time()
    units = list(documents_lib.plan_work_units(input_files, unit_bytes))
    job = _Job(vocab_file, do_lower_case, config, random_seed, use_v2_feature_names)
    summary = Summary()

    def consume(records: list[bytes], unit_summary: Summary, writer: ShardedWriter) -> None:
        for record in records:
            writer.write(record)
        summary.add(unit_summary)
        summary.seconds = time.time() - start
        if progress is not None:
            progress(summary, len(units))

    if num_workers == 1:
        processor = _UnitProcessor(job)
        with ShardedWriter(output_files, gzip=gzip) as writer:
            for unit in units:
                consume(*processor(unit), writer)
    else:
        context = multiprocessing.get_context(start_method)
        if start_method == "forkserver":
            context.set_forkserver_preload([__name__])
        with concurrent.futures.ProcessPoolExecutor(
            num_workers, mp_context=context, initializer=_init_worker, initargs=(job,)
        ) as pool:
            # The first window is submitted, so the workers started, before any output file is opened.
            in_flight = collections.deque(pool.submit(_process_unit, u) for u in units[:2 * num_workers])
            with ShardedWriter(output_files, gzip=gzip) as writer:
                for unit in units[2 * num_workers:]:
                    consume(*in_flight.popleft().result(), writer)
                    in_flight.append(pool.submit(_process_unit, unit))
                while in_flight:
                    consume(*in_flight.popleft().result(), writer)
    summary.seconds = time.time() - start
    return summary
