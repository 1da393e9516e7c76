"""A ModernBERT-class model through kbert-pretrain: from a Hugging Face ModernBERT directory, on MLM-only records
longer than its local window; the variables weight decay skips; a kill -9 resumes bit-identically; MSLT grows it
with its old blocks unchanged; records with sentence labels or segments are refused in one line."""

import os

import numpy as np
import pytest
import tensorflow as tf
from model_fixtures import randomize
from training_fixtures import (
    MAX_PREDICTIONS,
    checkpoint_weights,
    kill_once_written,
    pretrain_command,
    run_here,
    write_config,
    write_train_and_eval,
)

from kbert import experiment
from kbert.data.synthetic import random_instance
from kbert.data.tfrecord_writer import example_proto
from kbert.errors import ConfigError, InputDataError
from kbert.experiment import load_experiment
from kbert.modeling import BertConfig, BertPretrainer
from kbert.modeling.modernbert_checkpoint import export_modernbert_checkpoint
from kbert.optimizers import LAMB
from kbert.runtime.strategy import make_strategy

SEQ, VOCAB = 24, 64
SIZES = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "num_attention_heads": 2,
    "intermediate_size": 48,
    "num_hidden_layers": 3,
    "max_position_embeddings": 32,
    "local_attention": 8,  # 4 tokens each side: records of 24 reach past it
}
MODERN = {"bert": "modernbert_tiny", "overrides": SIZES}


def _mlm_records(directory: str, prefix: str, count: int, seed: int, seq: int = SEQ) -> str:
    """MLM-only records of one segment (ModernBERT's), `seq` tokens long."""
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(seed)
    path = os.path.join(directory, f"{prefix}.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for _ in range(count):
            instance = random_instance(rng, seq, MAX_PREDICTIONS, VOCAB)
            del instance["next_sentence_labels"]
            instance["segment_ids"] = np.zeros_like(instance["segment_ids"])
            writer.write(example_proto(instance))
    return path


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("mlm"))
    return _mlm_records(root, "train", 48, 0), _mlm_records(root, "eval", 16, 1)


def _config(path, records, **sections) -> str:
    sections.setdefault("model", MODERN)
    return write_config(str(path), records[0], records[1], data={"seq_length": SEQ}, **sections)


def test_weight_decay_skips_the_norms_of_a_modern_model_alone():
    """It has no biases: the norms' scales are what the default exclusions match; every kernel and the token table
    decay."""
    model = BertPretrainer(BertConfig.load("modernbert_tiny").replace(**SIZES))
    optimizer = LAMB(1e-3, weight_decay=0.01)
    optimizer.build(model.weights)
    excluded = [w.path for w, decays in zip(model.weights, optimizer._decay_flags) if not decays]
    assert excluded == [
        "bert/embeddings/layer_norm/gamma",
        "bert/layer_0/output_layer_norm/gamma",  # block 0 has no attention norm
        *(f"bert/layer_{i}/{norm}/gamma" for i in (1, 2) for norm in ("attention_layer_norm", "output_layer_norm")),
        "bert/final_layer_norm/gamma",
        "predictions/output_bias",
        "predictions/layer_norm/gamma",
    ]


@pytest.mark.slow
def test_a_modernbert_directory_continues_and_evaluates_as_it_trains(tmp_path, records):
    """model.bert and train.init_checkpoint name a ModernBERT directory: the model is its, the weights load, the
    run trains with LAMB on MLM-only records and evaluates its last checkpoint to the numbers it reported."""
    source = BertPretrainer(BertConfig.load("modernbert_tiny").replace(**SIZES))
    randomize(source, scale=0.05)
    export_modernbert_checkpoint(source, str(tmp_path / "modern"))
    model = {"bert": str(tmp_path / "modern"), "overrides": {}}
    config = load_experiment(
        [_config(tmp_path / "c.yaml", records, model=model, train={"init_checkpoint": str(tmp_path / "modern")})]
    )
    summary = experiment.run(
        config, str(tmp_path / "run"), make_strategy("one_device"), "train_and_eval", print_fn=lambda *a, **k: 0
    )
    assert np.isfinite(summary["eval"]["loss"]) and summary["stages"][0]["train_data"]["objective"] == "masked LM only"
    lines = []
    again = experiment.run(
        config, str(tmp_path / "run"), make_strategy("one_device"), "eval", print_fn=lambda *a, **k: lines.append(a[0])
    )
    assert again["eval"] == summary["eval"]
    shown = next(line for line in lines if line.startswith("eval | "))
    assert "mlm_acc" in shown and "nsp" not in shown  # no sentence head, so no next-sentence figures
    weights = checkpoint_weights(tmp_path / "run", summary["stages"][0]["global_step"])
    assert not any("pooler" in name or "seq_relationship" in name for name in weights)


def test_records_with_sentence_labels_are_refused_before_training(tmp_path):
    bert_records = write_train_and_eval(str(tmp_path / "nsp"))
    config = load_experiment([write_config(str(tmp_path / "c.yaml"), *bert_records, model=MODERN)])
    with pytest.raises(InputDataError, match=r"next-sentence labels, but the model has no sentence head") as e:
        experiment.run(config, str(tmp_path / "run"), make_strategy("one_device"), print_fn=lambda *a, **k: 0)
    assert "--objective=mlm" in str(e.value) and not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.spawns
def test_kill_9_mid_run_resumes_bit_identically(tmp_path, records):
    config = _config(
        tmp_path / "c.yaml", records, train={"total_steps": 12, "checkpoint_interval": 4, "steps_per_loop": 1}
    )
    run_here(config, tmp_path / "straight")
    # Killed as ckpt-8 is written, so ckpt-4 is whole and the restart resumes (a kill as the first checkpoint's
    # index appears may come before that save completes, and the restart would start afresh).
    kill_once_written(
        pretrain_command(config, tmp_path / "killed"), tmp_path / "killed" / "checkpoints" / "ckpt-8.index"
    )
    run_here(config, tmp_path / "killed")
    straight, resumed = checkpoint_weights(tmp_path / "straight", 12), checkpoint_weights(tmp_path / "killed", 12)
    assert straight.keys() == resumed.keys() and len(straight) > 20
    for name in straight:
        np.testing.assert_array_equal(straight[name], resumed[name], err_msg=name)


@pytest.mark.slow
def test_mslt_grows_a_modern_model_and_leaves_its_old_blocks_as_they_were(tmp_path, records):
    """One block (global, no attention norm), then three: block 1 and 2 are local, copies of block 0 with their
    attention norm as built; block 0 and the embeddings stay bit-identical through the growth stage."""
    mslt = {
        "stages": [{"num_layers": 1, "steps": 3}, {"num_layers": 3, "steps": 3}],
        "final_stage": {"steps": 0},
        "embeddings": "freeze_after_first_stage",
    }
    config = load_experiment([_config(tmp_path / "c.yaml", records, mslt=mslt, train={"max_checkpoints": 10})])
    summary = experiment.run(
        config, str(tmp_path / "run"), make_strategy("one_device"), "train", print_fn=lambda *a, **k: 0
    )
    assert [s["global_step"] for s in summary["stages"]] == [3, 6]
    one, two = checkpoint_weights(tmp_path / "run", 3), checkpoint_weights(tmp_path / "run", 6)
    frozen = [n for n in one if ".Sembeddings." in n or ".Slayer_0." in n]
    assert len(frozen) == 2 + 7  # the token table and its norm; block 0's q, k, v, attention output, Wi, Wo, MLP norm
    for name in frozen:
        np.testing.assert_array_equal(one[name], two[name], err_msg=name)


@pytest.mark.slow
def test_a_phase_extends_the_context_with_longer_records_and_a_higher_rotary_base(tmp_path, records):
    """ModernBERT's context extension: phase 2 trains on longer records with the global layers' rotary base raised;
    its model carries phase 1's weights (the base has none). A BERT with absolute positions refuses the key when the
    config loads."""
    longer = _mlm_records(str(tmp_path / "long"), "train", 16, 2, seq=32)
    phases = [{"steps": 3}, {"steps": 3, "seq_length": 32, "train_files": longer, "rope_theta": 320000.0}]
    config = load_experiment([_config(tmp_path / "c.yaml", records, phases=phases)])
    stages = experiment.stages_of(config)
    assert [s.task.bert.rope_theta for s in stages] == [160000.0, 320000.0]
    assert stages[1].task.bert.replace(rope_theta=160000.0) == stages[0].task.bert
    summary = experiment.run(
        config, str(tmp_path / "run"), make_strategy("one_device"), "train", print_fn=lambda *a, **k: 0
    )
    assert [s["global_step"] for s in summary["stages"]] == [3, 6]
    bert = write_config(str(tmp_path / "bert.yaml"), *records, phases=[{"steps": 3, "rope_theta": 1e6}])
    with pytest.raises(
        ConfigError, match=r"phases\[0\] \(phase 1\).rope_theta=1000000.0: .* this model's are absolute"
    ):
        load_experiment([bert])


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["lars", "adamw"])
def test_lars_and_adamw_train_it_in_bfloat16_with_gradient_accumulation(tmp_path, records, optimizer):
    config = load_experiment(
        [
            _config(
                tmp_path / "c.yaml",
                records,
                optimizer={"type": optimizer},
                train={"mixed_precision": "mixed_bfloat16", "gradient_accumulation_steps": 2, "total_steps": 4},
            )
        ]
    )
    summary = experiment.run(
        config, str(tmp_path / "run"), make_strategy("one_device"), "train_and_eval", print_fn=lambda *a, **k: 0
    )
    assert summary["stages"][0]["global_step"] == 4 and np.isfinite(summary["eval"]["loss"])


@pytest.mark.slow
def test_mslt_grows_a_modernbert_directory_deeper_training_only_the_new_blocks(tmp_path, records):
    """train.init_checkpoint a 3-layer ModernBERT, the model 6 layers: the one stage trains blocks 3-5 (block 3 a
    global layer again); blocks 0-2 stay as the checkpoint holds them."""
    source = BertPretrainer(BertConfig.load("modernbert_tiny").replace(**SIZES))
    randomize(source, scale=0.05)
    export_modernbert_checkpoint(source, str(tmp_path / "modern"))
    model = {"bert": str(tmp_path / "modern"), "overrides": {"num_hidden_layers": 6}}
    mslt = {"stages": [{"num_layers": 6, "steps": 3}], "final_stage": {"steps": 0}}
    train = {"init_checkpoint": str(tmp_path / "modern"), "max_checkpoints": 10}
    config = load_experiment([_config(tmp_path / "c.yaml", records, model=model, mslt=mslt, train=train)])
    assert [config.model.bert_config().layer_is_global(i) for i in range(6)] == [True, False, False] * 2
    experiment.run(config, str(tmp_path / "run"), make_strategy("one_device"), "train", print_fn=lambda *a, **k: 0)
    grown = checkpoint_weights(tmp_path / "run", 3)
    query = "model/bert.Slayer_{}.Sattention.Squery.Skernel/.ATTRIBUTES/VARIABLE_VALUE"
    for layer in range(3):
        np.testing.assert_array_equal(grown[query.format(layer)], source.encoder.blocks[layer].attention.query.kernel)
    for layer in range(3, 6):  # copies of blocks 0-2, then trained
        assert not np.array_equal(grown[query.format(layer)], source.encoder.blocks[layer - 3].attention.query.kernel)
