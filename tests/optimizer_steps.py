"""A traced optimizer step on the Keras backend under test (KERAS_BACKEND): tf.function or jax.jit."""

import keras

BACKEND = keras.backend.backend()


def traced_step(optimizer, variables):
    """A function grads -> None that applies one optimizer step to `variables`, traced as the backend traces.

    TensorFlow: `apply_gradients` in a `tf.function`. JAX: `stateless_apply` under `jax.jit`, its results assigned
    back, as `model.fit` does.
    """
    if BACKEND == "jax":
        return _jax_step(optimizer, variables)
    import tensorflow as tf

    @tf.function
    def apply(grads):
        optimizer.apply_gradients(zip(grads, variables))

    return apply


def _jax_step(optimizer, variables):
    import jax

    optimizer.build(variables)
    stateless = jax.jit(optimizer.stateless_apply)

    def apply(grads):
        values, state = stateless([v.value for v in optimizer.variables], list(grads), [v.value for v in variables])
        for variable, value in zip(variables, values):
            variable.assign(value)
        for variable, value in zip(optimizer.variables, state):
            variable.assign(value)

    return apply
