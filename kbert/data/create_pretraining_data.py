"""Text files to pretraining TFRecords: work units over worker processes, merged in unit order.

Each work unit (about `unit_bytes` of whole documents, work_units.py) becomes serialized records in a worker
(unit_processing.py). The parent writes the records in unit order, round-robin over the output files, with the
rows it completes from the units' leftovers ("mlm"). So the bytes written depend on the seed, the input and
`unit_bytes`, never on `num_workers` nor on the input's format, and memory is bounded by the units in flight (two per
worker), never by the corpus.

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
import importlib
import multiprocessing
import os
import time
from collections.abc import Callable, Iterator, Sequence

from kbert.data import instances as instances_lib
from kbert.data import outputs, records_info, work_units
from kbert.data.creation_summary import Summary
from kbert.data.tfrecord_writer import ShardedWriter
from kbert.data.tokenizer_source import CheckedTokenizer, TokenizerSource
from kbert.data.unit_processing import Encoder, Job, LeftoverRows, UnitOutput, UnitProcessor
from kbert.errors import ConfigError

_worker: UnitProcessor | None = None


def _init_worker(job: Job, num_workers: int) -> None:
    global _worker
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()  # macOS: no affinity
    if num_workers >= cores:
        # A worker a core: tokenizers' encode_batch would spread each batch over a thread a core in every worker, and
        # the threads of the workers contend for the same cores (a user's own setting stands).
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    _worker = UnitProcessor(job)


def _process_unit(unit: work_units.WorkUnit) -> UnitOutput:
    return _worker(unit)


@contextlib.contextmanager
def _outputs_in_unit_order(
    units: Sequence[work_units.WorkUnit], job: Job, num_workers: int, start_method: str
) -> Iterator[Iterator[UnitOutput]]:
    """The units' outputs, in unit order. With several workers, the pool is started and its first window (two
    units per worker) submitted on entry, before the caller opens any output file; the next unit is submitted as
    each output is taken."""
    if num_workers == 1:
        yield map(UnitProcessor(job), units)
        return
    context = multiprocessing.get_context(start_method)
    modules = [__name__, *job.tokenizer.worker_modules]  # imported once, before the workers fork
    if start_method == "forkserver":
        context.set_forkserver_preload(modules)
    elif start_method == "fork":
        for module in modules:
            importlib.import_module(module)
    with concurrent.futures.ProcessPoolExecutor(
        num_workers, mp_context=context, initializer=_init_worker, initargs=(job, num_workers)
    ) as pool:
        in_flight = collections.deque(pool.submit(_process_unit, u) for u in units[: 2 * num_workers])

        def in_order() -> Iterator[UnitOutput]:
            for unit in units[2 * num_workers :]:
                yield in_flight.popleft().result()
                in_flight.append(pool.submit(_process_unit, unit))
            while in_flight:
                yield in_flight.popleft().result()

        yield in_order()


def checked_job(
    input_files: Sequence[str],
    output_files: Sequence[str],
    tokenizer: TokenizerSource,
    config: instances_lib.InstanceConfig,
    random_seed: int,
    use_v2_feature_names: bool,
    unit_bytes: int,
    input_format: work_units.InputFormat,
) -> tuple[Job, CheckedTokenizer]:
    """The run's job and checked tokenizer, after every check that needs no reading of the corpus: settings, output
    names, the tokenizer (see `create_pretraining_data`)."""
    config.validate()
    outputs.check_outputs(output_files, {"--input_file": input_files, tokenizer.flag: [tokenizer.file]})
    checked = tokenizer.check()  # fail on a bad tokenizer before reading the corpus
    if unit_bytes < 1:
        raise ConfigError(f"--work_unit_mb: a work unit of {unit_bytes} bytes; give a positive size, e.g. 1 (MiB).")
    return Job(tokenizer, config, random_seed, use_v2_feature_names, input_format), checked


def create_pretraining_data(
    input_files: Sequence[str],
    output_files: Sequence[str],
    vocab_file: str | None,
    do_lower_case: bool,
    config: instances_lib.InstanceConfig,
    random_seed: int = 12345,
    num_workers: int = 1,
    use_v2_feature_names: bool = False,
    gzip: bool = False,
    unit_bytes: int = 1 << 20,
    progress: Callable[[Summary, int], None] | None = None,
    start_method: str = "forkserver",
    input_format: work_units.InputFormat = work_units.TEXT,
    tokenizer: str | None = None,
) -> Summary:
    """Writes pretraining instances of `input_files` (in `input_format`) to `output_files`; returns the totals.

    Text is tokenized with the WordPiece `vocab_file` (lower-cased if `do_lower_case`) or the Hugging Face
    tokenizer.json `tokenizer` (the file or its directory), exactly one of the two (tokenizer_source.py).
    Settings, file names, the tokenizer and the input are checked before any output is touched; the outputs are
    staged and replace existing files only once all are complete and none is empty (outputs.py, ShardedWriter),
    so a failed run leaves every file as it was; with them, each output folder gets the tokenizer's identity
    (records_info.py). Bad records of a record format are counted and the first few
    named in the summary; only a corpus without one good record is an error. `progress(summary_so_far,
    total_units)` is called after each work unit. Workers start with `start_method`: "forkserver" (default) forks
    them from a fresh server that imported what a worker needs (TensorFlow for WordPiece, none for a
    tokenizer.json) but ran no op, safe whatever this process did; "fork" imports it here and saves that server's
    import (seconds) but deadlocks if this process has already run a TensorFlow op, so only a fresh process (the
    command-line tool) may use it.
    """
    job, checked = checked_job(
        input_files,
        output_files,
        TokenizerSource(vocab_file, tokenizer, do_lower_case),
        config,
        random_seed,
        use_v2_feature_names,
        unit_bytes,
        input_format,
    )
    if num_workers < 1:
        raise ConfigError(f"--num_workers={num_workers} must be at least 1.")
    if start_method not in ("fork", "forkserver", "spawn"):
        raise ValueError(f"start_method={start_method!r}: use 'forkserver', 'fork' or 'spawn'.")
    start = time.time()
    units, report = work_units.plan_work_units(input_files, unit_bytes, input_format)
    leftovers = LeftoverRows(Encoder(job, checked.special_ids))
    summary = Summary(
        objective=config.objective,
        records=report.records,
        bad_records=report.bad,
        problems=tuple(report.problems),
        tokenizer=checked.file,
        tokenizer_sha256=checked.sha256,
    )

    def write(records: list[bytes], writer: ShardedWriter) -> None:
        for record in records:
            writer.write(record)

    with (
        _outputs_in_unit_order(units, job, num_workers, start_method) as unit_outputs,
        ShardedWriter(output_files, gzip=gzip, beside=records_info.records_info_files(output_files, checked)) as writer,
    ):
        for output in unit_outputs:
            write(output.records, writer)
            # The row a unit's leftover completes (only "mlm" leaves any) follows the unit's own rows.
            write(leftovers.add(output.index, output.leftover, output.summary), writer)
            summary.add(output.summary)
            summary.seconds = time.time() - start
            if progress is not None:
                progress(summary, len(units))
        write(leftovers.finish(len(units), summary), writer)
    summary.seconds = time.time() - start
    return summary
