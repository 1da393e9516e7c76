"""Pretraining TFRecords on Apache Beam: the local tools' work units and chunks, spread over a runner's workers.

`run_beam` creates records. The pipeline runs the same per-unit code as the local tool (unit_processing.py), so
for a seed it writes the
same set of records: files are planned into work units one file per task and numbered in input order; each unit
becomes its records on some worker; the units' leftovers ("mlm") meet in one task that joins them in unit order
into the rows the local tool's parent writes. Only the order of records within the output shards differs. The
same pipeline runs on DirectRunner here, and on PrismRunner, DataflowRunner, FlinkRunner or SparkRunner with their
own options (docs/data_creation.md). `run_beam_packing` packs records: the input is counted file by file, cut into
the local tool's chunks (packing/pack_pretraining_data.py), and each chunk is read and packed by some worker, with
the local tool's seed, so the rows are the same. The totals of both come back as Beam counters and make the local
tools' summaries.

Example:

```python
summary = run_beam(["gs://b/corpus-*.jsonl"], "gs://b/data/train.tfrecord", 64, "vocab.txt", True,
                   InstanceConfig(objective="mlm"), input_format=InputFormat("jsonl"),
                   pipeline_args=["--runner=DataflowRunner", "--project=P", "--region=R"])
```
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import apache_beam as beam
import numpy as np
import tensorflow as tf
from apache_beam import pvalue
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

from kbert.data import instances as instances_lib
from kbert.data import records_info, validation, work_units
from kbert.data.create_pretraining_data import checked_job
from kbert.data.creation_summary import Summary
from kbert.data.outputs import shard_paths
from kbert.data.packing.chunk import Chunk, PackSettings, PackSummary, pack_chunk
from kbert.data.packing.pack_pretraining_data import checked_packing
from kbert.data.tokenizer_source import TokenizerSource
from kbert.data.unit_processing import Encoder, Job, LeftoverRows, UnitProcessor
from kbert.errors import ConfigError

NAMESPACE = "kbert"
_PREFLIGHT_RECORDS = 1000


def _count(summary: Summary) -> None:
    for name, value in summary.counts().items():
        if value:
            Metrics.counter(NAMESPACE, name).inc(value)
    for problem in summary.problems:
        Metrics.string_set(NAMESPACE, "problems").add(problem)


def _plan(
    item: tuple[int, str], unit_bytes: int, input_format: work_units.InputFormat
) -> tuple[int, str, list[tuple[int, int]]]:
    index, path = item
    spans, report = work_units.plan_file(path, unit_bytes, input_format)
    _count(Summary(records=report.records, bad_records=report.bad, problems=tuple(report.problems)))
    return index, path, spans


def _numbering(counts: Sequence[tuple[int, int]]) -> tuple[dict[int, int], int]:
    """Each file's first unit index (files in input order), and the number of units."""
    firsts, total = {}, 0
    for index, count in sorted(counts):
        firsts[index] = total
        total += count
    return firsts, total


def _units(
    plan: tuple[int, str, list[tuple[int, int]]],
    numbering: tuple[dict[int, int], int],
    input_format: work_units.InputFormat,
) -> Iterator[work_units.WorkUnit]:
    index, path, spans = plan
    first = numbering[0][index]
    for offset, (start, end) in enumerate(spans):
        yield work_units.WorkUnit(first + offset, path, start, end, input_format)


class _ProcessUnits(beam.DoFn):
    """A unit's records, and its leftover tagged "leftovers"; one tokenizer per worker, made in `setup`."""

    def __init__(self, job: Job):
        super().__init__()
        self.job = job
        self.processor: UnitProcessor | None = None

    def setup(self) -> None:
        self.processor = UnitProcessor(self.job)

    def process(self, unit: work_units.WorkUnit) -> Iterator:
        output = self.processor(unit)
        _count(output.summary)
        yield from output.records
        yield pvalue.TaggedOutput("leftovers", (output.index, output.leftover))


def _leftover_records(
    leftovers: list[tuple[int, np.ndarray]], job: Job, numbering: tuple[dict[int, int], int]
) -> Iterator[bytes]:
    """The rows the local tool's parent completes: leftovers joined in unit order, then the last, padded row."""
    rows = LeftoverRows(Encoder(job, job.tokenizer.check().special_ids))
    summary = Summary()
    for index, leftover in sorted(leftovers, key=lambda item: item[0]):
        yield from rows.add(index, leftover, summary)
    yield from rows.finish(numbering[1], summary)
    _count(summary)


def _check_shards(output_file: str, num_shards: int) -> list[str]:
    outputs = shard_paths(output_file, num_shards)
    if len(outputs) != num_shards:
        raise ConfigError(
            "--runner writes --num_output_shards files named after one --output_file name; give one "
            "name, not a comma list."
        )
    return outputs


def _preflight(input_files: Sequence[str], input_format: work_units.InputFormat) -> None:
    """The first file's first records, read here: a wrong format or column fails before the pipeline starts."""
    records = input_format.records
    if records is None:
        work_units.plan_file(input_files[0], 1 << 62, input_format)  # require_text
        return
    report = work_units.ScanReport()
    for record, _ in zip(records.scan(input_files[0]), range(_PREFLIGHT_RECORDS)):
        report.count(input_files[0], record)
    report.check(input_files[:1], input_format)


def _write(records: beam.PCollection, output_file: str, num_shards: int, gzip: bool) -> None:
    """Writes `records` as the shards `shard_paths(output_file, num_shards)` names."""
    _ = records | "Write" >> beam.io.WriteToTFRecord(
        output_file,
        num_shards=num_shards,
        shard_name_template="" if num_shards == 1 else "-SSSSS-of-NNNNN",
        compression_type=CompressionTypes.GZIP if gzip else CompressionTypes.UNCOMPRESSED,
    )


def _run(pipeline: beam.Pipeline) -> dict:
    """Runs `pipeline` to its end; its kbert counters summed over steps (name -> int), and "problems" (a set)."""
    result = pipeline.run()
    result.wait_until_finish()
    metrics = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))
    totals: dict = {"problems": set()}
    for counter in metrics["counters"]:  # one per step that counted it
        totals[counter.key.metric.name] = totals.get(counter.key.metric.name, 0) + _value(counter)
    for strings in metrics.get("string_sets", []):
        totals["problems"] |= _value(strings)
    return totals


def _summary(totals: dict, objective: str, seconds: float) -> Summary:
    summary = Summary(objective=objective, seconds=seconds, problems=tuple(sorted(totals.pop("problems")))[:3])
    for name, value in totals.items():
        setattr(summary, name, value)
    return summary


def _value(metric):
    """A metric's committed value, or its attempted one where the runner commits none."""
    return metric.committed if metric.committed is not None else metric.attempted


def run_beam(
    input_files: Sequence[str],
    output_file: str,
    num_shards: int,
    vocab_file: str | None,
    do_lower_case: bool,
    config: instances_lib.InstanceConfig,
    random_seed: int = 12345,
    use_v2_feature_names: bool = False,
    gzip: bool = False,
    unit_bytes: int = 1 << 20,
    input_format: work_units.InputFormat = work_units.TEXT,
    pipeline_args: Sequence[str] = ("--runner=DirectRunner",),
    tokenizer: str | None = None,
) -> Summary:
    """Writes the records `create_pretraining_data` would write, as `num_shards` files named like
    `shard_paths(output_file, num_shards)`, with a Beam pipeline run on `pipeline_args`; returns the totals.

    The checks that need no reading of the corpus, and a read of the first file's first records, run before the
    pipeline starts. Beam writes the shards at temporary paths and moves them into place only when the pipeline
    succeeds, so a failed run leaves every file as it was; then the tokenizer's identity goes beside them
    (records_info.py).
    """
    outputs = _check_shards(output_file, num_shards)
    job, checked = checked_job(
        input_files,
        outputs,
        TokenizerSource(vocab_file, tokenizer, do_lower_case),
        config,
        random_seed,
        use_v2_feature_names,
        unit_bytes,
        input_format,
    )
    _preflight(input_files, input_format)
    start = time.time()
    pipeline = beam.Pipeline(options=PipelineOptions(list(pipeline_args)))
    plans = (
        pipeline
        | "Files" >> beam.Create(list(enumerate(input_files)))
        | "SpreadFiles" >> beam.Reshuffle()
        | "Plan" >> beam.Map(_plan, unit_bytes, input_format)
    )
    numbering = beam.pvalue.AsSingleton(
        plans
        | "Count" >> beam.Map(lambda plan: (plan[0], len(plan[2])))
        | "CountAll" >> beam.combiners.ToList()
        | "Number" >> beam.Map(_numbering)
    )
    units = plans | "Units" >> beam.FlatMap(_units, numbering, input_format) | "SpreadUnits" >> beam.Reshuffle()
    outputs_by_tag = units | "Records" >> beam.ParDo(_ProcessUnits(job)).with_outputs("leftovers", main="records")
    tail = (
        outputs_by_tag.leftovers
        | "Leftovers" >> beam.combiners.ToList()
        | "LeftoverRows" >> beam.FlatMap(_leftover_records, job, numbering)
    )
    _write((outputs_by_tag.records, tail) | "All" >> beam.Flatten(), output_file, num_shards, gzip)
    summary = _summary(_run(pipeline), config.objective, time.time() - start)
    summary.tokenizer, summary.tokenizer_sha256 = checked.file, checked.sha256
    work_units.ScanReport(summary.records, summary.bad_records, list(summary.problems)).check(input_files, input_format)
    records_info.write_records_info(outputs, checked)
    return summary


def _count_records(item: tuple[int, str]) -> tuple[int, str, int]:
    index, path = item
    compression = validation.detect_compression(path)
    count = int(tf.data.TFRecordDataset(path, compression).reduce(np.int64(0), lambda n, _: n + 1))
    return index, path, count


def _chunks(
    counts: Sequence[tuple[int, str, int]], chunk_records: int
) -> Iterator[tuple[int, tuple[tuple[str, int, int], ...]]]:
    """The local tool's chunks (`read_chunks`) from the files' record counts: (index, ((path, first, count), ...))."""
    pieces, size, index = [], 0, 0
    for _, path, count in sorted(counts):
        first = 0
        while first < count:
            taken = min(chunk_records - size, count - first)
            pieces.append((path, first, taken))
            first, size = first + taken, size + taken
            if size == chunk_records:
                yield index, tuple(pieces)
                pieces, size, index = [], 0, index + 1
    if pieces:
        yield index, tuple(pieces)


def _pack(planned: tuple[int, tuple[tuple[str, int, int], ...]], settings: PackSettings) -> Iterator[bytes]:
    index, spans = planned
    pieces = []
    for path, first, count in spans:
        records = tf.data.TFRecordDataset(path, validation.detect_compression(path)).skip(first).take(count)
        pieces.append((path, first, tuple(records.as_numpy_iterator())))
    records, summary = pack_chunk(Chunk(index, tuple(pieces)), settings)
    for name in ("chunks", "sequences", "tokens"):
        Metrics.counter(NAMESPACE, name).inc(getattr(summary, name))
    for size, rows in enumerate(summary.rows_by_size, 1):
        Metrics.counter(NAMESPACE, f"rows_{size}").inc(rows)
    yield from records


def run_beam_packing(
    input_files: Sequence[str],
    output_file: str,
    num_shards: int,
    sequences_per_row: int = 3,
    random_seed: int = 12345,
    gzip: bool | None = None,
    chunk_records: int = 100_000,
    pipeline_args: Sequence[str] = ("--runner=DirectRunner",),
) -> PackSummary:
    """Writes the rows `pack_pretraining_data` would write, as `num_shards` files named like
    `shard_paths(output_file, num_shards)`, with a Beam pipeline run on `pipeline_args`; returns the totals.

    Settings, names and every input file's first record are checked before the pipeline starts, as the local tool
    checks them; the shards replace existing files only when the pipeline succeeds.
    """
    outputs = _check_shards(output_file, num_shards)
    layout = checked_packing(input_files, outputs, sequences_per_row, chunk_records)
    start = time.time()
    pipeline = beam.Pipeline(options=PipelineOptions(list(pipeline_args)))
    counts = beam.pvalue.AsSingleton(
        pipeline
        | "Files" >> beam.Create(list(enumerate(input_files)))
        | "SpreadFiles" >> beam.Reshuffle()
        | "Count" >> beam.Map(_count_records)
        | "CountAll" >> beam.combiners.ToList()
    )
    chunks = (
        pipeline
        | "Start" >> beam.Create([None])
        | "Chunks" >> beam.FlatMap(lambda _, counted: _chunks(counted, chunk_records), counts)
        | "SpreadChunks" >> beam.Reshuffle()
    )
    settings = PackSettings(layout, sequences_per_row, random_seed)
    _write(
        chunks | "Pack" >> beam.FlatMap(_pack, settings),
        output_file,
        num_shards,
        layout.compression == "GZIP" if gzip is None else gzip,
    )
    totals = _run(pipeline)
    rows = [totals.get(f"rows_{size}", 0) for size in range(1, sequences_per_row + 1)]
    return PackSummary(
        layout.seq_length,
        sequences_per_row,
        totals.get("chunks", 0),
        totals.get("sequences", 0),
        totals.get("tokens", 0),
        rows,
        time.time() - start,
    )
