"""tools/model_garden_peer.py starts Model Garden's pretrainer from a Google-format checkpoint, as
`train.init_checkpoint` starts a kbert run (the time-to-accuracy bench's shared start): on the same weights the two
models compute the same masked-LM and next-sentence logits (with the tanh GELU that Model Garden's "gelu" is)."""

import importlib.util
import os
import sys

import numpy as np
import pytest
from model_fixtures import TINY, randomize, unpacked
from training_fixtures import ROOT

from kbert.errors import CheckpointMismatchError
from kbert.modeling import BertPretrainer, export_google_checkpoint

CONFIG = TINY.__class__(**{**TINY.to_dict(), "hidden_act": "gelu_approximate"})


def _pretrainer():
    model = BertPretrainer(CONFIG)
    randomize(model)  # every weight far from its init, biases and LayerNorms included
    return model


@pytest.fixture(scope="module")
def peer():
    spec = importlib.util.spec_from_file_location(
        "model_garden_peer", os.path.join(ROOT, "tools", "model_garden_peer.py")
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_model_garden_started_from_kberts_export_computes_kberts_logits(peer, tmp_path):
    import tensorflow as tf

    model = _pretrainer()
    path = export_google_checkpoint(model, str(tmp_path / "bert_model.ckpt"))
    garden = peer.model_garden_task(CONFIG).build_model()
    peer.load_google_checkpoint_into_model_garden(garden, path)
    batch = {name: tf.constant(value) for name, value in unpacked().items()}
    theirs = peer.KbertOutputs(garden, CONFIG)(batch)
    ours = model(batch, training=False)
    for name in ("mlm_logits", "nsp_logits"):
        np.testing.assert_allclose(theirs[name].numpy(), np.asarray(ours[name]), rtol=1e-5, atol=1e-5, err_msg=name)


def test_a_checkpoint_of_another_size_is_refused_naming_it(peer, tmp_path):
    path = export_google_checkpoint(_pretrainer(), str(tmp_path / "bert_model.ckpt"))
    wider = CONFIG.__class__(**{**CONFIG.to_dict(), "intermediate_size": 128})
    garden = peer.model_garden_task(wider).build_model()
    garden(garden.inputs)  # its heads built, so that their weights are compared too
    before = [w.numpy() for w in garden.weights]
    with pytest.raises(
        CheckpointMismatchError,
        match=r"bert_model.ckpt: does not fit Model Garden's model \(bert/"
        r"encoder/layer_0/intermediate/dense/kernel is \[32, 64\]",
    ):
        peer.load_google_checkpoint_into_model_garden(garden, path)
    assert all(np.array_equal(a, w.numpy()) for a, w in zip(before, garden.weights))  # nothing assigned
