"""A quiet console that still shows TensorFlow's errors, for kbert's commands (`kbert.cli`) and the demo.

TensorFlow 2.20 prints two ERROR lines that report no error:

* `E external/local_xla/xla/stream_executor/cuda/cuda_platform.cc:51] failed call to cuInit: INTERNAL: CUDA error:
  Failed call to cuInit: UNKNOWN ERROR (303)`, at the first op of every process on a host without a GPU: the
  `tensorflow` wheel registers a GPU device factory, which calls cuInit, which fails without a driver.
* `E tensorflow/core/util/util.cc:131] oneDNN supports DT_INT64 only on platforms with AVX-512. Falling back to the
  default Eigen-based implementation if present.`, once a process, when oneDNN's graph rewrite first meets an op on
  integers it has no kernel for (an int64 Transpose is enough), on every CPU, AVX-512 or not.

Raising TF_CPP_MIN_LOG_LEVEL to 3 would hide them and every real error with them, so instead:

* `quiet_environment()`, before TensorFlow is imported: TF_CPP_MIN_LOG_LEVEL=2 (TensorFlow's INFO and WARNING lines
  off, its ERROR and FATAL lines shown), and where the host has neither GPU nor TPU (`kbert.runtime.accelerators`,
  read without TensorFlow), TF_ENABLED_DEVICE_TYPES=CPU,XLA_CPU: TensorFlow then registers no GPU device factory
  and never calls cuInit, on a host where it could not have found a GPU. A variable the user set is left as it is.
* `filter_stderr()`: the oneDNN line has no switch of its own (TF_ENABLE_ONEDNN_OPTS=0 would silence it by turning
  oneDNN's kernels off, which changes the numbers), so a small child process passes this process's stderr through
  and drops that one line, matched whole, timestamp to full stop. Everything else passes as it comes, partial lines
  and `\\r` status lines included. A child rather than a thread, so that what a crashing process wrote (a FATAL
  line before an abort) still reaches the console.

`--verbose` (on the command line) leaves all of it off: TensorFlow's logs as TensorFlow prints them.

Example:

```python
console.quiet_environment()   # first, before anything imports TensorFlow
import tensorflow as tf
console.filter_stderr()       # when the program starts its work
```
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
from collections.abc import Sequence

from kbert.runtime.accelerators import has_accelerators

# Every device type the `tensorflow` 2.20 wheel registers but the GPU ones (GPU, XLA_GPU).
CPU_DEVICE_TYPES = "CPU,XLA_CPU"

# The whole line, as TensorFlow's logger writes it (one write, so one read of the pipe holds all of it). Only the
# types oneDNN's TensorFlow ops support on no CPU, for which the line's "only on platforms with AVX-512" is wrong;
# the notice for bfloat16 or float16 on a CPU without AVX-512 is true, and passes.
ONEDNN_LINE = (
    rb"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: E (?:\d+ )?tensorflow/core/util/util\.cc:\d+\] oneDNN supports "
    rb"DT_(?:BOOL|U?INT(?:8|16|32|64)) only on platforms with AVX-512\. Falling back to the default Eigen-based "
    rb"implementation if present\.\n"
)

# The filter: stdin (this process's stderr) to stdout (the console's stderr), less ONEDNN_LINE. A read of 1 MiB
# takes all the pipe holds (64 KiB), so a line written in one piece is never split between two reads. It ignores
# Ctrl-C and SIGTERM, which reach it with its parent, so that it stays to pass on what the parent prints on its way
# out; it ends when every writer has closed the pipe.
_FILTER = f"""
import os, re, signal
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
drop = re.compile({ONEDNN_LINE!r})
while chunk := os.read(0, 1 << 20):
    view = memoryview(drop.sub(b"", chunk))
    while view:
        view = view[os.write(1, view):]
"""

_installed = False


def _verbose(argv: Sequence[str]) -> bool:
    return "--verbose" in argv[1:]


def quiet_environment(argv: Sequence[str] | None = None) -> None:
    """Sets TF_CPP_MIN_LOG_LEVEL=2 and, on a host with no GPU or TPU, TF_ENABLED_DEVICE_TYPES=CPU,XLA_CPU, each
    unless already set; nothing with `--verbose` in `argv` (default sys.argv). Only takes effect before TensorFlow is
    imported, which reads both once, when it loads."""
    if _verbose(sys.argv if argv is None else argv):
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if "TF_ENABLED_DEVICE_TYPES" not in os.environ and "tensorflow" not in sys.modules and not has_accelerators():
        os.environ["TF_ENABLED_DEVICE_TYPES"] = CPU_DEVICE_TYPES


def _log_level() -> int:
    try:
        return int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0"))
    except ValueError:
        return 0


def filter_stderr(argv: Sequence[str] | None = None) -> None:
    """Passes this process's stderr (file descriptor 2, so TensorFlow's C++ lines too) through a child that drops
    `ONEDNN_LINE`, until the process exits. Once a process; nothing with `--verbose` in `argv` (default sys.argv),
    where TF_CPP_MIN_LOG_LEVEL=3 hides the line anyway, or where the child cannot start."""
    global _installed
    if _installed or os.name != "posix" or _verbose(sys.argv if argv is None else argv) or _log_level() >= 3:
        return
    try:
        console = os.dup(2)
    except OSError:  # no stderr at all
        return
    try:
        child = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _FILTER], stdin=subprocess.PIPE, stdout=console, stderr=console
        )
    except OSError:
        os.close(console)
        return
    _installed = True
    sys.stderr.flush()
    os.dup2(child.stdin.fileno(), 2)
    child.stdin.close()
    atexit.register(_restore, os.getpid(), console, child)


def _restore(pid: int, console: int, child: subprocess.Popen) -> None:
    """At exit: stderr back to the console, then wait (a few seconds at most) until the filter has passed on all
    that was written before, so the shell's prompt comes after it."""
    if os.getpid() != pid:  # a forked child runs its parent's atexit handlers
        return
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os.dup2(console, 2)
    os.close(console)
    try:
        child.wait(timeout=5)
    except subprocess.TimeoutExpired:  # a child process of ours still holds the pipe; it ends with them
        pass
