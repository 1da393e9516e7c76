"""Building a run's next stage on a thread while the current one trains, so it starts without graph building.

Keras keeps its naming and random state per thread, so a stage built on a fresh thread gets the same variable
paths and seeds as one built on the main thread after `keras.backend.clear_session()` (tested bit-identical).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

import tensorflow as tf

Setup = TypeVar("Setup")


def can_build_ahead(strategy: tf.distribute.Strategy) -> bool:
    """One device and MirroredStrategy. Multi-worker and TPU graphs hold collectives whose keys each worker
    assigns as it traces; tracing one on a thread beside the running stage is not tested for those here."""
    return not isinstance(strategy, (tf.distribute.TPUStrategy, tf.distribute.MultiWorkerMirroredStrategy))


class BuildAhead(Generic[Setup]):
    """Runs `build()` on a daemon thread (a crash or SIGTERM need not wait for it); `result` joins it."""

    def __init__(self, key: int, label: str, build: Callable[[], Setup]):
        self.key, self.label = key, label
        self.seconds = 0.0
        self._setup: Setup | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(build,), daemon=True, name=f"kbert-build-{key}")
        self._thread.start()

    def _run(self, build: Callable[[], Setup]) -> None:
        started = time.time()
        try:
            self._setup = build()
            self.seconds = time.time() - started
        except Exception as error:  # reported, then the stage is built the usual way
            self._error = error

    def result(self, print_fn) -> Setup | None:
        """What the build made, or None (after a line saying why) when it failed."""
        self._thread.join()
        if self._error is not None:
            print_fn(
                f"{self.label}: building it ahead failed ({type(self._error).__name__}: {self._error}); "
                "building it now.",
                flush=True,
            )
        return self._setup
