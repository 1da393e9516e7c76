"""Data creation on Apache Beam (DirectRunner): for a seed, the same set of records as the local tool, in every
objective and input format; its summary's totals equal the local tool's; bad input fails before the pipeline."""

import collections
import dataclasses

import pytest
from cli_batch import run_tools
from test_input_formats import WORDS, corpus_documents, records_of, vocab_file, write_corpus  # noqa: F401 (fixture)
from tokenizer_fixtures import write_tokenizer

from kbert.data import work_units
from kbert.data.beam_pretraining_data import run_beam
from kbert.data.create_pretraining_data import create_pretraining_data
from kbert.data.input_files import RECORDS_INFO
from kbert.data.instances import InstanceConfig
from kbert.data.outputs import shard_paths
from kbert.data.wordpiece.vocab_file import SPECIAL_TOKENS
from kbert.errors import InputDataError

DIRECT = ("--runner=DirectRunner",)


def local_and_beam(tmp_path, vocab_file, source, input_format, config, **kwargs):
    local = shard_paths(str(tmp_path / "local" / "local.tfrecord"), 3)
    fmt = work_units.InputFormat(input_format)
    local_summary = create_pretraining_data(
        [source], local, vocab_file, True, config, unit_bytes=400, input_format=fmt, **kwargs
    )
    beam_summary = run_beam(
        [source],
        str(tmp_path / "beam" / "beam.tfrecord"),
        3,
        vocab_file,
        True,
        config,
        unit_bytes=400,
        input_format=fmt,
        pipeline_args=DIRECT,
        **kwargs,
    )
    beam_files = shard_paths(str(tmp_path / "beam" / "beam.tfrecord"), 3)
    return (sum(records_of(local), []), local_summary), (sum(records_of(beam_files), []), beam_summary)


@pytest.mark.spawns
@pytest.mark.parametrize(
    "objective,input_format,tokenizer",
    [
        ("nsp", "text", "vocab_file"),
        ("mlm", "jsonl", "vocab_file"),
        ("mlm", "text", "vocab_file"),
        ("mlm", "text", "tokenizer.json"),
    ],
)
def test_beam_writes_the_local_tools_records(tmp_path, vocab_file, objective, input_format, tokenizer):
    source = write_corpus(tmp_path, corpus_documents(), input_format)
    config = InstanceConfig(max_seq_length=32, max_predictions_per_seq=5, dupe_factor=2, objective=objective)
    files = {"vocab_file": vocab_file}
    if tokenizer == "tokenizer.json":
        files = {"vocab_file": None, "tokenizer": str(write_tokenizer(tmp_path / "tokenizer"))}
    (local, local_summary), (beam, beam_summary) = local_and_beam(
        tmp_path, source=source, input_format=input_format, config=config, **files
    )
    assert len(local) > 50 and collections.Counter(beam) == collections.Counter(local)
    assert beam_summary.counts() == local_summary.counts()
    assert beam_summary.format().splitlines()[0] == local_summary.format().splitlines()[0]
    assert (beam_summary.tokenizer, beam_summary.tokenizer_sha256) == (
        local_summary.tokenizer,
        local_summary.tokenizer_sha256,
    )
    # Both name the tokenizer beside their records, alike.
    beside = [(tmp_path / folder / RECORDS_INFO).read_text() for folder in ("local", "beam")]
    assert beside[0] == beside[1] and local_summary.tokenizer_sha256 in beside[0]


@pytest.mark.spawns
def test_beam_gzip_and_one_shard(tmp_path, vocab_file):
    import tensorflow as tf

    source = write_corpus(tmp_path, corpus_documents(num_docs=6), "text")
    config = InstanceConfig(max_seq_length=32, max_predictions_per_seq=5, objective="mlm", no_masking=True)
    out = tmp_path / "one.tfrecord"
    run_beam([source], str(out), 1, vocab_file, True, config, gzip=True, pipeline_args=DIRECT)
    create_pretraining_data([source], [str(tmp_path / "local")], vocab_file, True, config)
    beam = [bytes(r.numpy()) for r in tf.data.TFRecordDataset(str(out), compression_type="GZIP")]
    assert sorted(beam) == sorted(records_of([str(tmp_path / "local")])[0])


@pytest.mark.spawns
def test_a_bad_first_file_fails_before_the_pipeline(tmp_path, vocab_file):
    source = tmp_path / "corpus.jsonl"
    source.write_text('{"body": "w1."}\n' * 3)
    with pytest.raises(InputDataError, match="all 3 records are bad"):
        run_beam(
            [str(source)],
            str(tmp_path / "out"),
            1,
            vocab_file,
            True,
            InstanceConfig(objective="mlm"),
            input_format=work_units.InputFormat("jsonl"),
            pipeline_args=DIRECT,
        )
    assert not list(tmp_path.glob("out*"))


@pytest.fixture(scope="module")
def command_lines(tmp_path_factory):
    """The command-line tests' runs, all in one process (tests/cli_batch.py: one TensorFlow start), each run as a
    fresh process would: kbert-create-pretraining-data locally and with --runner=DirectRunner (a pipeline option
    passed through), then tools/pack_pretraining_data.py --runner=DirectRunner on records written in this process.
    Returns name -> (its folder, CompletedProcess)."""
    import os

    tmp_path = tmp_path_factory.mktemp("create")
    vocab_file = str(tmp_path / "vocab.txt")  # the vocab_file fixture's, for a module's fixture
    with open(vocab_file, "w") as f:
        f.write("\n".join(list(SPECIAL_TOKENS) + WORDS + ["."]) + "\n")
    source = write_corpus(tmp_path, corpus_documents(), "jsonl")
    common = [
        f"--input_file={source}",
        "--input_format=jsonl",
        f"--vocab_file={vocab_file}",
        "--max_seq_length=32",
        "--max_predictions_per_seq=5",
        "--objective=mlm",
        "--num_output_shards=2",
        "--work_unit_mb=0.0004",
    ]
    runs = {
        "local": [],
        "beam": ["--runner=DirectRunner", "--beam_pipeline_args=--direct_running_mode=in_memory"],
    }
    packing = tmp_path_factory.mktemp("pack")
    unpacked = str(packing / "unpacked.tfrecord")
    create_pretraining_data(
        [write_corpus(packing, corpus_documents(num_docs=8), "text")],
        [unpacked],
        vocab_file,
        True,
        InstanceConfig(max_seq_length=32, max_predictions_per_seq=5, short_seq_prob=0.5),
    )
    arguments = [
        ("create_pretraining_data", common + [f"--output_file={tmp_path / name}"] + extra)
        for name, extra in runs.items()
    ]
    pack = [f"--input_file={unpacked}", f"--output_file={packing / 'packed'}", "--runner=DirectRunner"]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    results = run_tools([*arguments, ("tools/pack_pretraining_data.py", pack)], cwd=root)
    return {"local": (tmp_path, results[0]), "beam": (tmp_path, results[1]), "pack": (packing, results[2])}


@pytest.mark.spawns
@pytest.mark.xdist_group("beam_command_lines")  # one worker runs the shared batch once
def test_the_command_line_runs_on_beam(command_lines):
    """kbert-create-pretraining-data --runner=DirectRunner (with a pipeline option passed through) writes the set
    of records the local tool writes, and the same first summary line."""
    runs = {}
    for name in ("local", "beam"):
        tmp_path, result = command_lines[name]
        assert result.returncode == 0, result.stderr
        runs[name] = (
            sorted(sum(records_of(shard_paths(str(tmp_path / name), 2)), [])),
            next(line for line in result.stdout.splitlines() if line.startswith("documents:")),
        )
    assert runs["beam"] == runs["local"] and len(runs["local"][0]) > 50


@pytest.mark.slow
def test_beam_packs_the_local_tools_rows(tmp_path, vocab_file):
    """Packing on Beam: chunks that span files, cut as the local tool cuts them, give the same set of rows."""
    from kbert.data.beam_pretraining_data import run_beam_packing
    from kbert.data.packing.pack_pretraining_data import pack_pretraining_data

    source = write_corpus(tmp_path, corpus_documents(), "text")
    unpacked = shard_paths(str(tmp_path / "unpacked.tfrecord"), 3)
    create_pretraining_data(
        [source],
        unpacked,
        vocab_file,
        True,
        InstanceConfig(max_seq_length=32, max_predictions_per_seq=5, short_seq_prob=0.5),
    )
    local = shard_paths(str(tmp_path / "local.tfrecord"), 2)
    local_summary = pack_pretraining_data(unpacked, local, sequences_per_row=3, chunk_records=37)
    beam_summary = run_beam_packing(
        unpacked, str(tmp_path / "beam.tfrecord"), 2, sequences_per_row=3, chunk_records=37, pipeline_args=DIRECT
    )
    beam = sum(records_of(shard_paths(str(tmp_path / "beam.tfrecord"), 2)), [])
    assert local_summary.chunks > 2 and sorted(beam) == sorted(sum(records_of(local), []))
    assert dataclasses.replace(beam_summary, seconds=0) == dataclasses.replace(local_summary, seconds=0)


@pytest.mark.spawns
@pytest.mark.xdist_group("beam_command_lines")
def test_the_packing_command_line_runs_on_beam(command_lines):
    tmp_path, result = command_lines["pack"]
    assert result.returncode == 0, result.stderr
    assert "sequences per row: mean" in result.stdout and (tmp_path / "packed").stat().st_size > 0
