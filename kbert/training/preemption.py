"""Preemption: a SIGTERM or a cluster's preemption notice becomes a saved checkpoint and a known exit status.

One `PreemptionWatcher` per process, made by the run (`kbert.experiment.run`) and checked by the loop between
loops of `train.steps_per_loop` steps. On one host it turns SIGTERM into a save of the current step and
`Preempted`. Under MultiWorkerMirroredStrategy and TPUStrategy it defers to TF's `PreemptionCheckpointHandler`,
which agrees on one step across workers, saves, and exits the process, and it tells that handler what a
termination is: SIGTERM (what spot VMs, GKE and Slurm send) or, on GCE hosts (GPU, CPU and TPU VMs), the
metadata server's maintenance event; TF alone watches only the latter on GCE. Every path exits with
PREEMPTED_EXIT_CODE.

Example:

```python
with PreemptionWatcher(strategy) as preemption:
    ...                                   # each loop of the training loop ends with:
    preemption.check(manager, step)       # raises Preempted after saving if SIGTERM arrived
```
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Callable, Optional

import tensorflow as tf
# TF's platform detection and GCE maintenance watcher are not exported; they are what the handler itself uses.
from tensorflow.python.distribute.failure_handling import failure_handling_util

# The exit status of a preempted run, as TF's PreemptionCheckpointHandler uses: "saved, restart me".
PREEMPTED_EXIT_CODE = 42


class Preempted(RuntimeError):
    """SIGTERM arrived; a checkpoint of the current step was written. Exit with PREEMPTED_EXIT_CODE."""


_GCE = (failure_handling_util.PlatformDevice.GCE_GPU, failure_handling_util.PlatformDevice.GCE_CPU,
        failure_handling_util.PlatformDevice.GCE_TPU)


def _exit_preempted() -> None:
    print("kbert: preempted: a checkpoint of the current step was saved; rerun the same command to "
          "resume.", file=sys.stderr, flush=True)
    sys.exit(PREEMPTED_EXIT_CODE)


def termination_config(sigterm: Callable[[], bool]) -> tf.distribute.experimental.TerminationConfig:
    """What TF's handler treats as a termination (`sigterm()`, or GCE's maintenance event on a GCE host) and how
    it exits (PREEMPTED_EXIT_CODE)."""
    on_gce = failure_handling_util.detect_platform() in _GCE
    notice = failure_handling_util.termination_watcher_function_gce if on_gce else (lambda: False)
    return tf.distribute.experimental.TerminationConfig(
        termination_watcher_fn=lambda: sigterm() or notice(), exit_fn=_exit_preempted, grace_period=0)


class PreemptionWatcher:
    """Watches for preemption from construction to `close()`; `check` saves and stops the run when it came.

    TF's handler is bound to one checkpoint manager, so under multi-worker and TPU strategies a new one is made
    when the loop checks with another manager (each MSLT stage has its own).
    """

    def __init__(self, strategy: tf.distribute.Strategy):
        self._strategy = strategy
        self._cluster = isinstance(strategy, (tf.distribute.MultiWorkerMirroredStrategy, tf.distribute.TPUStrategy))
        self._handler: Optional[tf.distribute.experimental.PreemptionCheckpointHandler] = None
        self._manager: Optional[tf.train.CheckpointManager] = None
        self.sigterm = False
        # Python lets only the main thread install handlers; a run from another thread keeps the default.
        self._installed = threading.current_thread() is threading.main_thread()
        if self._installed:
            self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, signum, frame) -> None:
        self.sigterm = True

    def check(self, manager: tf.train.CheckpointManager, step: int) -> None:
        """Saves checkpoint `step` with `manager` and stops the run if preemption came since the last check."""
        if self._cluster:
            if manager is not self._manager:
                self._handler = tf.distribute.experimental.PreemptionCheckpointHandler(
                    self._strategy.cluster_resolver, manager,
                    termination_config=termination_config(lambda: self.sigterm))
                self._manager = manager
            self._handler.save_checkpoint_if_preempted(checkpoint_number=step, check_interval=False)
        elif self.sigterm:
            path = manager.save(checkpoint_number=step, check_interval=False)
            raise Preempted(f"SIGTERM: saved {path} at step {step}; rerun the same command to resume.")

    def close(self) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous)
            self._installed = False

    def __enter__(self) -> "PreemptionWatcher":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
