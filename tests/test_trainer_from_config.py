"""kbert.bench.trainer_from_config: a trainer built from a config alone is seeded, under the config's precision,
and trains."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from training_fixtures import write_config, write_train_and_eval

from kbert.bench.trainer_from_config import trainer_from_config
from kbert.experiment import load_experiment
from kbert.tasks.bert import BertPretrainingTask


def _trainer(config, strategy):
    return trainer_from_config(config, strategy, BertPretrainingTask(config.model.bert_config()))


@pytest.mark.slow
def test_the_seed_fixes_the_weights_the_policy_is_the_configs_and_it_trains(tmp_path, float32_policy):
    train_files, _ = write_train_and_eval(str(tmp_path))
    path = write_config(str(tmp_path / "c.yaml"), train_files)
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    _trainer(load_experiment([path], "train.mixed_precision=mixed_bfloat16"), strategy)
    assert keras.mixed_precision.global_policy().name == "mixed_bfloat16"
    first, second = (_trainer(load_experiment([path], "train.seed=7"), strategy) for _ in range(2))
    assert keras.mixed_precision.global_policy().name == "float32"
    assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(first.model.weights, second.model.weights))
    assert np.isfinite(first.train(2)["loss"]) and int(first.global_step.numpy()) == 2
