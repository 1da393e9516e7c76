"""docs/reference/commands.md is what tools/flags_reference.py writes from today's flag definitions."""

import pathlib
import sys

import forkserver
import pytest
from training_fixtures import cli_env

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.spawns
def test_the_commands_page_is_current():
    # The tool and the process it imports the commands in: children of the fork server (TensorFlow imported once).
    result = forkserver.run(
        [sys.executable, str(ROOT / "tools" / "flags_reference.py"), "--check"],
        env=cli_env(**{forkserver.FORK_SUBPROCESSES: "1"}),
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
