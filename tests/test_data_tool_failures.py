"""The data tools' failure paths: one line naming the file or flag and the fix, exit 1, and every file that was
there before left byte-identical (issue #13, items 6, 9, 10 and 13)."""

import os
import pathlib
import signal
import sys

import forkserver
import pytest
import tensorflow as tf
from cli_batch import assert_refused, run_tools

from kbert.data.create_pretraining_data import create_pretraining_data
from kbert.data.instances import InstanceConfig
from kbert.data.outputs import STAGING_SUFFIX, staging_path
from kbert.data.wordpiece.vocab_file import reserved_tokens

ROOT = pathlib.Path(__file__).resolve().parents[1]
WORDS = [f"w{i}" for i in range(40)]
SMALL = ["--max_seq_length=32", "--max_predictions_per_seq=5", "--dupe_factor=1"]
SMALL_CONFIG = InstanceConfig(max_seq_length=32, max_predictions_per_seq=5, dupe_factor=1)  # SMALL, for the library


def _make_data(folder: pathlib.Path) -> pathlib.Path:
    """A corpus, its vocabulary, and an earlier run's output, in `folder`."""
    folder.mkdir(parents=True)
    (folder / "vocab.txt").write_text("\n".join(reserved_tokens("compact") + WORDS) + "\n")
    documents = ["\n".join(" ".join(WORDS[(d + s + k) % 40] for k in range(6)) for s in range(5)) for d in range(12)]
    (folder / "corpus.txt").write_text("\n\n".join(documents) + "\n")
    (folder / "train.tfrecord").write_bytes(b"an earlier run's records")
    return folder


@pytest.fixture
def data(tmp_path):
    """A corpus, its vocabulary, and an earlier run's output, in tmp_path/data."""
    return _make_data(tmp_path / "data")


def _snapshot(folder: pathlib.Path) -> dict[str, bytes]:
    """Every file under the folder's parent (so staging folders beside it count too), by path."""
    return {str(p.relative_to(folder.parent)): p.read_bytes() for p in folder.parent.rglob("*") if p.is_file()}


REFUSALS = [
    "empty_input",
    "directory_input",
    "input_is_output",
    "output_twice",
    "more_shards_than_instances",
    "work_unit_mb",
    "blank_vocab_line",
    "only_special_tokens",
    "output_under_a_file",
    "no_text_column",
    "all_records_bad",
    "dataset_not_a_folder",
    "runner_with_num_workers",
    "beam_args_without_runner",
]


def _refusal(data: pathlib.Path, case: str) -> tuple[list[str], list[str]]:
    """The arguments of a refused kbert-create-pretraining-data run on `data` (its files written there) and what its
    error line must hold."""
    corpus, output = data / "corpus.txt", data / "train.tfrecord"
    (data / "empty.txt").write_text("\n\n")
    (data / "texts").mkdir()
    (data / "blank.txt").write_text("[PAD]\n[UNK]\n[CLS]\n\n[SEP]\n[MASK]\nw0\n")
    (data / "special.txt").write_text("\n".join(reserved_tokens("compact")) + "\n")
    (data / "corpus.csv").write_text("id,body\n1,w1 w2\n")
    (data / "corpus.jsonl").write_text('{"text": 1}\n{"text": "w1 w2"\n')
    return {
        "empty_input": (
            [f"--input_file={data / 'empty.txt'}", f"--output_file={output}"],
            ["--input_file", "empty.txt", "no text"],
        ),
        "directory_input": (
            [f"--input_file={data / 'texts'}", f"--output_file={output}"],
            ["--input_file", "texts is a directory", "/*.txt"],
        ),
        "input_is_output": (
            [f"--input_file={corpus}", f"--output_file={corpus}"],
            ["--output_file", "corpus.txt is also --input_file"],
        ),
        "output_twice": (
            [f"--input_file={corpus}", f"--output_file={output},{data / 'x'},{output}"],
            ["--output_file", "train.tfrecord is named twice"],
        ),
        "more_shards_than_instances": (
            [f"--input_file={corpus}", f"--output_file={output}", "--num_output_shards=500"],
            ["--num_output_shards", "for 500 output files", "nothing was written"],
        ),
        "work_unit_mb": (
            [f"--input_file={corpus}", f"--output_file={output}", "--work_unit_mb=-1"],
            ["--work_unit_mb=-1", "must be positive"],
        ),
        "blank_vocab_line": (
            [f"--input_file={corpus}", f"--output_file={output}", f"--vocab_file={data / 'blank.txt'}"],
            ["--vocab_file", "blank.txt line 4 is blank"],
        ),
        "only_special_tokens": (
            [f"--input_file={corpus}", f"--output_file={output}", f"--vocab_file={data / 'special.txt'}"],
            ["--vocab_file", "special.txt", "only reserved tokens", "kbert-build-vocab"],
        ),
        "output_under_a_file": (
            [f"--input_file={corpus}", f"--output_file={corpus}/train.tfrecord"],
            ["--output_file", "corpus.txt/train.tfrecord", "check the path"],
        ),
        "no_text_column": (
            [f"--input_file={data / 'corpus.csv'}", "--input_format=csv", f"--output_file={output}"],
            ["--text_column", "corpus.csv has no column 'text' (its columns: 'id', 'body')"],
        ),
        "all_records_bad": (
            [f"--input_file={data / 'corpus.jsonl'}", "--input_format=jsonl", f"--output_file={output}"],
            ["all 2 records are bad", "line 1: 'text' is int, not text", "--text_column=text"],
        ),
        "dataset_not_a_folder": (
            [f"--input_file={corpus}", "--input_format=hf_dataset", f"--output_file={output}"],
            ["--input_file", "corpus.txt is a file", "save_to_disk"],
        ),
        "runner_with_num_workers": (
            [f"--input_file={corpus}", f"--output_file={output}", "--runner=DirectRunner", "--num_workers=2"],
            ["--num_workers", "--beam_pipeline_args=--direct_num_workers"],
        ),
        "beam_args_without_runner": (
            [f"--input_file={corpus}", f"--output_file={output}", "--beam_pipeline_args=--direct_num_workers=2"],
            ["add --runner=DirectRunner"],
        ),
    }[case]


def _inspector_runs(folder: pathlib.Path) -> list[list[str]]:
    """kbert-inspect-tfrecords's refused command lines: records written in this process (what the inspector is
    given is the point, not how), and a vocabulary with a blank line."""
    data = _make_data(folder / "data")
    records = folder / "records.tfrecord"
    create_pretraining_data([str(data / "corpus.txt")], [str(records)], str(data / "vocab.txt"), True, SMALL_CONFIG)
    (data / "blank.txt").write_text("[PAD]\n\n[CLS]\n")
    return [
        [f"--input_file={records}", "--max_records=0"],
        [f"--input_file={records}", f"--vocab_file={data / 'blank.txt'}"],
    ]


def _build_vocab_runs(folder: pathlib.Path) -> list[list[str]]:
    """kbert-build-vocab's refused command lines: text without words, no text, and its output as its input."""
    folder.mkdir(parents=True)
    controls, empty, out = folder / "controls.txt", folder / "empty.txt", folder / "vocab.txt"
    controls.write_bytes(b"\x01\x02\n\x03\n\n")
    empty.write_bytes(b"")
    out.write_text("an earlier vocabulary\n")
    return [
        [f"--input_file={controls}", f"--output_file={out}", "--vocab_size=50", "--reserved_layout=compact"],
        [f"--input_file={empty}", f"--output_file={out}"],
        [f"--input_file={out}", f"--output_file={out}"],
    ]


@pytest.fixture(scope="module")
def refusals(tmp_path_factory):
    """Every refusal case, each on a data folder of its own, then kbert-inspect-tfrecords's and kbert-build-vocab's
    (tools/build_vocab.py's) refusals, all run in one process (tests/cli_batch.py: one TensorFlow start-up for all,
    each run as a fresh process would): case -> (its result, what its line must hold, its folder's files before,
    after); "inspect_tfrecords" and "build_vocab" -> (their results, their folder's files before, after)."""
    root = tmp_path_factory.mktemp("refusals")
    folders = {case: _make_data(root / case / "data") for case in REFUSALS}
    cases = {case: _refusal(folder, case) for case, folder in folders.items()}
    inspector, vocab = _inspector_runs(root / "inspect_tfrecords"), _build_vocab_runs(root / "build_vocab")
    before = {case: _snapshot(folder) for case, folder in folders.items()}
    tools = {"inspect_tfrecords": inspector, "build_vocab": vocab}
    before.update({tool: _snapshot(root / tool / "data") for tool in tools})  # _snapshot: the data folder's parent
    runs = [
        ("create_pretraining_data", [f"--vocab_file={folders[case] / 'vocab.txt'}", *SMALL, *cases[case][0]])
        for case in REFUSALS
    ]
    runs += [("inspect_tfrecords", args) for args in inspector] + [("tools/build_vocab.py", args) for args in vocab]
    results = run_tools(runs, cwd=ROOT)
    found = {
        case: (result, cases[case][1], before[case], _snapshot(folders[case]))
        for case, result in zip(REFUSALS, results)
    }
    results = results[len(REFUSALS) :]
    for tool, runs in tools.items():
        found[tool] = (results[: len(runs)], before[tool], _snapshot(root / tool / "data"))
        results = results[len(runs) :]
    return found


@pytest.mark.spawns
@pytest.mark.xdist_group("data_tool_refusals")  # one worker runs the shared batch once
@pytest.mark.parametrize("case", REFUSALS)
def test_create_pretraining_data_refuses_and_keeps_every_file(refusals, case):
    result, needles, before, after = refusals[case]
    assert_refused(result, "kbert-create-pretraining-data", *needles)
    assert after == before


@pytest.mark.spawns
def test_killed_run_leaves_nothing_an_output_glob_matches_and_the_next_run_cleans_up(data):
    output = data / "train.tfrecord"
    before = _snapshot(data)
    # A run killed while writing: the writer is open, records are written, and the process dies without cleanup.
    script = (
        "import os, sys\nfrom kbert.data.tfrecord_writer import ShardedWriter\n"
        "writer = ShardedWriter(sys.argv[1:]).__enter__()\n"
        "for _ in range(2000):\n    writer.write(b'partial record')\n"  # past the file's buffer: on disk
        "os.kill(os.getpid(), 9)\n"
    )
    killed = forkserver.run(
        [sys.executable, "-c", script, str(output), str(data / "other.tfrecord")],
        cwd=ROOT,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        capture_output=True,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL
    staged = staging_path(str(output))
    assert tf.io.gfile.exists(staged) and STAGING_SUFFIX in staged
    originals = ("corpus.txt", "train.tfrecord", "vocab.txt")
    assert sorted(tf.io.gfile.glob(f"{data}/*")) == sorted(f"{data}/{name}" for name in originals)
    assert {k: v for k, v in _snapshot(data).items() if STAGING_SUFFIX not in k} == before

    # The same run again (what kbert-create-pretraining-data runs, in this process: no second TensorFlow start):
    # it replaces the killed run's staged files, and leaves no staging folder behind.
    outputs = [str(output), str(data / "other.tfrecord")]
    create_pretraining_data([str(data / "corpus.txt")], outputs, str(data / "vocab.txt"), True, SMALL_CONFIG)
    assert not tf.io.gfile.exists(os.path.dirname(staged))
    assert sum(1 for _ in tf.data.TFRecordDataset(str(output))) > 0


@pytest.mark.spawns
@pytest.mark.xdist_group("data_tool_refusals")
def test_build_vocab_on_text_without_words_is_one_line(refusals):
    (controls, empty, itself), before, after = refusals["build_vocab"]
    assert_refused(controls, "kbert-build-vocab", "--input_file", "no words", "controls.txt")
    assert_refused(empty, "kbert-build-vocab", "--input_file", "empty.txt", "no text")
    assert_refused(itself, "kbert-build-vocab", "--output_file", "is also --input_file")
    assert after == before


@pytest.mark.spawns
@pytest.mark.xdist_group("data_tool_refusals")
def test_inspector_rejects_max_records_zero_and_a_blank_vocabulary_line(refusals):
    (zero, blank), before, after = refusals["inspect_tfrecords"]
    assert_refused(zero, "kbert-inspect-tfrecords", "--max_records=0", "leave it out")
    assert_refused(blank, "kbert-inspect-tfrecords", "--vocab_file", "blank.txt line 2 is blank")
    assert after == before
