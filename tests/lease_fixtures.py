"""What the lease tests on a local disk and on GCS share: a PID that is gone, and many takers at once."""

import subprocess
import sys
import threading

from kbert.errors import ModelDirInUseError
from kbert.runtime.lease import Lease


def dead_pid() -> int:
    """The PID of a process that has ended."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def take_at_once(model_dir: str, takers: int = 8) -> tuple[list[Lease], list[str]]:
    """`takers` threads take `model_dir`'s lease at the same moment; returns the leases held and the refusals."""
    start, held, refused = threading.Barrier(takers), [], []

    def take():
        start.wait()
        try:
            held.append(Lease.take(model_dir, on_lost=lambda: None))
        except ModelDirInUseError as error:
            refused.append(str(error))

    threads = [threading.Thread(target=take) for _ in range(takers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return held, refused
