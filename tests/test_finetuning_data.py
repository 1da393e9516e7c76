"""Task files to examples to batches: GLUE's layout and columns, generic files, labels, truncation, bad input."""

import numpy as np
import pytest
import tensorflow as tf
from finetuning_fixtures import NLI_LABELS, vocab_file, write_mnli, write_tsv
from tfrecord_fixtures import CLS, FIRST_WORD, SEP

from kbert.errors import ConfigError, InputDataError, MissingFileError
from kbert.finetuning.batches import eval_batches
from kbert.finetuning.config import TaskConfig
from kbert.finetuning.encoding import PairEncoder, pair_lengths
from kbert.finetuning.examples import Examples, load_task_data
from kbert.finetuning.tasks import resolve_task


def _file_task(tmp_path, train, dev, name="tsv", **keys):
    values = dict(name=name, train_file=str(train), eval_file=str(dev), text_a_column="text", label_column="y")
    values.update(keys)
    return resolve_task(TaskConfig(**values))


def test_mnli_reads_glue_layout_both_dev_sets_and_tests(tmp_path):
    root = write_mnli(tmp_path / "glue")
    for data_dir in (root, f"{root}/MNLI"):  # GLUE's root or the task's directory
        data = load_task_data(resolve_task(TaskConfig(name="mnli", data_dir=data_dir)))
        assert data.label_names == NLI_LABELS and data.metrics == ("accuracy",)
        assert set(data.evals) == {"eval", "eval_mismatched"} and set(data.tests) == {"MNLI-m", "MNLI-mm"}
    assert len(data.train) == 48 and data.train.text_b is not None
    assert data.tests["MNLI-m"].index == ["100", "101", "102", "103", "104"]
    first = open(f"{root}/MNLI/train.tsv").read().splitlines()[1].split("\t")
    assert data.train.text_a[0] == first[4] and data.train.labels[0] == NLI_LABELS.index(first[-1])


def test_cola_has_no_header_and_stray_quotes_are_kept(tmp_path):
    rows = [["gj04", 1, "", 'the "book was red .'], ["gj04", 0, "*", "book the red was ."]]
    write_tsv(tmp_path / "CoLA" / "train.tsv", None, rows)
    write_tsv(tmp_path / "CoLA" / "dev.tsv", None, rows)
    data = load_task_data(resolve_task(TaskConfig(name="cola", data_dir=str(tmp_path))))
    assert data.train.text_a == ['the "book was red .', "book the red was ."]  # quoting off, as GLUE needs
    assert data.train.labels.tolist() == [1, 0] and data.metrics[0] == "matthews_corr"


def test_mrpc_byte_order_mark_and_short_rows(tmp_path):
    write_tsv(
        tmp_path / "MRPC" / "train.tsv",
        ["\ufeffQuality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
        [[1, 1, 2, "a b", "c d"], [0, 3]],
    )  # the second row is cut short: skipped and counted
    write_tsv(
        tmp_path / "MRPC" / "dev.tsv", ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"], [[0, 1, 2, "a", "b"]]
    )
    data = load_task_data(resolve_task(TaskConfig(name="mrpc", data_dir=str(tmp_path))))
    assert data.train.text_b == ["c d"] and data.train.skipped_rows == 1
    assert data.metrics == ("f1", "accuracy")


def test_generic_csv_and_jsonl_labels_come_from_the_training_file(tmp_path):
    (tmp_path / "t.csv").write_text('text,y\n"a, quoted",pos\nb,neg\nc,neu\n')
    (tmp_path / "d.jsonl").write_text('{"text": "x", "y": "neu"}\n\n{"text": "z", "y": "pos"}\n')
    data = load_task_data(_file_task(tmp_path, tmp_path / "t.csv", tmp_path / "t.csv", name="csv"))
    assert data.label_names == ("neg", "neu", "pos") and data.train.text_a[0] == "a, quoted"
    jsonl = load_task_data(_file_task(tmp_path, tmp_path / "d.jsonl", tmp_path / "d.jsonl", name="jsonl"))
    assert jsonl.label_names == ("neu", "pos") and jsonl.evals["eval"].labels.tolist() == [0, 1]
    assert jsonl.metrics == ("accuracy", "f1", "matthews_corr")  # two classes: F1 of the second


def test_regression_targets_are_floats(tmp_path):
    write_tsv(tmp_path / "t.tsv", ["text", "y"], [["a", "4.5"], ["b", "0"]])
    data = load_task_data(_file_task(tmp_path, tmp_path / "t.tsv", tmp_path / "t.tsv", type="regression"))
    assert data.label_names is None and data.num_outputs == 1
    assert data.train.labels.dtype == np.float32 and data.train.labels.tolist() == [4.5, 0.0]
    assert data.metrics == ("pearson", "spearman")


@pytest.mark.parametrize(
    "case, error, needles",
    [
        (
            "missing_column",
            InputDataError,
            ["has no column 'txt'", "its columns are 'text', 'y'", "task.text_a_column"],
        ),
        ("unseen_label", InputDataError, ["dev.tsv, line 3", "label 'maybe'", "(no, yes)"]),
        ("empty_file", InputDataError, ["dev.tsv holds no examples"]),
        ("header_only", InputDataError, ["dev.tsv holds no examples"]),
        ("not_a_number", InputDataError, ["dev.tsv, line 2", "'high'", "task.type=classification"]),
        ("no_file", MissingFileError, ["nowhere.tsv does not exist"]),
    ],
)
def test_bad_input_is_one_line_naming_the_file_and_fix(tmp_path, case, error, needles):
    train = write_tsv(tmp_path / "train.tsv", ["text", "y"], [["a", "yes"], ["b", "no"]])
    dev_rows = {"unseen_label": [["a", "yes"], ["b", "maybe"]], "not_a_number": [["a", "high"]]}
    dev = tmp_path / "dev.tsv"
    if case == "empty_file":
        dev.write_text("")
    elif case == "header_only":
        dev.write_text("text\ty\n")
    else:
        write_tsv(dev, ["text", "y"], dev_rows.get(case, [["a", "yes"]]))
    keys = {
        "missing_column": {"text_a_column": "txt"},
        "not_a_number": {"type": "regression"},
        "no_file": {"eval_file": str(tmp_path / "nowhere.tsv")},
    }.get(case, {})
    if case == "not_a_number":
        write_tsv(tmp_path / "train.tsv", ["text", "y"], [["a", "1"]])
    with pytest.raises(error) as raised:
        load_task_data(_file_task(tmp_path, train, dev, **keys))
    message = str(raised.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message


def test_config_errors_name_the_key(tmp_path):
    with pytest.raises(ConfigError, match="task.name='sst3'.*sst2"):
        resolve_task(TaskConfig(name="sst3"))
    with pytest.raises(ConfigError, match="task.eval_file"):
        resolve_task(TaskConfig(name="tsv", train_file="a", text_a_column="t", label_column="y"))
    with pytest.raises(MissingFileError, match="SST-2/train.tsv"):
        resolve_task(TaskConfig(name="sst2", data_dir=str(tmp_path)))


def _google_truncate_seq_pair(len_a, len_b, budget):
    """google-research/bert's `_truncate_seq_pair`, on lengths."""
    while len_a + len_b > budget:
        if len_a > len_b:
            len_a -= 1
        else:
            len_b -= 1
    return len_a, len_b


def test_pair_truncation_is_googles_longest_first():
    grid = [(a, b) for a in range(13) for b in range(13)]
    a, b = (tf.constant([g[i] for g in grid], tf.int64) for i in (0, 1))
    for budget in (1, 4, 5, 9):
        kept = np.stack([t.numpy() for t in pair_lengths(a, b, budget)], axis=1)
        assert kept.tolist() == [list(_google_truncate_seq_pair(x, y, budget)) for x, y in grid]


def test_packing_and_truncation_count(tmp_path):
    encoder = PairEncoder(vocab_file(tmp_path), seq_length=8)
    w = [FIRST_WORD + i for i in range(6)]  # w0..w5
    examples = Examples("mem", ["w0 w1 w2 w3 w4", "w0"], ["w5 w4", "W5"], np.array([2, 0], np.int32))
    features, labels = next(iter(eval_batches(encoder, examples, batch_size=2)))
    assert features["input_ids"].numpy().tolist() == [
        [CLS, w[0], w[1], w[2], SEP, w[5], w[4], SEP],  # a cut from 5 to 3 pieces, b kept
        [CLS, w[0], SEP, w[5], SEP, 0, 0, 0],
    ]  # lower-cased
    assert features["segment_ids"].numpy().tolist() == [[0] * 5 + [1] * 3, [0, 0, 0, 1, 1, 0, 0, 0]]
    assert features["input_mask"].numpy().tolist() == [[1] * 8, [1] * 5 + [0] * 3]
    assert labels.numpy().tolist() == [2, 0] and encoder.count_truncated(examples) == 1
    single = Examples("mem", ["w0 w1 w2 w3 w4 w5 w0", "w1"], None, np.array([0, 1], np.int32))
    ids = next(iter(eval_batches(encoder, single, 2, with_labels=False)))["input_ids"].numpy()
    assert ids[0].tolist() == [CLS] + w[:6] + [SEP] and encoder.count_truncated(single) == 1
