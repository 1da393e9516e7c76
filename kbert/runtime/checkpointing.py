"""Training checkpoints (model, optimizer, step, input position), chief-only writing, and `init_checkpoint` (kbert,
Google, Hugging Face or keras-hub).

Keras 3 models keep sub-layers in tracked lists that `tf.train.Checkpoint(model=model)` does not follow (a
`BertPretrainer`'s transformer blocks and dropout seed states would be silently left out), so the checkpoint
holds every weight keyed by its `variable.path` instead: complete, and readable by a model of another depth.
Dropout seed states are numbered per process (`seed_generator_26/...`), so they are saved by position.

Layout of `model_dir/checkpoints`: `ckpt-N` (weights, optimizer, step; written by the chief) and
`input/worker_I/ckpt-N` (worker I's input position at step N, written by that worker): in a multi-worker job each
worker reads its own files, so a resumed job continues every worker's data where it stopped.

Example:

```python
checkpoints = TrainingCheckpoints(model, optimizer, global_step, trainer.input.checkpointable, "/tmp/run",
                                  strategy, max_to_keep=5, interval=1000)
checkpoints.restore_latest()          # the newest of /tmp/run/checkpoints, or None
checkpoints.save(step)                # every `interval` steps; save(step, final=True) always
```
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Sequence

import keras
import tensorflow as tf

from kbert.errors import CorruptCheckpointError, InputDataError, MissingFileError, first_line
from kbert.modeling.checkpoint_fit import describe_model, mismatch
from kbert.modeling.google_checkpoint import load_google_checkpoint
from kbert.modeling.imported_checkpoint import imported_checkpoint
from kbert.optimizers.layerwise import layerwise_optimizer
from kbert.runtime import checkpoint_files
from kbert.runtime.strategy import worker_index_and_count

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


def _model_state(
    model: keras.Model,
    optimizer: keras.optimizers.Optimizer | None,
    global_step: tf.Variable,
    counters: dict[str, tf.Variable] | None = None,
) -> dict:
    """The checkpoint items of everything but the input position: weights, seed states, step, the run's other
    counters (a checkpoint without one leaves it at its start value), optimizer."""
    weights = {id(v) for v in model.weights}
    seed_states = [v.value for v in model.variables if id(v) not in weights]
    items = {
        MODEL_KEY: variables_by_path(model.weights),
        "seed_states": seed_states,
        "global_step": global_step,
        **(counters or {}),
    }
    if optimizer is not None:
        items["optimizer"] = variables_by_path(optimizer.variables)
    return items


def _shapes(items: dict) -> dict[str, tuple]:
    """`{"model/PATH": shape, "optimizer/PATH": shape}` of the variables a checkpoint of `items` holds."""
    return {
        f"{group}/{path}": tuple(v.shape)
        for group in (MODEL_KEY, "optimizer")
        for path, v in items.get(group, {}).items()
    }


# How tf.train.Checkpoint keys a variable's value under its item's name.
_VALUE = "/.ATTRIBUTES/VARIABLE_VALUE"


def _stored_shapes(prefix: str, groups: Sequence[str]) -> dict[str, tuple]:
    """The same names for the variables stored in checkpoint `prefix` (TF escapes '/' in a key as '.S')."""
    shapes = {}
    for key, shape in checkpoint_files.reader(prefix).get_variable_to_shape_map().items():
        group, _, rest = key.partition("/")
        if group in groups and rest.endswith(_VALUE):
            path = rest[: -len(_VALUE)].replace(".S", "/").replace("..", ".")
            shapes[f"{group}/{path}"] = tuple(shape)
    return shapes


def _key(group: str, path: str) -> str:
    """The checkpoint key of `group/path`, as tf.train.Checkpoint escapes it ('.' as '..', then '/' as '.S')."""
    return f"{group}/{path.replace('.', '..').replace('/', '.S')}{_VALUE}"


def _scalar_trust_ratios(optimizer, stored: dict[str, tuple]) -> tuple[str, list[str]] | None:
    """(the trust-ratio vector's name, the scalar names to fill it from) when checkpoint names `stored` keep a
    layer-wise optimizer's trust ratios as one scalar per variable (kbert before 2026-12-04), else None."""
    inner = layerwise_optimizer(optimizer)
    if inner is None or not inner.built:
        return None
    vector, scalars = inner.trust_ratio_paths()
    vector, scalars = f"optimizer/{vector}", [f"optimizer/{path}" for path in scalars]
    if vector in stored or not all(stored.get(name) == () for name in scalars):
        return None
    return vector, scalars


def saved_counter(prefix: str, name: str) -> int:
    """The value of counter `name` (e.g. `sequences_trained`) in training checkpoint `prefix`."""
    return int(checkpoint_files.reader(prefix).get_tensor(name + _VALUE))


def _describe(model: keras.Model) -> str:
    c = getattr(model, "config", None)
    return describe_model(c) if c else "the model"


def latest_checkpoint(model_dir: str) -> str | None:
    return tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))


INPUT_DIR = "input"
# Beside the checkpoints: the input-pipeline options that shape a saved input position, which a resumed run's
# pipeline must share to read it (`saved_input_format`).
INPUT_FORMAT = "input_format.json"


def saved_input_format(model_dir: str) -> dict | None:
    """The input-pipeline options (`record_input_format`) of the input positions saved in `model_dir`, `{}` for
    positions saved before they were recorded, None where none are saved yet."""
    directory = os.path.join(model_dir, "checkpoints")
    path = os.path.join(directory, INPUT_FORMAT)
    if tf.io.gfile.exists(path):
        with tf.io.gfile.GFile(path) as f:
            return json.load(f)
    return {} if tf.io.gfile.exists(os.path.join(directory, INPUT_DIR)) else None


def record_input_format(model_dir: str, options: dict) -> None:
    """Records the input-pipeline `options` that this run's saved input positions will need: written whole under
    another name, then renamed into place, so a crash never leaves half a file."""
    directory = os.path.join(model_dir, "checkpoints")
    tf.io.gfile.makedirs(directory)
    path = os.path.join(directory, INPUT_FORMAT)
    with tf.io.gfile.GFile(path + ".tmp", "w") as f:
        json.dump(options, f)
    tf.io.gfile.rename(path + ".tmp", path, overwrite=True)


def _input_dir(directory: str, worker: int) -> str:
    return os.path.join(directory, INPUT_DIR, f"worker_{worker}")


def _input_prefix(prefix: str, worker: int) -> str:
    """Where worker `worker` saved its input position at checkpoint `prefix` (`.../ckpt-N`)."""
    directory, name = os.path.split(prefix)
    return os.path.join(_input_dir(directory, worker), name)


class _Manager(tf.train.CheckpointManager):
    """A CheckpointManager whose every save (the loop's, or a preemption's) also saves this worker's
    input position, under the same number, into `checkpoints/input/worker_I/` of the shared model_dir: the
    weights are one for all workers, the input position is each worker's own."""

    def __init__(
        self,
        checkpoint: tf.train.Checkpoint,
        directory: str,
        max_to_keep: int,
        inputs: tf.train.CheckpointManager | None,
    ):
        super().__init__(checkpoint, directory, max_to_keep=max_to_keep)
        self._inputs = inputs

    def save(self, checkpoint_number=None, check_interval=True, options=None):
        if not (options and options.experimental_enable_async_checkpoint):
            # A synchronous save (the final one, a preemption's) lands after every asynchronous one, files and
            # index.
            self._checkpoint.sync()
        # The input position first: a `ckpt-N` without one is a save that did not finish.
        if self._inputs is not None:
            self._inputs.save(checkpoint_number=checkpoint_number)
        return super().save(checkpoint_number=checkpoint_number, check_interval=check_interval, options=options)


class TrainingCheckpoints:
    """A run's training checkpoints in `model_dir/checkpoints`.

    Invariants: a resumed run continues from the newest checkpoint that fits the model and reads whole (each
    newer one is skipped with a note saying why); one that does not fit the model or optimizer stops the run
    with the full listing; `max_to_keep` checkpoints are kept besides the newest, so the newest known-good one
    (a step after it had a finite loss) survives the save of one not yet checked. The chief writes; other
    workers take part in every save (a collective) into a local temp folder of their own (`_worker_folder`) that
    `close()` removes, and that a restart after a kill empties. With `async_writes`
    the periodic saves copy the variables and write them on a background thread while training goes on; the
    index names a checkpoint only once its files are written, the final save is synchronous, and `wait()` (also in
    `close()` and before setting checkpoints aside) blocks until every write is on disk.
    """

    def __init__(
        self,
        model: keras.Model,
        optimizer: keras.optimizers.Optimizer,
        global_step: tf.Variable,
        iterator: Iterable | None,
        model_dir: str,
        strategy: tf.distribute.Strategy,
        *,
        max_to_keep: int,
        interval: int,
        async_writes: bool = False,
        counters: dict[str, tf.Variable] | None = None,
    ):
        self.model_dir = model_dir
        self.directory = os.path.join(model_dir, "checkpoints")
        self.notes: list[str] = []  # what restoring skipped or cleaned up, for the run to print
        self._model, self._optimizer = model, optimizer
        self._state = _model_state(model, optimizer, global_step, counters)
        self._iterator = iterator
        self._chief = strategy.extended.should_checkpoint
        self._interval = interval
        self._options = tf.train.CheckpointOptions(experimental_enable_async_checkpoint=True) if async_writes else None
        self._last_step = int(global_step.numpy())
        self._worker, self._workers = worker_index_and_count(strategy)
        self.checkpoint = tf.train.Checkpoint(**self._state)
        inputs = None
        if iterator is not None:
            inputs = tf.train.CheckpointManager(
                tf.train.Checkpoint(train_iterator=iterator),
                _input_dir(self.directory, self._worker),
                max_to_keep=max_to_keep + 1,
            )
        if self._chief:
            if tf.io.gfile.isdir(self.directory):
                self.notes += [
                    f"Removed {p}: the leftover of a save that did not finish."
                    for p in checkpoint_files.remove_unfinished_saves(self.directory)
                ]
            self.manager = _Manager(self.checkpoint, self.directory, max_to_keep + 1, inputs)
        else:  # its copy of each save is thrown away: keep one, on this host's disk (local-only by design)
            self.manager = _Manager(self.checkpoint, _worker_folder(model_dir, self._worker), 1, inputs)

    def restore_latest(self, after_step: int = -1, up_to_step: int | None = None) -> str | None:
        """Restores the newest usable checkpoint of a step in (`after_step`, `up_to_step`] (a stage's own: the
        others are other stages', of other models) (every worker reads the chief's); returns its path, or None
        when there is none.

        A window that starts after step 0 has the checkpoint of its first step to go on from (the last of the
        stage before), so when none of its own can be read it returns None (the notes say why) instead of raising.
        So does a window whose checkpoints are all saves killed midway: a worker's input position is missing, or
        the index file does not name the checkpoint (a save is named once it is written) and its files are not all
        there or its .index file cannot be read.

        Raises:
          CheckpointMismatchError: the newest readable checkpoint was written for another model or optimizer.
          CorruptCheckpointError: there are checkpoints, but none can be read.
          InputDataError: its input position does not fit `data.train_files` as they are now.
        """
        candidates = [
            p
            for p in checkpoint_files.listed(self.directory)
            if after_step < checkpoint_files.step_of(p)
            and (up_to_step is None or checkpoint_files.step_of(p) <= up_to_step)
        ]
        named = checkpoint_files.named(self.directory)
        unfinished = 0  # saves killed midway: a worker's input position is missing, or files of an unnamed one
        for prefix in candidates:
            problem = self._missing_inputs(prefix)
            unfinished += problem is not None
            if problem is None:  # files there and listed before anything is restored
                problem = checkpoint_files.missing_files(prefix) or checkpoint_files.unreadable_index(prefix)
                unfinished += problem is not None and prefix not in named
            problem = problem or self._restore(prefix)
            if problem is None:
                self._last_step = checkpoint_files.step_of(prefix)
                return prefix
            self.notes.append(f"Skipped {prefix}: {problem}.")
        # Unless there is nothing to resume, or an older stage's checkpoint to go on from:
        if unfinished < len(candidates) and after_step <= 0:
            raise CorruptCheckpointError(
                f"{self.directory}: none of its {len(candidates)} checkpoints can be read ({self.notes[-1]}). "
                "Restore the files from a backup, or move the folder away to start the run over; kbert deletes "
                "nothing."
            )
        # The step counter may have started where the newest checkpoint is: training starts at the window's start.
        self._state["global_step"].assign(max(after_step, 0))
        self._last_step = max(after_step, 0)
        return None

    def _restore(self, prefix: str) -> str | None:
        """Restores `prefix`; returns why it cannot be read, or None."""
        expected, stored = _shapes(self._state), _stored_shapes(prefix, (MODEL_KEY, "optimizer"))
        scalar_ratios = _scalar_trust_ratios(self._optimizer, stored)
        if scalar_ratios:  # an older layout of the same state: restored below, entry by entry
            vector, scalars = scalar_ratios
            stored = {name: shape for name, shape in stored.items() if name not in scalars}
            stored[vector] = expected[vector]
        error = mismatch(
            prefix,
            expected,
            stored,
            _describe(self._model),
            "resume with the config that wrote it, "
            "or train into a new --model_dir (train.init_checkpoint loads weights only).",
        )
        if error:
            raise error
        try:
            self.checkpoint.restore(prefix).expect_partial()
            if scalar_ratios:
                read = checkpoint_files.reader(prefix).get_tensor
                self._state["optimizer"][vector.partition("/")[2]].assign(
                    [read(_key(*name.split("/", 1))) for name in scalars]
                )
        except (tf.errors.OpError, IndexError, ValueError) as e:
            return f"it cannot be read ({first_line(e)})"
        self.restore_input(prefix)
        return None

    def _missing_inputs(self, prefix: str) -> str | None:
        """Why checkpoint `prefix` is an unfinished save (a worker's input position is missing), or None. Every
        worker checks every worker's, so all of them skip or take the same checkpoint."""
        if self._iterator is None:
            return None
        for worker in range(self._workers):
            if checkpoint_files.missing_files(_input_prefix(prefix, worker)):
                return f"the save did not finish (the input position of worker {worker} is missing)"
        return None

    def restore_input(self, path: str) -> None:
        """Continues this worker's input where training checkpoint `path` left it (also a stage after the one
        that saved `path`, on the same records).

        Raises:
          InputDataError: the saved position is of another set of training files.
        """
        if self._iterator is None:
            return
        try:
            tf.train.Checkpoint(train_iterator=self._iterator).restore(
                _input_prefix(path, self._worker)
            ).expect_partial()
        except tf.errors.OpError as e:
            raise InputDataError(
                f"{path}: its saved input position does not fit data.train_files as they are now (the set of "
                "files changed?). Give the files it was written with, or set data.checkpoint_input=false to go "
                f"on without it (the data then starts over in a new order). TF said: "
                f"{first_line(e)}"
            ) from None

    def due(self, step: int, final: bool = False) -> bool:
        """Whether `save` would write checkpoint `step`: `interval` steps after the last one (or the run's start),
        or at the `final` step unless it is saved already."""
        return step != self._last_step if final else step - self._last_step >= self._interval

    def save(self, step: int, final: bool = False) -> None:
        """Saves checkpoint `step` when it is `due`; the `final` one is on disk when this returns."""
        if self.due(step, final):
            self.manager.save(checkpoint_number=step, options=None if final else self._options)
            self._last_step = step

    def wait(self) -> None:
        """Blocks until every save has been written (asynchronous ones included)."""
        self.checkpoint.sync()

    def set_aside_from(self, step: int) -> str:
        """Moves the checkpoints of `step` and later (training diverged from them) out of the resume path, into
        a folder beside them; returns the sentence that says so (chief; other workers return '')."""
        if not self._chief:
            return ""
        self.wait()  # a write still in flight would land after the move
        suspect = [p for p in checkpoint_files.listed(self.directory) if checkpoint_files.step_of(p) >= step]
        if not suspect:
            return "No checkpoint holds those weights; a rerun resumes from the newest one."
        folder = checkpoint_files.set_aside(self.directory, suspect, f"diverged_at_step_{step}")
        left = checkpoint_files.listed(self.directory)
        return (
            f"Moved {', '.join(os.path.basename(p) for p in suspect)} (made from the diverging weights) to "
            f"{folder}; a rerun resumes from {left[0] if left else 'scratch'}."
        )

    def close(self) -> None:
        """Waits for every write; a non-chief worker then removes its throw-away copies."""
        self.wait()
        if not self._chief:
            shutil.rmtree(self.manager.directory, ignore_errors=True)  # the local folder of _worker_folder


def _worker_folder(model_dir: str, worker: int) -> str:
    """An empty local folder for a non-chief worker's throw-away copies, named for the run and the worker: a worker
    killed before `close()` (SIGKILL, a preempted VM) leaves it behind, and its restart empties and reuses it, so
    kills do not pile checkpoint-sized folders up in the temp dir."""
    key = hashlib.sha256(f"{getattr(os, 'getuid', lambda: 0)()}|{model_dir}".encode()).hexdigest()[:16]
    folder = os.path.join(tempfile.gettempdir(), f"kbert_worker_ckpt_{key}_{worker}")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    return folder


def _is_google_checkpoint(path: str) -> bool:
    names = set(checkpoint_files.reader(path).get_variable_to_shape_map())
    return any(name.startswith("bert/embeddings/") for name in names)


def load_init_checkpoint(model: keras.Model, path: str, print_fn: Callable[..., None] | None = None) -> str:
    """Loads weights only (no optimizer slots, step or input position) from a kbert, Google TF1, Hugging Face or
    keras-hub checkpoint.

    `path` is a checkpoint prefix or a directory (a kbert `model_dir`, its `checkpoints/`, a Google download with
    a `checkpoint` file, a Hugging Face BERT directory or a keras-hub preset). Returns 'google', 'kbert',
    'Hugging Face' or 'keras-hub'. The parts an imported checkpoint lacks (a BertModel's heads) keep their built
    weights, and `print_fn` gets the one line that says so.

    Raises:
      MissingFileError: nothing loadable at `path`.
      CheckpointMismatchError: the checkpoint's weights are not exactly the model's (another size or depth),
        listing every missing, unexpected and wrong-shape one; nothing is assigned then.
    """
    source = imported_checkpoint(path)
    if source is not None:
        line = source.fresh_line(source.load(model))
        if line and print_fn is not None:
            print_fn(line, flush=True)
        return source.kind
    resolved = path
    if tf.io.gfile.isdir(path) and not tf.io.gfile.exists(path + ".index"):  # on ram:// a prefix is a folder too
        resolved = latest_checkpoint(path) or tf.train.latest_checkpoint(path)
    if not resolved:
        raise MissingFileError(
            f"train.init_checkpoint={path!r}: no checkpoint there (give a prefix such as "
            ".../bert_model.ckpt or .../ckpt-1000, or a directory with a 'checkpoint' file)."
        )
    try:
        google = _is_google_checkpoint(resolved)
    except (tf.errors.NotFoundError, ValueError) as e:
        raise MissingFileError(f"train.init_checkpoint={path!r}: cannot read {resolved!r}: {e}") from None
    if google:
        load_google_checkpoint(model, resolved)
        return "google"
    weights = {MODEL_KEY: variables_by_path(model.weights)}
    error = mismatch(
        resolved,
        _shapes(weights),
        _stored_shapes(resolved, (MODEL_KEY,)),
        _describe(model),
        "set model.* to the checkpoint's sizes, or give train.init_checkpoint a checkpoint of this model's.",
    )
    if error:
        raise error
    tf.train.Checkpoint(**weights).restore(resolved).expect_partial()
    return "kbert"
