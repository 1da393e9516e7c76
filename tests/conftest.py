"""Suite-wide pytest hooks, and the guard of the fast tier: a test that starts a process must be marked `spawns`
(`tools/test.sh --fast` runs the others); an unmarked one fails, naming the marker. With KBERT_SPAWN_LOG=PATH the
guard appends the test's id to PATH instead (to find the tests to mark)."""

import gc
import os
import platform
import subprocess
import sys

import forkserver
import pytest

# Python runs `uname -p` the first time anything asks for the processor (TensorFlow and kbert's run header do), then
# caches it: asked here, before any test, so the guard below does not blame whichever test asked first.
platform.processor()

_exit_status = 0


@pytest.fixture(autouse=True)
def _spawns_only_when_marked(request, monkeypatch):
    if request.node.get_closest_marker("spawns") is not None:
        yield
        return
    log, start, fork = os.environ.get("KBERT_SPAWN_LOG"), subprocess.Popen._execute_child, forkserver._fork
    test = request.node.nodeid

    def blame() -> None:
        if not log:
            raise AssertionError(
                f"{test} starts a process: mark it @pytest.mark.spawns (tools/test.sh --fast leaves such tests out)"
            )
        with open(log, "a") as f:
            f.write(test + "\n")

    def refuse(self, *args, **kwargs):
        blame()
        return start(self, *args, **kwargs)

    def refuse_fork(*args, **kwargs):  # a child of the fork server is a process too
        blame()
        return fork(*args, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)
    monkeypatch.setattr(forkserver, "_fork", refuse_fork)
    yield


@pytest.fixture
def float32_policy():
    """Puts Keras's global precision policy back to float32 after a test that changed it."""
    yield
    import keras

    keras.mixed_precision.set_global_policy("float32")


def pytest_runtest_setup(item):
    # What lives on into this test (the imports of TensorFlow, Keras and kbert, module fixtures, TensorFlow's and
    # Keras's caches: 2 million objects in a worker by its third training file) is collected once here, then moved
    # out of the collector's sight (gc.freeze, as the fork server and kbert-pretrain do), so the full collections
    # that a test's tracing sets off skip it. Three training files in one worker: 8% of their time in the collector
    # without this, 2% with it (258 s -> 246 s), peak RSS the same (2.8 GB).
    gc.collect()
    gc.freeze()


def pytest_sessionfinish(session, exitstatus):
    global _exit_status
    _exit_status = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    # TF 2.20 can deadlock when a tf.data iterator is destroyed during interpreter finalization (seen here: the
    # process hung for good after "N passed", inside ParallelInterleave's destructor). Every report has been written
    # by now, so leave without finalizing, keeping pytest's exit status.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_exit_status)
