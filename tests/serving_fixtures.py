"""Running a check where kbert is not imported: a fresh `python -I -c` process that imports TensorFlow and
tensorflow-text only (it asserts so before it writes its result), and `saved_model_cli show`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

# Appended to every script: the proof that the SavedModels needed nothing of kbert.
_NO_KBERT = """
assert not [m for m in sys.modules if m.split(".")[0] == "kbert"], "kbert was imported"
"""


def run_without_kbert(script: str, *args: str) -> dict:
    """Runs `script` (with `json` and `sys` imported; it sets `result`, a JSON-able dict, and reads its `args` from
    `sys.argv[1:]`) in a fresh isolated Python; returns `result`."""
    program = "import json\nimport sys\n" + script + _NO_KBERT + "\nprint('RESULT ' + json.dumps(result))\n"
    completed = subprocess.run(
        [sys.executable, "-I", "-c", program, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    line = [line for line in completed.stdout.splitlines() if line.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT ") :])


_SAVED_MODEL_CLI = """
import sys
from tensorflow.python.tools.saved_model_cli import main  # what the saved_model_cli command runs

for directory in sys.argv[1:]:
    sys.argv = ["saved_model_cli", "show", "--dir", directory, "--all"]
    print(_MARK, flush=True)
    try:
        main()
    except SystemExit as exit:
        assert not exit.code, exit.code
"""
_MARK = "=== saved_model_cli show ==="


def saved_model_cli_show(*directories: str) -> list[str]:
    """`saved_model_cli show --dir DIRECTORY --all`'s output for each directory, all in one process (one
    TensorFlow start). It lists the signatures; it cannot list the functions that use tensorflow-text's ops, and
    says so."""
    completed = subprocess.run(
        [sys.executable, "-c", f"_MARK = {_MARK!r}\n" + _SAVED_MODEL_CLI, *directories],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed.stdout.split(_MARK + "\n")[1:]
