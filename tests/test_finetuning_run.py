"""kbert-finetune end to end on tiny models: scores, best epoch, predictions, resume/refuse, init checkpoints,
and bad input stopped before training."""

import json
import os
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf
from cli_batch import run_batch
from finetuning_fixtures import NLI_LABELS, kbert_model_dir, vocab_file, words, write_config, write_mnli, write_tsv

from kbert.errors import CheckpointMismatchError, ConfigError, NonFiniteLossError, VocabularyError
from kbert.finetuning import BertClassifier, load_finetune_config, run_finetuning
from kbert.finetuning.epochs import BestWeights, EpochEvaluator
from kbert.finetuning.metrics import accuracy
from kbert.finetuning.pretrained import load_encoder, resolve_checkpoint
from kbert.finetuning.runner import prepare
from kbert.modeling import BertConfig, BertEncoder, BertPretrainer, export_google_checkpoint

# The tiny model over the 200-token fixture vocabulary.
TINY = BertConfig(
    vocab_size=200,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=32,
)


def _run(config_path, model_dir, override=""):
    lines = []
    try:
        summary = run_finetuning(
            load_finetune_config([config_path], override),
            str(model_dir),
            tf.distribute.get_strategy(),
            print_fn=lambda line, **_: lines.append(line),
        )
    finally:
        keras.mixed_precision.set_global_policy("float32")
    return summary, lines


@pytest.fixture(scope="module")
def mnli_run(tmp_path_factory):
    """Two epochs of MNLI (GLUE's layout) on the tiny model, random init, one device."""
    tmp = tmp_path_factory.mktemp("mnli")
    config = write_config(
        tmp / "mnli.yaml",
        task={"name": "mnli", "data_dir": write_mnli(tmp / "glue", 48)},
        data={"vocab_file": vocab_file(tmp)},
        train={"epochs": 2, "global_batch_size": 4},
    )
    summary, lines = _run(config, tmp / "run")
    return tmp, config, summary, lines


@pytest.mark.slow
@pytest.mark.xdist_group("mnli_run")  # one worker builds the shared run once
def test_scores_predictions_and_files(mnli_run):
    tmp, _, summary, lines = mnli_run
    history = summary["epochs"]
    assert [h["epoch"] for h in history] == [1, 2] and history[1]["loss"] < history[0]["loss"]
    # Every epoch is len(train) // batch steps of full batches, so the schedule decays to its end (0) exactly.
    assert history[-1]["learning_rate"] == 0.0
    best = max(history, key=lambda h: (h["eval"]["accuracy"], -h["epoch"]))
    assert summary["best_epoch"] == best["epoch"]
    assert summary["eval"] == best["eval"] and summary["eval_mismatched"] == best["eval_mismatched"]
    # The reported score is the one of the kept weights: recompute it from the written predictions.
    for split, file_name in (("eval", "dev_matched"), ("eval_mismatched", "dev_mismatched")):
        gold = [row.split("\t")[-1] for row in open(tmp / "glue" / "MNLI" / f"{file_name}.tsv").read().splitlines()[1:]]
        predicted = [
            row.split("\t")[1] for row in open(tmp / "run" / "predictions" / f"{split}.tsv").read().splitlines()[1:]
        ]
        assert accuracy(np.array(gold), np.array(predicted)) == summary[split]["accuracy"]
    submission = open(tmp / "run" / "predictions" / "MNLI-mm.tsv").read().splitlines()
    assert (
        submission[0] == "index\tprediction"
        and [r.split("\t")[0] for r in submission[1:]] == ["100", "101", "102", "103", "104"]
        and all(r.split("\t")[1] in NLI_LABELS for r in submission[1:])
    )
    on_disk = json.load(open(tmp / "run" / "summary.json"))
    assert on_disk["eval"] == summary["eval"] and on_disk["labels"] == list(NLI_LABELS)
    assert on_disk["input"]["train"] == {"examples": 48, "truncated": 0, "skipped_rows": 0}
    assert os.listdir(tmp / "run" / "train") and os.listdir(tmp / "run" / "eval")  # TensorBoard
    assert [line.split(" |")[0] for line in lines if line.startswith("epoch")] == ["epoch 1/2", "epoch 2/2"]
    assert "eval_mismatched accuracy" in lines[-1]


@pytest.mark.slow
@pytest.mark.xdist_group("mnli_run")  # one worker builds the shared run once
def test_finished_run_is_refused_and_partial_run_resumes(mnli_run):
    tmp, config, summary, _ = mnli_run
    with pytest.raises(ConfigError, match="holds a finished fine-tuning run"):
        _run(config, tmp / "run")
    partial = tmp / "partial"
    shutil.copytree(tmp / "run", partial)
    os.remove(partial / "summary.json")
    with pytest.raises(ConfigError, match=r"another config \(schedule.peak_learning_rate: 0.01 -> 0.02\)"):
        _run(config, partial, "schedule.peak_learning_rate=0.02")
    resumed, lines = _run(config, partial)
    assert any(line.startswith("Resumed from") and "after epoch 2" in line for line in lines)
    assert resumed["eval"] == summary["eval"] and resumed["best_epoch"] == summary["best_epoch"]


@pytest.mark.slow
def test_regression_with_lamb_in_bfloat16(tmp_path):
    rng = np.random.default_rng(1)
    rows = [[words(rng, k % 4), words(rng, 5), float(k % 4)] for k in range(16)]
    for name in ("train", "dev"):
        write_tsv(
            tmp_path / "STS-B" / f"{name}.tsv",
            ["index", "sentence1", "sentence2", "score"],
            [[i] + r for i, r in enumerate(rows)],
        )
    config = write_config(
        tmp_path / "stsb.yaml",
        task={"name": "stsb", "data_dir": str(tmp_path)},
        data={"vocab_file": vocab_file(tmp_path)},
        optimizer={"type": "lamb"},
        train={"epochs": 1, "mixed_precision": "mixed_bfloat16"},
    )
    summary, _ = _run(config, tmp_path / "run")
    assert set(summary["eval"]) == {"pearson", "spearman"} and summary["labels"] == []
    assert np.isfinite(summary["eval"]["pearson"])


def _pretrainer(vocab_size=200, **changes):
    return BertPretrainer(TINY.replace(vocab_size=vocab_size, **changes))


def _encoder_weights(model):
    return {v.path: v.numpy() for v in model.encoder.weights}


@pytest.mark.parametrize("kind", ["kbert", "google", "mslt"])
def test_encoder_loads_from_each_kind_of_checkpoint(tmp_path, kind):
    pretrainer = _pretrainer()
    if kind == "kbert":
        init = kbert_model_dir(tmp_path / "pretrain", pretrainer)
    elif kind == "google":
        init = export_google_checkpoint(pretrainer, str(tmp_path / "google" / "bert_model.ckpt"))
    else:
        export_google_checkpoint(_pretrainer(), str(tmp_path / "mslt" / "stage_1" / "export" / "bert_model.ckpt"))
        export_google_checkpoint(pretrainer, str(tmp_path / "mslt" / "stage_2" / "export" / "bert_model.ckpt"))
        init = str(tmp_path / "mslt")  # the run's last stage
    write_tsv(tmp_path / "t.tsv", ["text", "y"], [["w1", 0], ["w2", 1]] * 4)
    # model.bert empty: the config comes with the checkpoint (bert_config.json, or the run's summary.json).
    config = write_config(
        tmp_path / "c.yaml",
        task={
            "name": "tsv",
            "train_file": str(tmp_path / "t.tsv"),
            "eval_file": str(tmp_path / "t.tsv"),
            "text_a_column": "text",
            "label_column": "y",
        },
        model={"bert": "", "overrides": {}},
        data={"vocab_file": vocab_file(tmp_path)},
        train={"init_checkpoint": init},
    )
    prepared = prepare(load_finetune_config([config]))
    assert prepared.bert == TINY
    classifier = BertClassifier(BertEncoder(prepared.bert), num_outputs=2)
    assert load_encoder(classifier.encoder, prepared.init_checkpoint) == ("kbert" if kind == "kbert" else "google")
    expected = _encoder_weights(pretrainer)
    assert all(np.array_equal(value, expected[path]) for path, value in _encoder_weights(classifier).items())
    if kind == "mslt":
        assert resolve_checkpoint(init).endswith(os.path.join("stage_2", "export", "bert_model.ckpt"))


@pytest.mark.parametrize(
    "pretrainer_changes, error, needles",
    [
        ({"vocab_size": 150}, VocabularyError, ["has 200 tokens", "pretrained with 150", "vocabulary file"]),
        (
            {"num_hidden_layers": 3},
            CheckpointMismatchError,
            ["3-layer BERT of hidden size 32", "2 layers", "model.bert"],
        ),
    ],
)
def test_checkpoint_that_does_not_fit_is_refused_before_training(tmp_path, pretrainer_changes, error, needles):
    init = export_google_checkpoint(_pretrainer(**pretrainer_changes), str(tmp_path / "g" / "bert_model.ckpt"))
    write_tsv(tmp_path / "t.tsv", ["text", "y"], [["w1", 0], ["w2", 1]] * 4)
    config = write_config(
        tmp_path / "c.yaml",
        task={
            "name": "tsv",
            "train_file": str(tmp_path / "t.tsv"),
            "eval_file": str(tmp_path / "t.tsv"),
            "text_a_column": "text",
            "label_column": "y",
        },
        data={"vocab_file": vocab_file(tmp_path)},
        train={"init_checkpoint": init},
    )
    with pytest.raises(error) as raised:
        prepare(load_finetune_config([config]))
    for needle in needles + [init]:
        assert needle in str(raised.value)


def test_best_weights_keep_the_earliest_best_epoch(tmp_path):
    model = BertClassifier(BertEncoder(TINY), num_outputs=2)
    best = BestWeights(model, str(tmp_path / "best"))
    kernel = model.classifier.kernel
    for epoch, score in enumerate([0.5, 0.9, 0.9, 0.7], start=1):
        kernel.assign(np.full(kernel.shape, float(epoch), np.float32))
        best.offer(epoch, score, {"eval": {"accuracy": score}})
    best.restore()
    assert np.all(kernel.numpy() == 2.0)
    assert BestWeights(model, str(tmp_path / "best")).record == {"epoch": 2, "score": 0.9, "eval": {"accuracy": 0.9}}


def test_non_finite_loss_stops_before_the_epoch_is_saved():
    saved = []
    evaluator = EpochEvaluator(
        data=None, evals={}, best=None, save_checkpoint=saved.append, epochs=3, examples_per_epoch=8, writers=None
    )
    with pytest.raises(NonFiniteLossError, match="Epoch 2: the training loss is nan"):
        evaluator.on_epoch_end(1, {"loss": float("nan")})
    assert saved == []


def test_steps_per_execution_is_refused_under_mirrored(tmp_path):
    config = load_finetune_config([], "task.name=sst2,data.vocab_file=v.txt,train.steps_per_execution=4")
    with pytest.raises(ConfigError, match="keras#19246"):
        run_finetuning(config, str(tmp_path), tf.distribute.MirroredStrategy(["/cpu:0"]))


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory):
    """kbert-finetune on bad input, then under MirroredStrategy on two logical CPU devices, both in one process (one
    TensorFlow start-up). Name -> (its folder: inputs and run/, CompletedProcess)."""
    bad = tmp_path_factory.mktemp("bad_input")
    write_tsv(bad / "t.tsv", ["sentence", "label"], [["w1", 0], ["w2", 1]])
    override = (
        f"task.name=tsv,task.train_file={bad}/t.tsv,task.eval_file={bad}/t.tsv,"
        f"task.text_a_column=text,task.label_column=label,data.vocab_file={vocab_file(bad)},"
        "model.bert=bert_tiny"
    )
    mirrored = tmp_path_factory.mktemp("mirrored")
    write_mnli(mirrored / "glue", n_train=16, n_dev=4)
    for split in ("test_matched", "test_mismatched"):  # fewer batch shapes to trace under the strategy
        os.remove(mirrored / "glue" / "MNLI" / f"{split}.tsv")
    config = write_config(
        mirrored / "c.yaml",
        task={"name": "mnli", "data_dir": str(mirrored / "glue")},
        data={"vocab_file": vocab_file(mirrored)},
        train={"epochs": 1, "global_batch_size": 4, "eval_batch_size": 4},
    )
    # Two logical CPU devices must exist before TensorFlow starts: run_batch sets them up, then runs the commands.
    # GPUs are hidden, or a one-GPU host would mirror over its GPU alone.
    bad_input, two_devices = run_batch(
        "finetune",
        [
            [f"--model_dir={bad}/run", f"--params_override={override}"],
            [
                f"--config_file={config}",
                f"--model_dir={mirrored}/run",
                "--strategy=mirrored",
                "--device=cpu",
                "--all_reduce=ring",
            ],
        ],
        cpus=2,
        setup="tf.config.set_visible_devices([], 'GPU')",
        timeout=900,
    )
    return {"bad_input": (bad, bad_input), "mirrored": (mirrored, two_devices)}


@pytest.mark.spawns
@pytest.mark.xdist_group("finetune_cli")  # one worker runs the shared batch once
def test_cli_reports_bad_input_as_one_line(cli_runs):
    tmp_path, result = cli_runs["bad_input"]
    assert result.returncode == 1
    error_lines = [line for line in result.stderr.splitlines() if "kbert-finetune" in line]
    assert error_lines == [
        f"kbert-finetune: error: {tmp_path}/t.tsv has no column 'text'; its columns are "
        "'sentence', 'label'. Set task.text_a_column / task.text_b_column / task.label_column "
        "to one of them."
    ]
    assert not os.path.exists(tmp_path / "run" / "checkpoints")


@pytest.mark.spawns
@pytest.mark.xdist_group("finetune_cli")
def test_cli_fine_tunes_under_mirrored_strategy_on_two_devices(cli_runs):
    tmp_path, result = cli_runs["mirrored"]
    assert result.returncode == 0, result.stderr[-2000:]
    # kbert-pretrain's flag block and device report: --device and --all_reduce are kbert-finetune's too
    assert "kbert-finetune: devices: CPU x2 | MirroredStrategy, 2 replicas" in result.stdout
    summary = json.load(open(tmp_path / "run" / "summary.json"))
    assert (summary["strategy"], summary["replicas"]) == ("MirroredStrategy", 2)
    assert set(summary["eval"]) == {"accuracy"} and set(summary["eval_mismatched"]) == {"accuracy"}
    assert "epoch 1/1 | loss" in result.stdout
