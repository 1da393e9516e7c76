"""Suite-wide pytest hooks."""

import os
import sys

import pytest

_exit_status = 0


@pytest.fixture
def float32_policy():
    """Puts Keras's global precision policy back to float32 after a test that changed it."""
    yield
    import keras

    keras.mixed_precision.set_global_policy("float32")


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
