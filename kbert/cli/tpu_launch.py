"""The pod-slice controller's environment, set before TensorFlow loads: `TPU_LOAD_LIBRARY=0` with `--tpu=NAME`.

TensorFlow opens libtpu when it is imported, and an opened libtpu takes the host's TPU chips. The one process that
drives a pod slice (`--tpu=NAME` or `grpc://...`, on worker 0) must leave worker 0's chips to the TPU server that
runs on that host, so the variable has to be set before `import tensorflow`. That is why this lives here, beside
the entry points, and imports neither TensorFlow nor a kbert module that does (`kbert.training` does).

Example:

```python
set_up_controller("kbert-pretrain", FLAGS.strategy, FLAGS.tpu)   # first thing in main
```
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

VARIABLE = "TPU_LOAD_LIBRARY"
# The --tpu flag's help, one text for every entry point that takes the flag.
TPU_FLAG_HELP = (
    "'local' on a single-host TPU VM (the default with --strategy=tpu); on a pod slice the TPU's name "
    "(or grpc://IP:8470,...), from worker 0 only (docs/tpu.md)."
)


def drives_remote_tpu(strategy: str, tpu: str) -> bool:
    """Whether the run will be a TPUStrategy over a TPU reached by name or gRPC address, not `local`."""
    return strategy in ("auto", "tpu") and tpu not in ("", "local")


def controller_environment(strategy: str, tpu: str, environ: MutableMapping[str, str]) -> str | None:
    """Sets TPU_LOAD_LIBRARY=0 for a run that drives a remote TPU, unless the user set the variable; returns the
    line that says so, or None when nothing was set."""
    if not drives_remote_tpu(strategy, tpu) or VARIABLE in environ:
        return None
    environ[VARIABLE] = "0"
    return (
        f"{VARIABLE}=0: --tpu={tpu} drives the slice from this host over gRPC, so this process leaves the "
        "host's own chips to its TPU server"
    )


def set_up_controller(program: str, strategy: str, tpu: str) -> None:
    """`controller_environment` for this process, saying so on a line of `program`'s."""
    line = controller_environment(strategy, tpu, os.environ)
    if line:
        print(f"{program}: {line}", flush=True)
