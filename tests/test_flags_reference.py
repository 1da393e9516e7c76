"""docs/reference/commands.md is what tools/flags_reference.py writes from today's flag definitions."""

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.spawns
def test_the_commands_page_is_current():
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "flags_reference.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
