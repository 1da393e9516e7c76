"""Dynamic loss scaling whose finiteness check agrees across replicas."""

from __future__ import annotations

import keras

from kbert.optimizers.layerwise import on_tensorflow


@keras.saving.register_keras_serializable(package="kbert")
class LossScaleOptimizer(keras.optimizers.LossScaleOptimizer):
    """`keras.optimizers.LossScaleOptimizer` that skips a step on every replica when any replica overflowed.

    Under TensorFlow, Keras checks the *per-replica* gradients for inf/NaN and keeps replica 0's answer, so an
    overflow on another replica alone is summed into every replica's update. Here the check is all-reduced first.
    On the other backends gradients are global (no replicas) and Keras's check is used as is. Same arguments and
    behaviour otherwise.

    Example:

    ```python
    optimizer = LossScaleOptimizer(kbert.optimizers.LAMB(1e-3))
    # in the replica function:
    grads = tape.gradient(optimizer.scale_loss(loss), variables)
    optimizer.apply_gradients(zip(grads, variables))
    ```
    """

    def check_finite(self, grads):
        # Undocumented Keras method, kept: the only hook between the per-replica finiteness check and the step's cond.
        finite = super().check_finite(grads)
        if not on_tensorflow():
            return finite
        import tensorflow as tf  # the TF backend's replicas only

        replica = tf.distribute.get_replica_context()
        if replica is None:
            return finite
        overflowed = replica.all_reduce(tf.distribute.ReduceOp.SUM, tf.cast(tf.logical_not(finite), tf.float32))
        return tf.equal(overflowed, 0.0)
