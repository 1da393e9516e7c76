"""A pretraining trainer straight from an experiment config, for measuring steps outside a run (benchmarks, the
accelerator check): no model_dir, no checkpoints, no resume.

Invariant: the trainer is the one a fresh kbert-pretrain run of `config` starts training with: the same seed, the
same precision policy, the task's model and input, and the optimizer of `kbert.training.loop`'s builders.

Example:

```python
config = load_experiment(["configs/experiments/bert_tiny_cpu.yaml"], "train.total_steps=20")
trainer = trainer_from_config(config, make_strategy("one_device"), BertPretrainingTask(config.model.bert_config()))
trainer.train(20)["loss"]
```
"""

from __future__ import annotations

import keras
import tensorflow as tf

from kbert.data import first_layout
from kbert.training import loop
from kbert.training.config import PretrainingConfig
from kbert.training.task import PretrainingTask
from kbert.training.trainer import PretrainingTrainer


def trainer_from_config(
    config: PretrainingConfig, strategy: tf.distribute.Strategy, task: PretrainingTask
) -> PretrainingTrainer:
    """Seeds Keras with `train.seed`, sets the global policy to `train.mixed_precision` (both process-wide, as a
    run sets them), then builds the model and optimizer in `strategy`'s scope and the trainer over them."""
    keras.utils.set_random_seed(config.train.seed)
    keras.mixed_precision.set_global_policy(config.train.mixed_precision)
    with strategy.scope():
        model = task.build_model()
        optimizer = loop.build_optimizer(config, model.trainable_variables)
    layout = first_layout(config.data.train_files, "data.train_files")
    return loop.make_trainer(config, strategy, task, model, optimizer, layout)
