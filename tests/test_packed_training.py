"""Packed records through kbert-pretrain: evaluating one checkpoint over the packed records of some instances gives
the unpacked figures; training on them works under a mirrored strategy with gradient accumulation, bf16 and
resume, with whole-step XLA, and under MSLT; MLM-only records train without a sentence head."""

import glob
import json
import os
import sys

import forkserver
import numpy as np
import pytest
from training_fixtures import ROOT, cli_env, pretrain_command, run_here, write_config, write_shards

from kbert import experiment
from kbert.data import first_layout
from kbert.data.create_pretraining_data import create_pretraining_data
from kbert.data.instances import InstanceConfig
from kbert.data.packing.pack_pretraining_data import pack_pretraining_data
from kbert.experiment import load_experiment
from kbert.modeling import BertPretrainer, export_google_checkpoint
from kbert.runtime.strategy import make_strategy
from kbert.tasks.bert import BertPretrainingTask

pytestmark = pytest.mark.usefixtures("float32_policy")


def _pack(pattern: str, out: str) -> str:
    """kbert-pack-pretraining-data's library call (its command line is tested in test_packing.py)."""
    pack_pretraining_data(glob.glob(pattern), [out], sequences_per_row=3)
    return out


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("records"))
    train, held_out = write_shards(root, "train", 1, 48), write_shards(root, "eval", 1, 32, seed=1)
    return {
        "train": train,
        "eval": held_out,
        "train_packed": _pack(train, os.path.join(root, "train-packed.rec")),
        "eval_packed": _pack(held_out, os.path.join(root, "eval-packed.rec")),
    }


def _summary(model_dir, name: str = "summary.json") -> dict:
    with open(os.path.join(model_dir, name)) as f:
        return json.load(f)


def test_eval_over_packed_records_equals_eval_over_the_same_instances_unpacked(tmp_path, records):
    config = load_experiment([write_config(str(tmp_path / "c.yaml"), records["train"], records["eval"])])
    checkpoint = export_google_checkpoint(
        BertPretrainer(config.model.bert_config()), str(tmp_path / "google" / "bert_model.ckpt")
    )
    evals = {}
    for name in ("eval", "eval_packed"):
        path = write_config(
            str(tmp_path / f"{name}.yaml"), records["train"], records[name], train={"init_checkpoint": checkpoint}
        )
        run_here(path, tmp_path / name, mode="eval")
        evals[name] = _summary(tmp_path / name, "eval_summary.json")["eval"]
    assert evals["eval_packed"]["sequences"] == evals["eval"]["sequences"] == 32
    for key, value in evals["eval"].items():
        np.testing.assert_allclose(evals["eval_packed"][key], value, rtol=1e-5, atol=1e-6, err_msg=key)


# Splits the CPU into 2 logical devices, then runs kbert-pretrain on each argument list of the JSON list on stdin
# in turn, in this one process (one TensorFlow start for all: tests/cli_batch.py); prints, as JSON, each run's
# exit status and output with the summary.json its --model_dir held when it ended.
MIRRORED_BATCH = """
import json, os, sys
import tensorflow as tf
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 2)
from cli_batch import run_once
from kbert.cli.pretrain import run
results = []
for args in json.load(sys.stdin):
    result = run_once(run, "kbert-pretrain", args)
    model_dir = next(a for a in args if a.startswith("--model_dir=")).split("=", 1)[1]
    with open(os.path.join(model_dir, "summary.json")) as f:
        result["summary"] = json.load(f)
    results.append(result)
json.dump(results, sys.stdout)
"""


@pytest.mark.spawns
def test_packed_training_under_mirrored_with_accumulation_bf16_and_resume(tmp_path, records):
    """4 steps on 2 replicas, then the same run resumed to its 6 steps and evaluated: two kbert-pretrain runs in
    one process that split the CPU into 2 devices (which only a process of its own can do)."""
    train = {"gradient_accumulation_steps": 2, "mixed_precision": "mixed_bfloat16"}
    configs = [
        write_config(str(tmp_path / name), records["train_packed"], records["eval_packed"], train=dict(train, **extra))
        for name, extra in (("c4.yaml", {"total_steps": 4}), ("c.yaml", {}))
    ]
    runs = [
        pretrain_command(config, tmp_path / "run", strategy="mirrored", mode=mode)[4:]  # the flags alone
        for config, mode in zip(configs, ("train", "train_and_eval"))
    ]
    batch = forkserver.run(
        [sys.executable, "-c", MIRRORED_BATCH],
        input=json.dumps(runs),
        env=cli_env(PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests")])),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert batch.returncode == 0, batch.stderr[-3000:]
    results = json.loads(batch.stdout)
    for result in results:
        assert result["returncode"] == 0, result["stdout"][-3000:] + result["stderr"][-3000:]
    first, resumed = (result["summary"] for result in results)
    assert first["train_data"]["layout"] == "packed (3 sequences a row)" and first["replicas"] == 2
    assert first["global_step"] == 4
    assert first["sequences_trained"] > 4 * 8  # 8 rows a step hold more than 8 sequences
    assert "Resumed from" in results[1]["stdout"]
    assert resumed["global_step"] == 6 and resumed["sequences_trained"] > first["sequences_trained"]
    assert np.isfinite(resumed["eval"]["loss"]) and resumed["eval"]["sequences"] == 32


def _run(tmp_path, train_files, eval_files, override="", **sections):
    tmp_path.mkdir()
    config = load_experiment([write_config(str(tmp_path / "c.yaml"), train_files, eval_files, **sections)], override)
    return experiment.run(config, str(tmp_path / "run"), make_strategy("one_device"), print_fn=lambda *a, **k: None)


@pytest.mark.slow
def test_packed_training_with_whole_step_xla_and_under_mslt(tmp_path, records):
    summary = _run(tmp_path / "xla", records["train_packed"], records["eval_packed"], "train.jit_compile=step")
    assert summary["global_step"] == 6 and np.isfinite(summary["train"]["loss"])
    mslt = {"stages": [{"num_layers": 1, "steps": 2}, {"num_layers": 2, "steps": 2}], "final_stage": {"steps": 2}}
    summary = _run(tmp_path / "mslt", records["train_packed"], records["eval_packed"], mslt=mslt)
    assert [stage["end_step"] for stage in summary["stages"]] == [2, 4, 6]
    assert summary["train_data"]["layout"] == "packed (3 sequences a row)"


@pytest.mark.slow
def test_mlm_only_records_train_without_the_sentence_head(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(59)]) + "\n")
    corpus = tmp_path / "corpus.txt"
    rng = np.random.default_rng(0)
    corpus.write_text(
        "\n\n".join("\n".join(" ".join(f"w{i}" for i in rng.integers(0, 59, 7)) for _ in range(5)) for _ in range(20))
        + "\n"
    )
    records = str(tmp_path / "mlm.tfrecord")
    # kbert-create-pretraining-data's library call, in this process (its command line is test_create_pretraining_data's)
    config = InstanceConfig(max_seq_length=16, max_predictions_per_seq=4, objective="mlm", dupe_factor=2)
    create_pretraining_data([str(corpus)], [records], str(vocab), True, config)
    config = load_experiment([write_config(str(tmp_path / "c.yaml"), records, records)])
    task = BertPretrainingTask(config.model.bert_config())
    model = task.build_model()
    trained = {id(v) for v in task.trained_variables(model, first_layout(records))}
    head = model.sentence_head_variables()
    assert head and not trained & {id(v) for v in head}  # no gradient reaches them: they are not updated
    assert len(trained) == len(model.trainable_variables) - len(head)
    printed = []
    summary = experiment.run(
        config,
        str(tmp_path / "run"),
        make_strategy("one_device"),
        mode="train_and_eval",
        print_fn=lambda s, **k: printed.append(s),
    )
    progress = [line for line in printed if line.startswith("step ")]
    assert progress and all("mlm_acc" in line and "nsp_acc" not in line for line in progress)  # no head, no NSP
    assert summary["train_data"] == {"layout": "MLM-only", "objective": "masked LM only"}
    assert summary["eval"]["next_sentence_loss"] == 0.0 and summary["eval"]["masked_lm_loss"] > 0
    assert np.isfinite(summary["train"]["loss"])
