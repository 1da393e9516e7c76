"""tests/forkserver.py: a child that sets KBERT_TEST_FORK_SUBPROCESSES=1 starts its Python processes as children of
the server (TensorFlow already imported), in a session of their own when asked; without it (or with
KBERT_TEST_FORKSERVER=0), as plain interpreters."""

import os
import sys

import forkserver
import pytest
from training_fixtures import cli_env

# Starts two Python processes with subprocess.run, the second in a session of its own; each prints whether it
# began with TensorFlow imported and whether it leads its session.
PROGRAM = """
import subprocess, sys
code = "import os, sys; print('tensorflow' in sys.modules, os.getsid(0) == os.getpid())"
for alone in (False, True):
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, start_new_session=alone)
    print(run.stdout.strip())
"""


@pytest.mark.spawns
@pytest.mark.parametrize("fork", ["1", "0"])
def test_a_childs_own_processes_are_the_servers_children_when_it_asks(fork):
    env = cli_env(**{forkserver.FORK_SUBPROCESSES: fork})
    result = forkserver.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    forked = fork == "1" and os.environ.get("KBERT_TEST_FORKSERVER", "1") != "0"  # =0: every process is plain
    assert result.stdout.splitlines() == [f"{forked} False", f"{forked} True"]
