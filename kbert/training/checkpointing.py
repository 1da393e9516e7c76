"""Training checkpoints (model, optimizer, step, input position), chief-only writing, and `init_checkpoint`.

Keras 3 models keep sub-layers in tracked lists that `tf.train.Checkpoint(model=model)` does not follow (a
`BertPretrainer`'s transformer blocks and dropout seed states would be silently left out), so the checkpoint
holds every weight keyed by its `variable.path` instead: complete, and readable by a model of another depth.
Dropout seed states are numbered per process (`seed_generator_26/...`), so they are saved by position.

Example:

```python
checkpoints = TrainingCheckpoints(model, optimizer, global_step, trainer.input.checkpointable, "/tmp/run",
                                  strategy, max_to_keep=5, interval=1000)
checkpoints.restore_latest()          # the newest of /tmp/run/checkpoints, or None
checkpoints.save(step)                # every `interval` steps; save(step, final=True) always
```
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Iterable, Optional

import keras
import tensorflow as tf

from kbert.errors import CheckpointMismatchError, MissingFileError
from kbert.modeling.google_checkpoint import load_google_checkpoint

MODEL_KEY = "model"


def variables_by_path(variables: Iterable[keras.Variable]) -> dict[str, tf.Variable]:
    """`{variable.path: tf.Variable}`; raises if two variables share a path (the checkpoint would be ambiguous)."""
    table = {}
    for variable in variables:
        path = variable.path
        if path in table:
            raise ValueError(f"Two variables share the path {path!r}; give their layers distinct names.")
        table[path] = variable.value if isinstance(variable, keras.Variable) else variable
    return table


def _training_checkpoint(
    model: keras.Model,
    optimizer: Optional[keras.optimizers.Optimizer],
    global_step: tf.Variable,
    iterator: Optional[Iterable] = None,
) -> tf.train.Checkpoint:
    """A checkpoint of all model and optimizer variables, the step and (optionally) the input iterator."""
    weights = {id(v) for v in model.weights}
    seed_states = [v.value for v in model.variables if id(v) not in weights]
    items = {MODEL_KEY: variables_by_path(model.weights), "seed_states": seed_states, "global_step": global_step}
    if optimizer is not None:
        items["optimizer"] = variables_by_path(optimizer.variables)
    if iterator is not None:
        items["train_iterator"] = iterator
    return tf.train.Checkpoint(**items)


def _checkpoint_manager(
    checkpoint: tf.train.Checkpoint,
    model_dir: str,
    strategy: tf.distribute.Strategy,
    max_to_keep: int,
    interval: int,
    step: tf.Variable,
) -> tf.train.CheckpointManager:
    """Writes to `model_dir/checkpoints` on the chief; other workers take part in the save into a temp dir."""
    if strategy.extended.should_checkpoint:
        directory = os.path.join(model_dir, "checkpoints")
    else:
        directory = tempfile.mkdtemp(prefix="kbert_worker_ckpt_")
    return tf.train.CheckpointManager(checkpoint, directory, max_to_keep=max_to_keep, step_counter=step,
                                      checkpoint_interval=interval)


def latest_checkpoint(model_dir: str) -> Optional[str]:
    return tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))


def _restore_latest(checkpoint: tf.train.Checkpoint, model_dir: str) -> Optional[str]:
    """Restores the newest checkpoint of `model_dir` (every worker reads the chief's); returns its path.

    Raises:
      CheckpointMismatchError: the checkpoint lacks some of the variables (another model size or optimizer).
    """
    path = latest_checkpoint(model_dir)
    if path:
        try:
            checkpoint.restore(path).assert_existing_objects_matched()
        except AssertionError as e:
            raise CheckpointMismatchError(
                f"--model_dir={model_dir}: {path} was written by another model or optimizer than this config's "
                f"({str(e).splitlines()[0][:200]}). Resume with the config that wrote it, or use a new "
                "--model_dir (train.init_checkpoint loads weights only).") from None
    return path


class TrainingCheckpoints:
    """A run's training checkpoint and where it goes: the chief writes `model_dir/checkpoints` and keeps the
    newest `max_to_keep`; other workers take part in every save (it is a collective) into a temp dir that
    `close()` removes."""

    def __init__(self, model: keras.Model, optimizer: keras.optimizers.Optimizer, global_step: tf.Variable,
                 iterator: Optional[Iterable], model_dir: str, strategy: tf.distribute.Strategy, *,
                 max_to_keep: int, interval: int):
        self.model_dir = model_dir
        self.checkpoint = _training_checkpoint(model, optimizer, global_step, iterator)
        self.manager = _checkpoint_manager(self.checkpoint, model_dir, strategy, max_to_keep, interval, global_step)
        self._iterator = iterator
        self._chief = strategy.extended.should_checkpoint

    def restore_latest(self) -> Optional[str]:
        """Restores the newest checkpoint of `model_dir`, if any; returns its path (see `_restore_latest`)."""
        return _restore_latest(self.checkpoint, self.model_dir)

    def restore_input(self, path: str) -> None:
        """Continues the input where training checkpoint `path` left it (an MSLT stage after the previous one)."""
        if self._iterator is not None:
            tf.train.Checkpoint(train_iterator=self._iterator).restore(path).expect_partial()

    def save(self, step: int, final: bool = False) -> None:
        """Saves checkpoint `step` when `interval` steps have passed since the last one, or always if `final`
        (unless it exists)."""
        if final and (self.manager.latest_checkpoint or "").endswith(f"-{step}"):
            return
        self.manager.save(checkpoint_number=step, check_interval=not final)

    def close(self) -> None:
        if not self._chief:
            shutil.rmtree(self.manager.directory, ignore_errors=True)


def _is_google_checkpoint(path: str) -> bool:
    names = {name for name, _ in tf.train.list_variables(path)}
    return any(name.startswith("bert/embeddings/") for name in names)


def load_init_checkpoint(model: keras.Model, path: str) -> str:
    """Loads weights only (no optimizer slots, step or input position) from a kbert or Google TF1 checkpoint.

    `path` is a checkpoint prefix or a directory (a kbert `model_dir`, its `checkpoints/`, or a Google
    download with a `checkpoint` file). Returns 'google' or 'kbert'.

    Raises:
      FileNotFoundError: nothing loadable at `path`.
      ValueError: the checkpoint lacks some of the model's weights (e.g. another model size).
    """
    resolved = path
    if tf.io.gfile.isdir(path):
        resolved = latest_checkpoint(path) or tf.train.latest_checkpoint(path)
    if not resolved:
        raise MissingFileError(f"train.init_checkpoint={path!r}: no checkpoint there (give a prefix such as "
                                ".../bert_model.ckpt or .../ckpt-1000, or a directory with a 'checkpoint' file).")
    try:
        google = _is_google_checkpoint(resolved)
    except (tf.errors.NotFoundError, ValueError) as e:
        raise MissingFileError(f"train.init_checkpoint={path!r}: cannot read {resolved!r}: {e}") from None
    if google:
        load_google_checkpoint(model, resolved)
        return "google"
    weights = tf.train.Checkpoint(**{MODEL_KEY: variables_by_path(model.weights)})
    try:
        weights.restore(resolved).expect_partial().assert_existing_objects_matched()
    except AssertionError as e:
        raise ValueError(f"train.init_checkpoint={path!r} does not hold all of the model's weights (another "
                         f"model size?): {str(e)[:300]}") from None
    return "kbert"
