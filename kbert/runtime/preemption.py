"""Preemption: a SIGTERM or a GCE maintenance notice becomes a saved checkpoint and a known exit status.

One `PreemptionWatcher` per process, made by the run (`kbert.experiment.run`) and kept across MSLT stages. It
records a termination as it comes: SIGTERM (what spot VMs, GKE and Slurm send) and, on GCE hosts (GPU, CPU and
Cloud TPU VMs), the metadata server's maintenance event, polled on a daemon thread. The loop asks `check` between
loops of `train.steps_per_loop` steps. Under MultiWorkerMirroredStrategy every worker's answer is all-reduced
first, so a notice on any worker makes all of them save the same step and stop; every worker reaches `check` at
the same step because training is synchronous. `check` saves and raises `Preempted`, on which `kbert-pretrain`
exits with PREEMPTED_EXIT_CODE.

TF's `PreemptionCheckpointHandler` is not used: it does nothing on Cloud TPU VMs and GCE CPU hosts
(`save_checkpoint_if_preempted` returns at once there), it binds itself to one checkpoint manager and restores it
when made (each MSLT stage has its own manager, so a second handler per process would be needed), and on GCE it
watches the maintenance event but not SIGTERM.

Example:

```python
with PreemptionWatcher(strategy) as preemption:
    ...                                   # each loop of the training loop ends with:
    preemption.check(manager, step)       # saves and raises Preempted if a termination came
```
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

import tensorflow as tf

# TF's reader of GCE's maintenance event is not exported; it is the one TF's own preemption handler uses.
from tensorflow.python.distribute.failure_handling import failure_handling_util

# The exit status of a preempted run, as TF's PreemptionCheckpointHandler uses: "saved, restart me".
PREEMPTED_EXIT_CODE = 42
# GCE announces a maintenance event a minute ahead; polling every few seconds leaves most of it for the save.
_POLL_SECONDS = 5.0
_DMI_PRODUCT = "/sys/class/dmi/id/product_name"


class Preempted(RuntimeError):
    """A termination came; a checkpoint of the current step was written. Exit with PREEMPTED_EXIT_CODE."""


def on_gce(product_file: str = _DMI_PRODUCT) -> bool:
    """Whether this host is a GCE VM (GPU, CPU or Cloud TPU VM), read from the DMI product name without a network
    request, as Google's own client libraries detect it."""
    try:
        with open(product_file) as f:  # local: the host's own sysfs, never a model_dir
            return f.read().strip() == "Google Compute Engine"
    except OSError:
        return False


def _maintenance_notice() -> bool:
    try:
        return failure_handling_util.termination_watcher_function_gce()
    except Exception:  # an unreachable metadata server is no notice; the next poll asks again
        return False


class PreemptionWatcher:
    """Watches for termination from construction to `close()`; `check` saves and stops the run once it came.

    Invariant: under MultiWorkerMirroredStrategy `check` returns on every worker or raises on every worker, at
    the same step, so the workers' saves are one collective save.
    """

    def __init__(
        self,
        strategy: tf.distribute.Strategy,
        gce: bool | None = None,
        notice: Callable[[], bool] = _maintenance_notice,
        poll_seconds: float = _POLL_SECONDS,
    ):
        self._strategy = strategy
        self._agree = isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
        self.reason: str | None = None
        self._closed = threading.Event()
        # Python lets only the main thread install handlers; a run from another thread keeps the default.
        self._installed = threading.current_thread() is threading.main_thread()
        if self._installed:
            self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        if on_gce() if gce is None else gce:
            threading.Thread(
                target=self._poll, args=(notice, poll_seconds), daemon=True, name="kbert-maintenance-watch"
            ).start()

    def _on_sigterm(self, signum, frame) -> None:
        self.reason = self.reason or "SIGTERM"

    def _poll(self, notice: Callable[[], bool], seconds: float) -> None:
        while not self._closed.wait(seconds):
            if notice():
                self.reason = self.reason or "GCE maintenance event"
                return

    def _preempted(self) -> str | None:
        """This worker's reason, or under multi-worker "another worker's notice" when only another has one."""
        mine = self.reason  # read once: a signal during the all-reduce must not make this worker part ways
        if not self._agree:
            return mine
        flags = self._strategy.experimental_distribute_values_from_function(
            lambda context: tf.constant(int(mine is not None), tf.int32)
        )
        anyone = int(self._strategy.reduce(tf.distribute.ReduceOp.SUM, flags, axis=None))
        return mine or ("another worker's termination notice" if anyone else None)

    def check(self, manager: tf.train.CheckpointManager, step: int) -> None:
        """Saves checkpoint `step` with `manager` and raises Preempted if a termination came since the start."""
        reason = self._preempted()
        if reason:
            path = manager.save(checkpoint_number=step, check_interval=False)
            raise Preempted(f"preempted ({reason}): saved {path} at step {step}; rerun the same command to resume.")

    def close(self) -> None:
        self._closed.set()
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous)
            self._installed = False

    def __enter__(self) -> PreemptionWatcher:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
