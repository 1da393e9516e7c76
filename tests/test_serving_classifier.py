"""kbert-export --format=saved_model and kbert-predict: a fine-tuned sentence-pair classifier and a single-text
regressor (bf16), served from strings in a process that imports TensorFlow and tensorflow-text only, give
kbert-finetune's own predictions on every eval row; kbert-predict streams a file from a run or its SavedModel;
bad input is one line."""

import json
import os
import shutil
import sys

import forkserver
import keras
import numpy as np
import pytest
import tensorflow as tf
from finetuning_fixtures import kbert_model_dir, vocab_file, words, write_config, write_tsv
from serving_fixtures import run_without_kbert
from training_fixtures import cli_env

from kbert.errors import ConfigError, InputDataError, MissingFileError
from kbert.finetuning import load_finetune_config, run_finetuning
from kbert.finetuning.exporting import check_output_dir
from kbert.finetuning.serving.classifier_export import export_classifier
from kbert.finetuning.serving.finetuned_run import load_run
from kbert.finetuning.serving.predict import open_predictor, with_overrides, write_predictions
from kbert.modeling import BertConfig, BertPretrainer

# Its tests share an expensive module-scoped fixture: one worker runs them all and builds it once
# (tools/test.sh: --dist loadgroup).
pytestmark = pytest.mark.xdist_group("test_serving_classifier")

LABELS = ("neg", "neu", "pos")
HEADER = ["a", "b", "y", "score"]

# `saved_model_cli show --all` of each of `show_dirs`, as serving_fixtures.saved_model_cli_show runs it (the
# command's own main, before tensorflow-text is imported), into `shown`: put before a run_without_kbert script, so
# one TensorFlow start serves the exports and lists their signatures. The script's arguments are in `arguments`.
SAVED_MODEL_CLI = """
arguments = sys.argv[1:]
import contextlib
import io

from tensorflow.python.tools.saved_model_cli import main as saved_model_cli

shown = []
for directory in show_dirs:
    sys.argv = ["saved_model_cli", "show", "--dir", directory, "--all"]
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        try:
            saved_model_cli()
        except SystemExit as exit:
            assert not exit.code, exit.code
    shown.append(printed.getvalue())
"""

PREDICT_EVAL = """
import csv
import tensorflow as tf
import tensorflow_text  # noqa: F401

eval_file, pair_dir, regression_dir = arguments
with open(eval_file, newline="") as f:
    rows = list(csv.DictReader(f, delimiter="\\t", quoting=csv.QUOTE_NONE))
a, b = tf.constant([r["a"] for r in rows]), tf.constant([r["b"] for r in rows])
pair = tf.saved_model.load(pair_dir)
served = pair.signatures["serving_default"](text_a=a, text_b=b)
regression = tf.saved_model.load(regression_dir).signatures["serving_default"](text_a=a)
result = {"label": [v.decode() for v in served["label"].numpy()], "label_id": served["label_id"].numpy().tolist(),
          "probabilities": served["probabilities"].numpy().tolist(),
          "called": [v.decode() for v in pair(a, b)["label"].numpy()],
          "score": regression["score"].numpy().tolist(), "saved_model_cli": shown}
"""


def _predictions(path) -> list[str]:
    return [row.split("\t")[1] for row in open(path).read().splitlines()[1:]]


def _finetune(config, model_dir):
    try:
        run_finetuning(
            load_finetune_config([str(config)]),
            str(model_dir),
            tf.distribute.get_strategy(),
            print_fn=lambda *a, **k: None,
        )
    finally:
        keras.mixed_precision.set_global_policy("float32")
    return str(model_dir)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Two one-epoch runs on a TSV (pairs into three labels; single texts into a score, in bf16), their
    SavedModels, and what those answer on the eval file (and saved_model_cli shows of them) in a process without
    kbert."""
    tmp = tmp_path_factory.mktemp("serving")
    rng = np.random.default_rng(0)
    # Second texts of 9 words: pairs longer than seq_length 16, so the export must truncate as kbert does.
    rows = [[words(rng, k % 3), words(rng, k % 3, 9), LABELS[k % 3], float(k % 3)] for k in range(40)]
    write_tsv(tmp / "train.tsv", HEADER, rows[:32])
    write_tsv(tmp / "dev.tsv", HEADER, rows[32:])
    task = {
        "name": "tsv",
        "train_file": str(tmp / "train.tsv"),
        "eval_file": str(tmp / "dev.tsv"),
        "text_a_column": "a",
    }
    vocab = vocab_file(tmp)
    pair = _finetune(
        write_config(
            tmp / "pair.yaml",
            task={**task, "text_b_column": "b", "label_column": "y"},
            data={"vocab_file": vocab},
            train={"epochs": 1},
        ),
        tmp / "pair",
    )
    regression = _finetune(
        write_config(
            tmp / "regression.yaml",
            task={**task, "label_column": "score", "type": "regression"},
            data={"vocab_file": vocab},
            train={"epochs": 1, "mixed_precision": "mixed_bfloat16"},
        ),
        tmp / "regression",
    )
    pair_run = load_run(pair)
    differences = [
        export_classifier(pair_run, str(tmp / "pair_sm")),
        export_classifier(load_run(regression), str(tmp / "regression_sm")),
    ]
    answers = run_without_kbert(
        "show_dirs = sys.argv[2:]\n" + SAVED_MODEL_CLI + PREDICT_EVAL,
        str(tmp / "dev.tsv"),
        str(tmp / "pair_sm"),
        str(tmp / "regression_sm"),
    )
    return tmp, pair_run, differences, answers


@pytest.mark.spawns
def test_served_predictions_equal_kbert_finetunes_on_every_eval_row(served):
    tmp, _, differences, answers = served
    assert answers["label"] == answers["called"] == _predictions(tmp / "pair" / "predictions" / "eval.tsv")
    assert [LABELS[i] for i in answers["label_id"]] == answers["label"]
    np.testing.assert_allclose(np.sum(answers["probabilities"], axis=1), 1.0, rtol=1e-6)
    assert (np.argmax(answers["probabilities"], axis=1) == answers["label_id"]).all()
    expected = [float(v) for v in _predictions(tmp / "regression" / "predictions" / "eval.tsv")]
    assert [f"{v:.6g}" for v in answers["score"]] == [f"{v:.6g}" for v in expected]
    assert max(differences) < 1e-5


@pytest.mark.spawns
def test_saved_model_cli_lists_the_signatures(served):
    tmp, _, _, answers = served
    pair, regression = answers["saved_model_cli"]
    for name in ("text_a", "text_b", "probabilities", "label_id", "label"):
        assert f"['{name}']" in pair
    assert "['text_a']" in regression and "['score']" in regression and "['text_b']" not in regression
    assert json.loads((tmp / "pair_sm" / "assets.extra" / "kbert.json").read_text())["labels"] == list(LABELS)


@pytest.mark.spawns
def test_kbert_predict_from_the_run_or_its_saved_model_and_from_jsonl(served, tmp_path):
    tmp, pair_run, _, _ = served
    expected = (tmp / "pair" / "predictions" / "eval.tsv").read_text()
    for model in (str(tmp / "pair"), str(tmp / "pair_sm")):
        predictor = open_predictor(model)
        assert (
            write_predictions(
                predictor, str(tmp / "dev.tsv"), str(tmp_path / "out.tsv"), predictor.columns, batch_size=3
            )
            == 8
        )
        assert (tmp_path / "out.tsv").read_text() == expected
    lines = open(tmp / "dev.tsv").read().splitlines()[1:]
    (tmp_path / "in.jsonl").write_text(
        "".join(json.dumps({"x": r.split("\t")[0], "z": r.split("\t")[1]}) + "\n" for r in lines)
    )
    columns = with_overrides(pair_run.columns, "jsonl", text_a="x", text_b="z")
    write_predictions(
        open_predictor(str(tmp / "pair_sm")), str(tmp_path / "in.jsonl"), str(tmp_path / "j.tsv"), columns
    )
    assert (tmp_path / "j.tsv").read_text() == expected


class _Recorder:
    """A predictor that fails on its second batch: a reader that loaded the whole file would hit its bad last row
    first."""

    def __init__(self, columns):
        self.columns = columns
        self.sizes = []

    def __call__(self, texts):
        self.sizes.append(len(texts[0]))
        if len(self.sizes) == 2:
            raise RuntimeError("second batch")
        return ["x"] * len(texts[0])


@pytest.mark.spawns
def test_kbert_predict_streams_and_names_a_bad_row(served, tmp_path):
    columns = served[1].columns
    write_tsv(tmp_path / "in.tsv", ["a", "b"], [["w1", "w2"]] * 100 + [["w3"]])
    recorder = _Recorder(columns)
    with pytest.raises(RuntimeError, match="second batch"):
        write_predictions(recorder, str(tmp_path / "in.tsv"), str(tmp_path / "out.tsv"), columns, batch_size=10)
    assert recorder.sizes == [10, 10]
    with pytest.raises(InputDataError) as raised:
        write_predictions(
            lambda texts: ["x"] * len(texts[0]),
            str(tmp_path / "in.tsv"),
            str(tmp_path / "out.tsv"),
            columns,
            batch_size=10,
        )
    assert str(raised.value).startswith(
        f"{tmp_path / 'in.tsv'}, line 102: the row has no value for column 'a' or 'b'"
    ) and "\n" not in str(raised.value)
    assert os.listdir(tmp_path) == ["in.tsv"]  # no partial output


@pytest.mark.spawns
def test_runs_that_cannot_be_served_are_refused_in_one_line(served, tmp_path):
    tmp = served[0]
    pretraining = kbert_model_dir(
        tmp_path / "pretrain",
        BertPretrainer(
            BertConfig(vocab_size=200, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
        ),
    )
    moved = tmp_path / "moved"
    shutil.copytree(tmp / "pair", moved)
    config = json.loads((moved / "finetune_config.json").read_text())
    config["data"]["vocab_file"] = str(tmp_path / "gone" / "vocab.txt")
    (moved / "finetune_config.json").write_text(json.dumps(config))
    unfinished = tmp_path / "unfinished"
    shutil.copytree(tmp / "pair", unfinished)
    os.remove(unfinished / "summary.json")
    for path, error, needle in [
        (pretraining, ConfigError, "is not a kbert-finetune model_dir"),
        (moved, MissingFileError, "gone/vocab.txt is not there (moved or deleted); pass --vocab_file"),
        (unfinished, ConfigError, "has not finished"),
    ]:
        with pytest.raises(error) as raised:
            load_run(str(path))
        assert needle in str(raised.value) and "\n" not in str(raised.value)
    assert load_run(str(moved), vocab_file=str(tmp / "vocab.txt")).label_names == LABELS
    result = forkserver.run(
        [
            sys.executable,
            "-m",
            "kbert.cli.export",
            f"--checkpoint={pretraining}",
            "--format=saved_model",
            f"--output_dir={tmp_path}/out",
        ],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=300,
    )
    errors = [line for line in result.stderr.splitlines() if line.startswith("kbert-export: error:")]
    assert result.returncode == 1 and len(errors) == 1 and "is not a kbert-finetune model_dir" in errors[0]
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.spawns
def test_an_output_folder_with_files_is_written_only_with_overwrite(served, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match=r"holds files \(notes.txt\).*--overwrite"):
        check_output_dir(str(tmp_path), overwrite=False)
    check_output_dir(str(tmp_path), overwrite=True)
    export_classifier(served[1], str(tmp_path))
    assert (tmp_path / "notes.txt").read_text() == "mine" and (tmp_path / "saved_model.pb").exists()


@pytest.mark.slow
def test_a_run_saved_with_the_flat_optimizer_layout_still_loads_for_predict_and_export(served, tmp_path):
    """A finished run written before the optimizer registry (flat keys in finetune_config.json, #60) loads as it
    was trained: its saved config is translated, not refused as a user's YAML would be."""
    tmp = served[0]
    old = tmp_path / "old"
    shutil.copytree(tmp / "pair", old)
    config = json.loads((old / "finetune_config.json").read_text())
    optimizer = config["optimizer"]
    adamw = optimizer.pop("adamw")
    adamw.pop("update_ratios")
    flat = {**optimizer, **adamw, "momentum": 0.9, "eeta": 0.001, "nesterov": False}
    config["optimizer"] = {**flat, "exclude_from_layer_adaptation": ["layer_norm", "LayerNorm", "bias"]}
    (old / "finetune_config.json").write_text(json.dumps(config))
    run = load_run(str(old))
    assert (
        run.label_names == LABELS
        and run.config.optimizer.as_dict() == load_run(str(tmp / "pair")).config.optimizer.as_dict()
    )
