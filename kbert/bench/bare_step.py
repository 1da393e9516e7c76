"""A bare pretraining step: forward, loss, backward and optimizer update of one model on one batch, in one
tf.function on this process's device; no strategy, gradient accumulation, loss scaling or metrics. For timing a
model's own compute (the benchmarks); training runs use `kbert.training.trainer`.

Invariant: the loss minimised is the task's metrics' `loss` of the batch, the one-device form of the loss the
trainer minimises, and every trainable variable of the model is updated by every step.

Example:

```python
task = BertPretrainingTask(BertConfig.load("bert_tiny"))
step = bare_train_step(task.build_model(), keras.optimizers.Adam(1e-4), task)
float(step(batch))  # the loss before this step's update
```
"""

from __future__ import annotations

from collections.abc import Callable

import keras
import tensorflow as tf

from kbert.training.task import PretrainingTask


def bare_train_step(
    model: keras.Model, optimizer: keras.optimizers.Optimizer, task: PretrainingTask, jit_compile: bool = False
) -> Callable[[dict], tf.Tensor]:
    """The compiled step of `task`'s `model` with `optimizer`, whose slots are built here, outside the traced
    function; `jit_compile` XLA-compiles the whole step."""
    variables = model.trainable_variables
    optimizer.build(variables)

    @tf.function(jit_compile=jit_compile)
    def step(batch: dict) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = task.metrics(task.terms(batch, model(batch, training=True)))["loss"]
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    return step
