"""One run per model_dir: a lease file that a second run on the same directory finds and refuses to share.

The lease (`model_dir/lease.json`: host, pid, start time, last refresh) is taken with an atomic create and kept
fresh by a daemon thread; every write after that is conditional on the version this process wrote last (an
exclusive lock around read-compare-write on a local disk, a generation precondition on GCS), so two processes
can never both believe they hold it. A lease is stale when its process is gone (same host) or it has not been
refreshed for `STALE_AFTER` seconds (another host); a stale lease is taken over, and the run says so.
One lease per job: the chief takes it for all its workers.

Where it lives, by the model_dir's scheme (`_store`): a local path, or `file://`, is leased on its disk
(`LocalStore`); `gs://` as a GCS object through google-cloud-storage (`GcsStore`), tested against fake-gcs-server on
loopback (`tests/test_lease_gcs.py`: taking, refusing, takeover and loss all rest on `ifGenerationMatch` on writes,
which it honours; it ignores the precondition on delete and on download, so it cannot show that a release never
deletes a newer holder's lease, nor that a read pairs data with its own generation). Any other scheme (`ram://`,
`hdfs://`, `s3://`, ...) gets no lease (kbert has no store for it): the run says so in one line and goes on, and
nothing stops a second run on the same model_dir.

Example:

```python
with Lease.take("/tmp/run", print_fn=print):   # raises ModelDirInUseError naming the other run
    ...                                          # train
```
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import socket
import threading
import time
from collections.abc import Callable

from kbert.errors import MissingFileError, ModelDirInUseError

LEASE_FILE = "lease.json"
REFRESH_EVERY = 30.0
STALE_AFTER = 4 * REFRESH_EVERY


class Conflict(Exception):
    """The lease file is not at the version the caller expected (someone else wrote or removed it)."""


class LocalStore:
    """The lease file on a local or mounted disk; versions are the file's contents, compared under a lock on
    the folder."""

    def __init__(self, path: str):
        self.path = path

    def create(self, data: bytes) -> bytes:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            raise Conflict() from None
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return data

    def read(self) -> tuple[bytes, bytes] | None:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        return data, data

    def _locked(self, version: bytes, write: Callable[[], None]) -> None:
        # The lock is on the folder: the file itself is replaced by each write, and a lock file would be litter.
        folder = os.open(os.path.dirname(os.path.abspath(self.path)), os.O_RDONLY)
        try:
            fcntl.flock(folder, fcntl.LOCK_EX)
            current = self.read()
            if current is None or current[1] != version:
                raise Conflict()
            write()
        finally:
            os.close(folder)  # closing releases the lock

    def replace(self, data: bytes, version: bytes) -> bytes:
        def write():
            tmp = f"{self.path}.{os.getpid()}.tmp"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, self.path)

        self._locked(version, write)
        return data

    def delete(self, version: bytes) -> None:
        self._locked(version, lambda: os.remove(self.path))


def _storage_client(path: str):
    try:
        from google.cloud import storage
    except ImportError:
        raise MissingFileError(
            f"--model_dir={os.path.dirname(path)}: a gs:// model_dir needs the "
            "google-cloud-storage package for its lease: pip install google-cloud-storage."
        ) from None
    return storage.Client()


class GcsStore:
    """The lease file as a GCS object; versions are object generations (conditional requests)."""

    def __init__(self, path: str, client=None):
        from google.api_core import exceptions

        self._exceptions = exceptions
        bucket, _, name = path[len("gs://") :].partition("/")
        self._blob = (client or _storage_client(path)).bucket(bucket).blob(name)

    def _write(self, data: bytes, generation: int) -> int:
        try:
            self._blob.upload_from_string(data, if_generation_match=generation)
        except self._exceptions.PreconditionFailed:
            raise Conflict() from None
        return self._blob.generation

    def create(self, data: bytes) -> int:
        return self._write(data, 0)  # generation 0: only if no such object exists

    def read(self) -> tuple[bytes, int] | None:
        try:
            self._blob.reload()
            return self._blob.download_as_bytes(if_generation_match=self._blob.generation), self._blob.generation
        except (self._exceptions.NotFound, self._exceptions.PreconditionFailed):
            return None

    def replace(self, data: bytes, version: int) -> int:
        return self._write(data, version)

    def delete(self, version: int) -> None:
        try:
            self._blob.delete(if_generation_match=version)
        except (self._exceptions.PreconditionFailed, self._exceptions.NotFound):
            raise Conflict() from None


@dataclasses.dataclass
class Holder:
    host: str
    pid: int
    started: float
    refreshed: float

    def describe(self) -> str:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        return (
            f"a run on {self.host} (pid {self.pid}, started {started}, last seen "
            f"{max(time.time() - self.refreshed, 0):.0f} s ago)"
        )

    def is_stale(self, now: float) -> bool:
        if self.host == socket.gethostname():
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return True
            except PermissionError:
                return False
        return now - self.refreshed > STALE_AFTER


def _stop_process(model_dir: str) -> Callable[[], None]:
    def stop() -> None:
        os.write(
            2,
            f"kbert: error: another run took over the lease of --model_dir={model_dir}; stopping now, "
            "without saving, so its checkpoints are kept.\n".encode(),
        )
        os._exit(1)

    return stop


def _store(model_dir: str):
    """Where `model_dir`'s lease lives; None for a scheme kbert cannot lease (see the module docstring)."""
    scheme, sep, rest = model_dir.partition("://")
    if not sep:
        return LocalStore(os.path.join(model_dir, LEASE_FILE))
    if scheme == "file":
        return LocalStore(os.path.join(rest, LEASE_FILE))
    if scheme == "gs":
        return GcsStore(os.path.join(model_dir, LEASE_FILE))
    return None


class Lease:
    """This process's hold on a model_dir; refreshed on a daemon thread until `release()`. Without a store (a
    scheme kbert cannot lease) it holds nothing and releasing it does nothing."""

    def __init__(self, store, version, holder: Holder, on_lost: Callable[[], None]):
        self._store, self._version, self.holder, self._on_lost = store, version, holder, on_lost
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keep, daemon=True, name="kbert-lease")
        if store is not None:
            self._thread.start()

    @classmethod
    def take(cls, model_dir: str, print_fn=print, store=None, on_lost: Callable[[], None] | None = None) -> Lease:
        """Takes the lease of `model_dir` (a stale one is taken over, saying whose it was).

        `on_lost` runs on the refresh thread if another run took the lease over (this one was thought dead): by
        default the process stops at once, saving nothing, so it cannot overwrite that run's checkpoints.

        On a scheme kbert cannot lease (neither a local path nor `gs://`) it takes none and says so.

        Raises:
          ModelDirInUseError: a live run holds it; the message names that run.
        """
        store = store or _store(model_dir)
        now = time.time()
        holder = Holder(socket.gethostname(), os.getpid(), now, now)
        if store is None:
            print_fn(
                f"No lease on --model_dir={model_dir}: kbert leases only a local path, file:// or gs://, so "
                "nothing stops a second run from writing into it at the same time; make sure none does.",
                flush=True,
            )
            return cls(None, None, holder, on_lost or _stop_process(model_dir))
        data = json.dumps(dataclasses.asdict(holder)).encode()
        try:
            return cls(store, store.create(data), holder, on_lost or _stop_process(model_dir))
        except Conflict:
            pass
        current = store.read()
        other = Holder(**json.loads(current[0])) if current else None
        if other is not None and not other.is_stale(now):
            raise ModelDirInUseError(
                f"--model_dir={model_dir} is in use by {other.describe()}; two runs would overwrite each other's "
                f"checkpoints. Stop that run or use another --model_dir (if it is dead, delete "
                f"{os.path.join(model_dir, LEASE_FILE)})."
            )
        try:
            version = store.replace(data, current[1]) if current else store.create(data)
        except Conflict:
            raise ModelDirInUseError(
                f"--model_dir={model_dir}: another run took it over just now; use another --model_dir or retry."
            ) from None
        if other is not None:
            print_fn(f"Took over the lease of --model_dir={model_dir} from {other.describe()}: it is gone.", flush=True)
        return cls(store, version, holder, on_lost or _stop_process(model_dir))

    def _keep(self) -> None:
        while not self._stop.wait(REFRESH_EVERY):
            self.holder.refreshed = time.time()
            try:
                self._version = self._store.replace(json.dumps(dataclasses.asdict(self.holder)).encode(), self._version)
            except Conflict:
                self.lost = True
                self._on_lost()
                return
            except Exception:  # a transient storage error: the next refresh tries again
                continue

    def release(self) -> None:
        if self._store is None:
            return
        self._stop.set()
        self._thread.join()
        if not self.lost:
            try:
                self._store.delete(self._version)
            except Conflict:
                pass

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()
