"""Running a kbert command line as a child process, its whole output in a log and the chosen lines echoed.

Example:

```python
run_logged(["kbert-pretrain", "--config_file=c.yaml", "--model_dir=m"], "logs/full.log",
           re.compile(r"^step "), print, "kbert-pretrain for the full run")
```
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Sequence


def run_logged(command: Sequence[str], log: str, echo: re.Pattern, print_fn: Callable[..., None], what: str) -> None:
    """Runs `command`, writes everything it prints to `log` and echoes the lines `echo` matches, indented.

    Raises RuntimeError naming `what` and the log when the command fails.
    """
    # TensorFlow's C++ start-up chatter goes to the log only if the user asked for it; unbuffered, the child's lines
    # reach the log and the screen as it prints them, whether or not it flushes.
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"), PYTHONUNBUFFERED="1")
    with open(log, "w") as log_file:
        process = subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        for line in process.stdout:
            log_file.write(line)
            if echo.match(line):
                print_fn("      " + line.rstrip())
        process.wait()
    if process.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {process.returncode}); see {log}.")
