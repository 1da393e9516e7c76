"""Dropout masks differ between replicas and stay reproducible; on one device they are Keras's own."""

import sys

import forkserver
import keras
import numpy as np
import pytest
import tensorflow as tf
from training_fixtures import cli_env

from kbert.modeling.dropout import ReplicaDropout

# Two logical CPUs must be set before TensorFlow starts: a process of its own. Saves both replicas' masks of four
# calls in a row, twice.
TWO_REPLICAS = """
import numpy as np
import tensorflow as tf
tf.config.set_logical_device_configuration(tf.config.list_physical_devices("CPU")[0],
                                           [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
from kbert.modeling.dropout import ReplicaDropout

def masks():
    keras.utils.set_random_seed(3)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        dropout = ReplicaDropout(0.5)
    calls = tf.function(lambda: tf.stack([dropout(tf.ones([4, 64]), training=True) for _ in range(4)]))
    return [v.numpy() != 0 for v in strategy.experimental_local_results(strategy.run(calls))]

first, again = masks(), masks()
np.save(__import__("sys").argv[1], np.stack(first + again))
"""


@pytest.mark.spawns
def test_two_replicas_draw_different_masks_reproducibly(tmp_path):
    path = tmp_path / "masks.npy"
    forkserver.run([sys.executable, "-c", TWO_REPLICAS, str(path)], env=cli_env(), check=True, timeout=300)
    replica_0, replica_1, replica_0_again, replica_1_again = np.load(path)  # each [4 calls, 4, 64]
    assert not np.array_equal(replica_0, replica_1)  # Keras's Dropout gives both the same mask
    assert 0.3 < replica_1.mean() < 0.7
    masks = list(replica_0) + list(replica_1)
    # Every call's mask on every replica is its own: no replica repeats another's at the next call (a seed word
    # plus the replica index gave replica 1 at call k replica 0's mask at call k + 1).
    assert all(not np.array_equal(a, b) for i, a in enumerate(masks) for b in masks[i + 1 :])
    np.testing.assert_array_equal(replica_0, replica_0_again)
    np.testing.assert_array_equal(replica_1, replica_1_again)


def test_on_one_device_the_masks_are_keras_own():
    x = tf.ones([4, 64])
    keras.utils.set_random_seed(5)
    ours = ReplicaDropout(0.3, seed=11)
    keras.utils.set_random_seed(5)
    theirs = keras.layers.Dropout(0.3, seed=11)
    for _ in range(2):  # the generator's state advances the same way
        np.testing.assert_array_equal(ours(x, training=True).numpy(), theirs(x, training=True).numpy())
    np.testing.assert_array_equal(ours(x, training=False).numpy(), x.numpy())
