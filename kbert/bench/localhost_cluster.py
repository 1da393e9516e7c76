"""N processes of one command as a MultiWorkerMirroredStrategy cluster on localhost: ports, TF_CONFIG, launch.
(tools/bench_mslt.py's --workers, and the multi-worker tests.)

Invariant: every worker is given the same `cluster` (N `localhost:PORT` addresses on distinct ports) and its own
task index 0..N-1; worker 0 is the chief (TF's rule when the cluster has no `chief` entry), and only it writes
the model_dir's checkpoints and summary.

Example:

```python
workers = launch([sys.executable, "-m", "kbert.run_pretraining", ..., "--strategy=multi_worker_mirrored"],
                 tf_configs(free_ports(2)), dict(os.environ), ["w0.log", "w1.log"])
assert all(w.wait() == 0 for w in workers)
```
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import time
from collections.abc import Sequence


def free_ports(count: int) -> list[int]:
    """`count` distinct ports free on localhost now. All sockets stay bound until every port is picked, so the
    OS cannot hand out one port twice."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("localhost", 0))
        return [s.getsockname()[1] for s in sockets]


def tf_configs(ports: Sequence[int]) -> list[str]:
    """One TF_CONFIG (JSON) per worker: the shared cluster and the worker's own index."""
    cluster = {"worker": [f"localhost:{port}" for port in ports]}
    return [json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}) for i in range(len(ports))]


def launch(command: Sequence[str], configs: Sequence[str], env: dict, logs: Sequence[str]) -> list[subprocess.Popen]:
    """Starts `command` once per TF_CONFIG in `configs`, worker I writing stdout and stderr to `logs[I]`; an empty
    TF_CONFIG starts a process outside any cluster (`launch(command, [""], env, [log])`: a one-process run)."""
    workers = []
    for config, log in zip(configs, logs, strict=True):
        with open(log, "w") as out:  # local: the child keeps its own descriptor
            workers.append(
                subprocess.Popen(
                    list(command),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env={**env, "TF_CONFIG": config} if config else env,
                )
            )
    return workers


def wait_all(workers: Sequence[subprocess.Popen], poll_seconds: float = 1.0) -> list[int]:
    """Waits for every worker and returns their exit codes; once one fails, the others are terminated, since they
    would wait for it in their next all-reduce for ever."""
    while any(w.poll() is None for w in workers):
        if any(w.returncode for w in workers):
            for w in workers:
                if w.returncode is None:
                    w.terminate()
        time.sleep(poll_seconds)
    return [w.returncode for w in workers]
