"""Growing between MSLT stages: carried-over weights, new-layer init, the trainable set and the backward cut."""

import re

import numpy as np
import pytest
import tensorflow as tf

from kbert.modeling import BertConfig, export_google_checkpoint, pretraining_loss_terms, pretraining_metrics
from kbert.mslt import MsltConfig, build_plan
from kbert.mslt.grow import grow, load_stage_export

BERT = BertConfig(
    vocab_size=64,
    hidden_size=32,
    num_hidden_layers=4,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=32,
)


def make_plan(**values):
    values.setdefault("stages", [{"num_layers": 2, "steps": 4}, {"num_layers": 4, "steps": 4}])
    return build_plan(MsltConfig(values), BERT, peak_learning_rate=1e-3)


def make_batch(seed=0, batch=2, seq=16, predictions=3):
    rng = np.random.default_rng(seed)
    return {
        "input_ids": rng.integers(0, BERT.vocab_size, (batch, seq)).astype("int32"),
        "input_mask": np.ones((batch, seq), "int32"),
        "segment_ids": np.zeros((batch, seq), "int32"),
        "masked_lm_positions": np.tile(np.arange(1, predictions + 1), (batch, 1)).astype("int32"),
        "masked_lm_ids": rng.integers(0, BERT.vocab_size, (batch, predictions)).astype("int32"),
        "masked_lm_weights": np.ones((batch, predictions), "float32"),
        "next_sentence_labels": rng.integers(0, 2, (batch, 1)).astype("int32"),
    }


def block_weights(model, index):
    return [w.numpy() for w in model.encoder.blocks[index].weights]


@pytest.mark.parametrize("init", ["copy", "random"])
def test_growing_keeps_the_lower_layers_outputs_and_copies_the_top(init):
    plan = make_plan(new_layer_init=init)
    small = grow(BERT, plan.stages[0])
    big = grow(BERT, plan.stages[1], previous=small, new_layer_init=init)
    batch = make_batch()
    before = small.encoder(batch, training=False)["encoder_outputs"]
    after = big.encoder(batch, training=False)["encoder_outputs"]
    assert len(before) == 2 and len(after) == 4
    for old, new in zip(before, after):
        np.testing.assert_array_equal(old.numpy(), new.numpy())
    for part in ("embeddings", "pooler"):
        for a, b in zip(getattr(small.encoder, part).weights, getattr(big.encoder, part).weights):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    for a, b in zip(small.mlm_head.weights + small.nsp_head.weights, big.mlm_head.weights + big.nsp_head.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    # 2 -> 4 layers: new blocks 2, 3 start as old blocks 0, 1 (the top two) with `copy`.
    for new, old in ((2, 0), (3, 1)):
        same = [np.array_equal(a, b) for a, b in zip(block_weights(big, new), block_weights(small, old))]
        assert all(same) if init == "copy" else not same[0]  # same[0]: the query kernel (biases start at 0)


def trainable_paths(model):
    return sorted(v.path for v in model.trainable_variables)


def expected_paths(model, blocks, embeddings, heads):
    paths = []
    for v in model.weights:
        match = re.match(r"bert/layer_(\d+)/", v.path)
        if match:
            paths += [v.path] if int(match.group(1)) in blocks else []
        elif v.path.startswith("bert/embeddings/"):
            paths += [v.path] if embeddings == "all" or (embeddings == "word_table" and "word_emb" in v.path) else []
        elif heads:
            paths.append(v.path)
    return sorted(paths)


@pytest.mark.parametrize("embeddings", ["freeze_after_first_stage", "train"])
def test_the_trainable_set_is_exactly_the_stage(embeddings):
    plan = make_plan(embeddings=embeddings)
    model = grow(BERT, plan.stages[0])
    assert trainable_paths(model) == sorted(v.path for v in model.weights)
    for stage in plan.stages[1:]:
        model = grow(BERT, stage, previous=model)
        assert model.encoder.stop_gradient_below == stage.stop_gradient_below
        assert trainable_paths(model) == expected_paths(
            model, stage.trainable_layers, stage.embeddings_policy, stage.train_heads
        )
        assert sum(int(np.prod(v.shape)) for v in model.trainable_variables) == stage.trainable_parameters(BERT)
    assert plan.stages[1].embeddings_policy == ("word_table" if embeddings == "train" else "frozen")


def loss_of(model, batch):
    return pretraining_metrics(pretraining_loss_terms(batch, model(batch, training=True)))["loss"]


@pytest.mark.parametrize("embeddings", ["freeze_after_first_stage", "train"])
def test_no_gradient_is_computed_below_the_cut(embeddings):
    plan = make_plan(embeddings=embeddings)
    model = grow(BERT, plan.stages[1], previous=grow(BERT, plan.stages[0]))
    batch = make_batch()
    trainable = {v.path for v in model.trainable_variables}
    with tf.GradientTape() as tape:
        loss = loss_of(model, batch)
    grads = tape.gradient(loss, model.weights)
    below = [v.path for v, g in zip(model.weights, grads) if g is None]
    computed = [v.path for v, g in zip(model.weights, grads) if g is not None]
    # Everything below the cut at block 2 is None (the word table still gets its tied-output gradient).
    assert all(re.match(r"bert/(layer_[01]|embeddings)/", p) for p in below)
    assert {p for p in computed if not p.startswith("bert/embeddings/word")} == {
        p for p in trainable if not p.startswith("bert/embeddings/word")
    }

    # In the training step's graph, the backward pass has no op in blocks 0-1 nor in the embedding lookup (a
    # trained word table gets its gradient in the tied MLM output), and one gradient per trainable variable.
    @tf.function
    def step(batch):
        with tf.GradientTape() as tape:
            loss = loss_of(model, batch)
        return tape.gradient(loss, model.trainable_variables)

    graph = step.get_concrete_function(batch).graph
    backward = [op.name for op in graph.get_operations() if op.name.startswith("gradient_tape/")]

    def ops_in(pattern):
        return [n for n in backward if re.search(pattern, n)]

    assert ops_in(r"/layer_[23](_\d+)?/") and not ops_in(r"/layer_[01](_\d+)?/")
    assert not ops_in(r"/embeddings(_\d+)?/")
    assert sum(g is not None for g in step(batch)) == len(model.trainable_variables)


@pytest.mark.parametrize("frozen_dropout", [True, False])
def test_frozen_dropout_decides_whether_the_blocks_below_the_cut_drop_out(frozen_dropout):
    plan = make_plan(frozen_dropout=frozen_dropout)
    model = grow(BERT, plan.stages[1], previous=grow(BERT, plan.stages[0]), frozen_dropout=plan.frozen_dropout)
    batch = make_batch()
    clean = [h.numpy() for h in model.encoder(batch, training=False)["encoder_outputs"]]
    noisy = [h.numpy() for h in model.encoder(batch, training=True)["encoder_outputs"]]
    assert [np.array_equal(clean[i], noisy[i]) for i in (0, 1)] == [not frozen_dropout] * 2
    assert not np.allclose(clean[3], noisy[3])  # the trained blocks always drop out
    assert model.get_config()["dropout_below_cut"] is frozen_dropout


def test_a_stage_export_reloads_strictly(tmp_path):
    plan = make_plan()
    model = grow(BERT, plan.stages[0])
    path = export_google_checkpoint(model, str(tmp_path / "bert_model.ckpt"))
    loaded = load_stage_export(BERT, 2, path)
    for a, b in zip(model.weights, loaded.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    with pytest.raises(ValueError, match="missing from the checkpoint"):
        load_stage_export(BERT, 4, path)
