"""Feeding a strategy from an input pipeline whose position can be checkpointed, or prefetched to the devices.

TF 2.20's distributed iterators (`strategy.distribute_datasets_from_function`) prefetch batches into the devices'
memory but cannot be saved in a checkpoint. Plain `tf.data` iterators can, so where the input position is
checkpointed (`data.checkpoint_input`, the default on CPU/GPU hosts) each worker iterates its own pipeline (one per
worker, its files and its share of the global batch) with an ordinary iterator and splits each batch among its
local replicas; a restart then continues the data exactly where the checkpoint left it, and each step copies its
batch to the devices itself. Without it, and always on TPU, the distributed iterator feeds the replicas with
`DEVICE_PREFETCH_BATCHES` batches prefetched on each GPU or TPU; its position is not saved: a run that starts at
step N (a restart, an MSLT stage) reads a fresh shuffle seeded with `train.seed + N`
(`kbert.training.loop.input_start`). It does not start over with the batches the run began with, and it does not
continue where the checkpoint stopped either: examples the first N steps saw can come again before examples they
never saw.

Example:

```python
feed = WorkerInput(strategy, dataset_fn)  # dataset_fn(input_context) -> batches of the worker's share
tf.train.Checkpoint(train_iterator=feed.checkpointable)
strategy.run(step_fn, (feed.next_batch(),))  # inside a tf.function
```
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from kbert.data.pipeline import distribute_options
from kbert.runtime.strategy import worker_index_and_count

DatasetFn = Callable[[tf.distribute.InputContext], tf.data.Dataset]


class WorkerInput:
    """One checkpointable `tf.data` iterator per worker; batches split evenly among the worker's replicas."""

    def __init__(self, strategy: tf.distribute.Strategy, dataset_fn: DatasetFn):
        self.strategy = strategy
        index, workers = worker_index_and_count(strategy)
        self.local_replicas = strategy.num_replicas_in_sync // workers
        # A context in which each "replica" is a worker, so the pipeline batches the worker's whole share.
        context = tf.distribute.InputContext(
            num_input_pipelines=workers, input_pipeline_id=index, num_replicas_in_sync=workers
        )
        self.iterator = iter(dataset_fn(context))
        self.checkpointable: tf.data.Iterator | None = self.iterator

    def next_batch(self):
        batch = next(self.iterator)
        local = self.local_replicas
        if local == 1:
            return self.strategy.experimental_distribute_values_from_function(lambda _: batch)

        def replica_slice(context: tf.distribute.ValueContext):
            i = context.replica_id_in_sync_group % local
            return tf.nest.map_structure(lambda t: tf.split(t, local)[i], batch)

        return self.strategy.experimental_distribute_values_from_function(replica_slice)


class DistributedInput:
    """`strategy.distribute_datasets_from_function`: prefetches to GPUs and TPUs (`distribute_options`), not
    checkpointable. On a pod slice it runs one pipeline per host, in that host's TPU server, so every host must be
    able to read the files."""

    def __init__(self, strategy: tf.distribute.Strategy, dataset_fn: DatasetFn):
        self.iterator = iter(strategy.distribute_datasets_from_function(dataset_fn, distribute_options(strategy)))
        self.checkpointable = None

    def next_batch(self):
        return next(self.iterator)


def make_input(strategy: tf.distribute.Strategy, dataset_fn: DatasetFn, checkpointable: bool = True):
    """`WorkerInput` where the position is to be checkpointed (not possible on TPUs), `DistributedInput` else."""
    if checkpointable and not isinstance(strategy, tf.distribute.TPUStrategy):
        return WorkerInput(strategy, dataset_fn)
    return DistributedInput(strategy, dataset_fn)
