"""Dropout whose mask differs on every replica of a `tf.distribute` strategy, and is Keras's elsewhere.

Keras's `Dropout` draws its seed from one `SeedGenerator`, whose state is mirrored, so every replica drops the
same units: with N replicas the dropout noise is one replica's, repeated. `ReplicaDropout` keeps the seed on
replica 0 and folds the replica's index into it elsewhere (`stateless_fold_in`: a hash, so replica r's masks are no
other replica's at any call; adding r to a seed word, as kbert did before, gave replica r at call k replica 0's mask
at call k + r). On one device (replica 0) its masks are exactly Keras's, and a run stays reproducible: the seed
still comes from the generator's checkpointed state. Other backends have no replica
context (`keras.distribution` shards one global batch, whose mask already differs across devices), so there it is
Keras's `Dropout`, and TensorFlow is not imported.

Example:

```python
dropout = ReplicaDropout(0.1)
with strategy.scope(): ...                       # replica r > 0 draws with stateless_fold_in(seed, r)
y = dropout(x, training=True)
```
"""

from __future__ import annotations

import keras


@keras.saving.register_keras_serializable(package="kbert")
class ReplicaDropout(keras.layers.Dropout):
    """`keras.layers.Dropout` with the replica's index folded into its seed (its arguments and config, without
    `noise_shape`, which BERT does not use)."""

    def __init__(self, rate: float, noise_shape=None, seed=None, **kwargs):
        if noise_shape is not None:
            raise ValueError("ReplicaDropout drops elements independently; it takes no noise_shape.")
        super().__init__(rate, seed=seed, **kwargs)

    def call(self, inputs, training=False):
        if not training or self.rate == 0:
            return inputs
        if keras.backend.backend() != "tensorflow":
            return super().call(inputs, training=training)
        import tensorflow as tf  # the replica context is tf.distribute's

        context = tf.distribute.get_replica_context()
        replica = tf.cast(context.replica_id_in_sync_group if context is not None else 0, tf.int32)
        seed = self.seed_generator.next()
        if seed.dtype != tf.int32:  # as Keras's TF backend does: stateless ops take int32 seeds (and run in XLA)
            seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
        seed = tf.where(replica > 0, tf.random.experimental.stateless_fold_in(seed, replica), seed)
        return tf.nn.experimental.stateless_dropout(inputs, rate=self.rate, seed=seed)
