"""Continuing a Hugging Face BERT with kbert-pretrain: the model and the vocabulary come from the checkpoint,
`--mode=eval` scores the imported model exactly (a float64 NumPy BERT on the same records), training on
domain-style MLM-only records lowers the held-out loss, an MSLT plan deepens the checkpoint training only the new
blocks, and `kbert-export --format=hf` gives back the checkpoint's layout (the command line's own test shares a
process with the casing tests': tests/test_checkpoint_casing.py)."""

import json
import os

import numpy as np
import numpy_bert
import pytest
import tensorflow as tf
import yaml
from imported_fixtures import HF_CONFIG, google_weights_of_hf, hf_tensors, write_hf
from safetensors.numpy import load_file
from training_fixtures import checkpoint_weights

from kbert import experiment
from kbert.data.tfrecord_writer import example_proto
from kbert.errors import ConfigError, PlanError, VocabularyError
from kbert.experiment import load_experiment
from kbert.finetuning.exporting import checkpoint_pretrainer, export_hf
from kbert.modeling.imported_checkpoint import imported_checkpoint
from kbert.runtime.strategy import make_strategy

SEQ, PREDS, MASK = 16, 4, 4


def _domain_rows(rng, count):
    """MLM-only rows of 'domain text': the domain's 8 words (ids 5-12 of the 64) in their one order from a random
    start, so a masked word follows from its neighbours; [CLS] first, [SEP] last, PREDS positions masked."""
    rows = []
    for _ in range(count):
        start = int(rng.integers(0, 8))
        ids = np.array([2] + [5 + (start + k) % 8 for k in range(SEQ - 2)] + [3], np.int64)
        positions = np.sort(rng.choice(np.arange(1, SEQ - 1), PREDS, replace=False)).astype(np.int64)
        labels = ids[positions].copy()
        ids[positions] = MASK
        rows.append(
            {
                "input_ids": ids,
                "input_mask": np.ones(SEQ, np.int64),
                "segment_ids": np.zeros(SEQ, np.int64),
                "masked_lm_positions": positions,
                "masked_lm_ids": labels,
                "masked_lm_weights": np.ones(PREDS, np.float32),
            }
        )
    return rows


def _write(path, rows):
    with tf.io.TFRecordWriter(path) as writer:
        for row in rows:
            writer.write(example_proto(row))
    return path


@pytest.fixture(scope="module")
def domain(tmp_path_factory):
    root = tmp_path_factory.mktemp("domain")
    rng = np.random.default_rng(0)
    eval_rows = _domain_rows(rng, 16)
    return (
        _write(str(root / "train.tfrecord"), _domain_rows(rng, 64)),
        _write(str(root / "eval.tfrecord"), eval_rows),
        eval_rows,
    )


def _config(path, init, train_files, eval_files, **sections):
    """An experiment with no model section: everything about the model comes from `init`."""
    config = {
        "data": {"train_files": train_files, "eval_files": eval_files, "seq_length": SEQ, "max_predictions": PREDS},
        "optimizer": {"type": "adamw", "weight_decay": 0.01},
        "schedule": {"peak_learning_rate": 3e-3, "warmup_steps": 2, "power": 1.0},
        "train": {
            "init_checkpoint": init,
            "global_batch_size": 8,
            "total_steps": 24,
            "steps_per_loop": 4,
            "checkpoint_interval": 8,
            "summary_interval": 4,
            "max_checkpoints": 3,
            "deterministic": True,
        },
        "eval": {"global_batch_size": 8},
    }
    for section, values in sections.items():
        config.setdefault(section, {}).update(values)
    with open(path, "w") as f:
        yaml.safe_dump(config, f)
    return [str(path)]


def _batch(rows):
    return {
        k: np.stack([r[k] for r in rows]).astype(np.float32 if k == "masked_lm_weights" else np.int32) for k in rows[0]
    }


def _reference_loss(tensors, config, rows):
    """The weighted masked-LM cross-entropy of the NumPy BERT over `rows`, as kbert's loss defines it."""
    batch = _batch(rows)
    return _loss(numpy_bert.mlm_logits(google_weights_of_hf(tensors), config, batch), batch)


def _loss(logits, batch):
    """kbert's masked-LM loss of `logits`: the weighted cross-entropy `sum(w * ce) / (sum(w) + 1e-5)`."""
    logits = np.asarray(logits, np.float64)
    logits = logits - logits.max(-1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    ce = -np.take_along_axis(log_probs, batch["masked_lm_ids"][..., None].astype(np.int64), -1)[..., 0]
    weights = batch["masked_lm_weights"]
    return float((weights * ce).sum() / (weights.sum() + 1e-5))


@pytest.mark.slow
def test_continuing_a_bert_model_lowers_held_out_loss(tmp_path, domain):
    train_files, eval_files, _ = domain
    values = dict(HF_CONFIG, hidden_act="gelu_new", layer_norm_eps=1e-7)
    tensors = hf_tensors(values, architecture="BertModel")  # no masked-LM head: pretraining starts it fresh
    hf = write_hf(tmp_path / "hf", values, tensors=tensors)
    # One checkpoint, at the end (the export reads it); the held-out loss is what the run is for.
    files = _config(
        tmp_path / "c.yaml",
        hf,
        train_files,
        eval_files,
        eval={"interval_samples": 32},
        train={"checkpoint_interval": 24},
    )
    config = load_experiment(files)
    assert config.model.bert == hf and config.data.vocab_file == os.path.join(hf, "vocab.txt")
    assert config.model.bert_config() == imported_checkpoint(hf).config

    lines = []
    before = experiment.run(
        config, str(tmp_path / "run"), make_strategy("one_device"), "eval", print_fn=lambda *a, **k: lines.append(a[0])
    )
    assert lines[0] == f"{hf} (Hugging Face BertModel) has no masked-LM head and next-sentence head: they start fresh."
    trained = experiment.run(
        config, str(tmp_path / "run"), make_strategy("one_device"), "train_and_eval", print_fn=lambda *a, **k: None
    )
    losses = [e["masked_lm_loss"] for e in trained["evaluations"]]
    print("held-out masked-LM loss: before", before["eval"]["masked_lm_loss"], "during", losses)
    assert len(losses) == 6 and losses[-1] < losses[0]
    assert trained["eval"]["masked_lm_loss"] < 0.8 * before["eval"]["masked_lm_loss"]
    assert trained["train_data"]["objective"] == "masked LM only"
    # The continued run exports back to the checkpoint's layout (its model section comes from summary.json).
    model, has_mlm = checkpoint_pretrainer(str(tmp_path / "run"), "", config.data.vocab_file)
    export_hf(model, config.data.vocab_file, str(tmp_path / "back"), "BertModel")
    back = load_file(str(tmp_path / "back" / "model.safetensors"))
    assert has_mlm and sorted(back) == sorted(tensors)
    assert json.load(open(tmp_path / "back" / "config.json"))["hidden_act"] == "gelu_new"
    name = "encoder.layer.1.output.dense.weight"
    assert not np.array_equal(back[name], tensors[name])  # trained


def test_an_imported_model_with_its_head_is_scored_as_it_is(tmp_path, domain):
    train_files, eval_files, eval_rows = domain
    tensors = hf_tensors(HF_CONFIG, architecture="BertForMaskedLM")
    hf = write_hf(tmp_path / "hf", tensors=tensors)
    config = load_experiment(_config(tmp_path / "c.yaml", hf, train_files, eval_files))
    summary = experiment.run(
        config, str(tmp_path / "run"), make_strategy("one_device"), "eval", print_fn=lambda *a, **k: None
    )
    reference = _reference_loss(tensors, config.model.bert_config(), eval_rows)
    assert summary["eval"]["masked_lm_loss"] == pytest.approx(reference, rel=1e-5, abs=1e-5)


def test_a_keras_hub_preset_is_scored_as_keras_hub_scores_it(tmp_path, domain):
    pytest.importorskip("keras_hub")
    from imported_fixtures import write_keras_hub_preset

    train_files, eval_files, eval_rows = domain
    task = write_keras_hub_preset(tmp_path / "preset", masked_lm=True)
    config = load_experiment(_config(tmp_path / "c.yaml", str(tmp_path / "preset"), train_files, eval_files))
    assert config.data.vocab_file.endswith(os.path.join("assets", "tokenizer", "vocabulary.txt"))
    summary = experiment.run(
        config, str(tmp_path / "run"), make_strategy("one_device"), "eval", print_fn=lambda *a, **k: None
    )
    batch = _batch(eval_rows)
    logits = task(
        {
            "token_ids": batch["input_ids"],
            "segment_ids": batch["segment_ids"],
            "padding_mask": batch["input_mask"],
            "mask_positions": batch["masked_lm_positions"],
        }
    )
    assert summary["eval"]["masked_lm_loss"] == pytest.approx(_loss(logits, batch), rel=1e-5, abs=1e-5)


def test_model_fields_and_records_that_do_not_fit_are_one_line(tmp_path, domain):
    train_files, eval_files, _ = domain
    hf = write_hf(tmp_path / "hf", {"layer_norm_eps": 1e-7})
    files = _config(tmp_path / "c.yaml", hf, train_files, eval_files)
    for override, named in (
        ("model.overrides.layer_norm_eps=1e-12", "layer_norm_eps=1e-12 (checkpoint: 1e-07)"),
        ("model.bert=bert_tiny", "hidden_size=128 (checkpoint: 32)"),
        ("model.overrides.hidden_act=gelu_new", "hidden_act='gelu_new' (checkpoint: 'gelu')"),
    ):
        with pytest.raises(ConfigError) as raised:
            load_experiment(files, override)
        assert named in str(raised.value) and "\n" not in str(raised.value), override
    dropout_off = load_experiment(files, "model.overrides.hidden_dropout_prob=0.0")
    assert dropout_off.model.bert_config().hidden_dropout_prob == 0  # what the weights do not fix is the user's
    other = tmp_path / "other_vocab.txt"
    other.write_text("\n".join(f"t{i}" for i in range(64)) + "\n")
    with pytest.raises(VocabularyError, match="is not the vocabulary of the checkpoint"):
        load_experiment(files, f"data.vocab_file={other}")
    # Records of a larger vocabulary (ids past the checkpoint's 64) are refused before training.
    wide = _domain_rows(np.random.default_rng(1), 8)
    wide[3]["input_ids"][5] = 90
    config = load_experiment(files, f"data.train_files={_write(str(tmp_path / 'wide.tfrecord'), wide)}")
    with pytest.raises(Exception, match=r"outside \[0, 64\) of vocab_size=64"):
        experiment.run(config, str(tmp_path / "run"), make_strategy("one_device"), print_fn=lambda *a, **k: None)


def test_records_of_a_tokenizer_json_take_no_vocabulary_from_the_checkpoint(tmp_path, domain):
    train_files, eval_files, _ = domain
    files = _config(tmp_path / "c.yaml", write_hf(tmp_path / "hf"), train_files, eval_files)
    assert load_experiment(files).data.vocab_file == str(tmp_path / "hf" / "vocab.txt")
    assert load_experiment(files, "data.tokenizer=tok/tokenizer.json").data.vocab_file == ""


@pytest.mark.slow
def test_mslt_deepens_an_hf_model_training_only_the_new_blocks(tmp_path, domain):
    train_files, eval_files, _ = domain
    tensors = hf_tensors(HF_CONFIG)
    hf = write_hf(tmp_path / "hf", tensors=tensors)
    mslt = {"stages": [{"num_layers": 4, "steps": 4}], "final_stage": {"steps": 0}}
    files = _config(tmp_path / "c.yaml", hf, train_files, eval_files)
    with pytest.raises(PlanError, match="set model.overrides.num_hidden_layers") as raised:
        load_experiment(files, "mslt.stages=[{num_layers: 2, steps: 4}]")
    assert "\n" not in str(raised.value)
    with pytest.raises(PlanError, match=r"num_layers=2: must be greater than train.init_checkpoint's 2"):
        load_experiment(
            files,
            "model.overrides.num_hidden_layers=4,mslt.stages=[{num_layers: 2, steps: 4}, {num_layers: 4, steps: 4}]",
        )
    with pytest.raises(PlanError, match="mslt.init_layers=3, but"):
        load_experiment(
            files, "model.overrides.num_hidden_layers=4,mslt.init_layers=3,mslt.stages=[{num_layers: 4, steps: 4}]"
        )
    with open(files[0]) as f:
        values = yaml.safe_load(f)
    values.update(mslt=mslt, model={"overrides": {"num_hidden_layers": 4}})
    values["train"].update(total_steps=4, checkpoint_interval=4)
    with open(files[0], "w") as f:
        yaml.safe_dump(values, f)
    lines = []
    experiment.run(
        load_experiment(files),
        str(tmp_path / "run"),
        make_strategy("one_device"),
        "train",
        print_fn=lambda *a, **k: lines.append(a[0]),
    )
    assert any("  1       4  2-3 " in line for line in lines), lines  # the plan's table: stage 1 trains blocks 2-3
    assert any(line.startswith("Initialised the model from Hugging Face checkpoint") for line in lines)
    grown = checkpoint_weights(tmp_path / "run", 4)
    query = "model/bert.Slayer_{}.Sattention.Squery.Skernel/.ATTRIBUTES/VARIABLE_VALUE"
    for layer in (0, 1):  # the checkpoint's blocks, frozen, as the checkpoint holds them
        np.testing.assert_array_equal(
            grown[query.format(layer)], tensors[f"bert.encoder.layer.{layer}.attention.self.query.weight"].T
        )
    assert not np.array_equal(grown[query.format(2)], tensors["bert.encoder.layer.0.attention.self.query.weight"].T)
