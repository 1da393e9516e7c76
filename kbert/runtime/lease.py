"""One run per model_dir: a lease file that a second run on the same directory finds and refuses to share.

The lease (`model_dir/lease.json`: host, pid, the process's start time and the host's boot id, start time, last
refresh) is created atomically (written whole under another name, then linked into place) and kept fresh by a
daemon thread; every write after that is conditional on the version this process wrote last (an exclusive lock
around read-compare-write on a local disk, a generation precondition on GCS), so two processes can never both
believe they hold it. One lease per job: the chief takes it for all its workers.

Whose lease is stale (`Lease.take` takes a stale one over, in one line that says why):
- on this host, a holder is alive only while its PID runs with the recorded start time (`/proc/PID/stat`) since
  the recorded boot; a holder with this very process's PID and another start time is this run's earlier life (a
  container restarted after kill -9 or an OOM kill keeps its hostname and often its PID), taken over at once;
- on this host, a lease unrefreshed for `STALE_AFTER` seconds, whatever its process;
- on another host, a lease whose version did not change for `STALE_AFTER` seconds on this host's monotonic clock
  (the taker watches it; two hosts' clocks are never compared);
- a `lease.json` that cannot be read (empty, cut short: what a run of an older kbert leaves when it crashes while
  creating it).

A refresh that fails is said once; if none succeeds for `GIVE_UP_AFTER` seconds (less than `STALE_AFTER`, so
before anyone may take the lease over) the process stops at once, writing nothing more, with `EXPIRED_EXIT_CODE`.

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
GIVE_UP_AFTER = 3 * REFRESH_EVERY
# The exit status of a run that stopped because its lease could not be refreshed (EX_TEMPFAIL: rerun the same
# command once the model_dir's storage answers again).
EXPIRED_EXIT_CODE = 75


class Conflict(Exception):
    """The lease file is not at the version the caller expected (someone else wrote or removed it)."""


class LocalStore:
    """The lease file on a local or mounted disk; versions are the file's contents, compared under a lock on
    the folder."""

    def __init__(self, path: str):
        self.path = path

    def create(self, data: bytes) -> bytes:
        # Written whole under a name of its own, then linked into place: a reader never sees an empty lease.
        tmp = f"{self.path}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        try:
            os.link(tmp, self.path)
        except FileExistsError:
            raise Conflict() from None
        except OSError:  # a file system without hard links (gcsfuse, some FUSE mounts): create exclusively
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                raise Conflict() from None
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        finally:
            os.remove(tmp)
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
        self.path = path
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
        for _ in range(5):  # a write between the metadata and the data: read the new generation
            # A blob of its own: one that knows a generation reloads that generation, never a newer one.
            blob = self._blob.bucket.blob(self._blob.name)
            try:
                blob.reload()
            except self._exceptions.NotFound:
                return None
            try:
                return blob.download_as_bytes(if_generation_match=blob.generation), blob.generation
            except (self._exceptions.NotFound, self._exceptions.PreconditionFailed):
                continue  # that generation was replaced
        return None

    def replace(self, data: bytes, version: int) -> int:
        return self._write(data, version)

    def delete(self, version: int) -> None:
        try:
            self._blob.delete(if_generation_match=version)
        except (self._exceptions.PreconditionFailed, self._exceptions.NotFound):
            raise Conflict() from None


def _read_text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def process_start(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot (`/proc/PID/stat`, field 22); None where there is no
    such process or no /proc."""
    stat = _read_text(f"/proc/{pid}/stat")
    if stat is None:
        return None
    # The command name (field 2) is in parentheses and may hold spaces; fields 3 onwards follow the last ")".
    return int(stat[stat.rindex(")") + 2 :].split()[19])


def boot_id() -> str | None:
    """This boot of this host (Linux); None where the kernel does not say."""
    text = _read_text("/proc/sys/kernel/random/boot_id")
    return text.strip() if text else None


@dataclasses.dataclass
class Holder:
    """Who holds a lease: the process (host, pid, its start time in ticks since the host's boot, that boot) and
    its wall-clock start and last refresh. Leases written before the process and boot were recorded read as
    None there."""

    host: str
    pid: int
    started: float
    refreshed: float
    process_start: int | None = None
    boot_id: str | None = None

    @classmethod
    def this_process(cls) -> Holder:
        now = time.time()
        return cls(socket.gethostname(), os.getpid(), now, now, process_start(os.getpid()), boot_id())

    @classmethod
    def parse(cls, data: bytes) -> Holder:
        """The holder a lease file names; ValueError where it names none (empty, cut short, not kbert's)."""
        try:
            record = json.loads(data)
            fields = {f.name for f in dataclasses.fields(cls)}
            holder = cls(**{k: v for k, v in record.items() if k in fields})
            holder.describe()  # the types a lease's reader relies on
            return holder
        except (ValueError, TypeError, AttributeError, OverflowError) as e:
            raise ValueError("empty" if not data.strip() else f"not a kbert lease: {e}") from None

    def to_json(self) -> bytes:
        return json.dumps(dataclasses.asdict(self)).encode()

    def describe(self) -> str:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        return (
            f"a run on {self.host} (pid {int(self.pid)}, started {started}, last seen "
            f"{max(time.time() - self.refreshed, 0):.0f} s ago)"
        )

    def why_stale_here(self, now: float) -> str | None:
        """Why a holder on this host is stale, or None while it is alive."""
        if now - self.refreshed > STALE_AFTER:
            return f"it went unrefreshed for {now - self.refreshed:.0f} s"
        if self.boot_id is not None and self.boot_id != boot_id():
            return "the host has restarted since"
        if self.pid == os.getpid():
            if self.process_start != process_start(self.pid):
                return "it is this run's earlier life (the same pid, another process start)"
            return None  # this very process holds it
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return "its process is gone"
        except PermissionError:
            pass  # a process of another user holds the pid: only its start time can tell
        started = process_start(self.pid)
        if self.process_start is not None and started is not None and started != self.process_start:
            return "its process is gone (another process has its pid now)"
        return None


def _stop_process(model_dir: str) -> Callable[[], None]:
    def stop() -> None:
        os.write(
            2,
            f"kbert: error: another run took over the lease of --model_dir={model_dir}; stopping now, "
            "without saving, so its checkpoints are kept.\n".encode(),
        )
        os._exit(1)

    return stop


def _expire_process(message: str) -> None:
    os.write(2, f"kbert: error: {message}\n".encode())
    os._exit(EXPIRED_EXIT_CODE)


def _unchanged_for(store, version, seconds: float) -> tuple[bytes, object] | None:
    """Watches a lease at `version` for `seconds` on this host's monotonic clock, returning early once it changes;
    returns what it holds then (data and version), None if it was removed."""
    deadline = time.monotonic() + seconds
    current = (b"", version)
    while current is not None and current[1] == version and time.monotonic() < deadline:
        time.sleep(min(REFRESH_EVERY / 6, max(deadline - time.monotonic(), 0)))
        current = store.read()
    return current


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

    def __init__(
        self,
        store,
        version,
        holder: Holder,
        on_lost: Callable[[], None],
        on_expired: Callable[[str], None] = _expire_process,
        print_fn: Callable[..., None] = print,
    ):
        self._store, self._version, self.holder = store, version, holder
        self._on_lost, self._on_expired, self._print = on_lost, on_expired, print_fn
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keep, daemon=True, name="kbert-lease")
        if store is not None:
            self._thread.start()

    @classmethod
    def take(
        cls,
        model_dir: str,
        print_fn: Callable[..., None] = print,
        store=None,
        on_lost: Callable[[], None] | None = None,
        on_expired: Callable[[str], None] = _expire_process,
    ) -> Lease:
        """Takes the lease of `model_dir`; a stale one (see the module docstring) is taken over in one line that
        says whose it was and why. A lease held on another host is watched for up to `STALE_AFTER` seconds first.

        `on_lost` runs on the refresh thread if another run took the lease over (this one was thought dead): by
        default the process stops at once, saving nothing, so it cannot overwrite that run's checkpoints.
        `on_expired(message)` runs there when no refresh has succeeded for `GIVE_UP_AFTER` seconds: by default
        the process prints the message and exits with `EXPIRED_EXIT_CODE`, saving nothing more.

        On a scheme kbert cannot lease (neither a local path nor `gs://`) it takes none and says so.

        Raises:
          ModelDirInUseError: a live run holds it; the message names that run.
        """
        store = store or _store(model_dir)
        holder = Holder.this_process()
        keep = dict(on_lost=on_lost or _stop_process(model_dir), on_expired=on_expired, print_fn=print_fn)
        if store is None:
            print_fn(
                f"No lease on --model_dir={model_dir}: kbert leases only a local path, file:// or gs://, so "
                "nothing stops a second run from writing into it at the same time; make sure none does.",
                flush=True,
            )
            return cls(None, None, holder, **keep)
        try:
            return cls(store, store.create(holder.to_json()), holder, **keep)
        except Conflict:
            pass
        current = store.read()
        taken = _why_stale(model_dir, store, current, print_fn) if current else None
        try:
            version = store.replace(holder.to_json(), current[1]) if taken else store.create(holder.to_json())
        except Conflict:
            raise ModelDirInUseError(
                f"--model_dir={model_dir}: another run took it over just now; use another --model_dir or retry."
            ) from None
        if taken:
            print_fn(f"Took over the lease of --model_dir={model_dir}{taken}.", flush=True)
        return cls(store, version, holder, **keep)

    def _keep(self) -> None:
        last_refreshed, failing = time.monotonic(), False
        while not self._stop.wait(REFRESH_EVERY):
            self.holder.refreshed = time.time()
            try:
                self._version = self._store.replace(self.holder.to_json(), self._version)
                last_refreshed, failing = time.monotonic(), False
            except Conflict:
                self.lost = True
                self._on_lost()
                return
            except Exception as error:  # a storage error: said once, retried until GIVE_UP_AFTER
                said = f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0][:200]}"
                silent = time.monotonic() - last_refreshed
                if silent >= GIVE_UP_AFTER:
                    self.lost = True
                    self._on_expired(
                        f"the lease {self._store.path} could not be refreshed for {silent:.0f} s (last error: "
                        f"{said}); stopping now, writing nothing more, before another run may take the "
                        "model_dir over. Rerun the same command once its storage answers; it resumes from the "
                        "newest checkpoint."
                    )
                    return
                if not failing:
                    self._print(
                        f"Could not refresh the lease {self._store.path} ({said}); retrying every "
                        f"{REFRESH_EVERY:.0f} s, and stopping if none succeeds for {GIVE_UP_AFTER:.0f} s.",
                        flush=True,
                    )
                failing = True

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


def _why_stale(model_dir: str, store, current: tuple[bytes, object], print_fn: Callable[..., None]) -> str | None:
    """Why the lease `current` (its data and version) may be taken over, as the end of a sentence (" from
    <holder>: <why>"); None if it was removed meanwhile. Raises ModelDirInUseError while its holder is alive."""
    try:
        other = Holder.parse(current[0])
    except ValueError as e:
        return f": {store.path} could not be read ({e}), as a run that crashed while creating it may leave it"
    if other.host == socket.gethostname():
        why = other.why_stale_here(time.time())
    else:
        print_fn(
            f"--model_dir={model_dir} is leased by {other.describe()}; watching it for up to {STALE_AFTER:.0f} s "
            f"to tell whether that run is alive (a live one refreshes it every {REFRESH_EVERY:.0f} s).",
            flush=True,
        )
        watched = _unchanged_for(store, current[1], STALE_AFTER)
        if watched is None:
            return None
        why = None if watched[1] != current[1] else f"it went unchanged for {STALE_AFTER:.0f} s, watched from here"
    if why is None:
        raise ModelDirInUseError(
            f"--model_dir={model_dir} is in use by {other.describe()}; two runs would overwrite each other's "
            f"checkpoints. Stop that run or use another --model_dir (if it is dead, delete "
            f"{os.path.join(model_dir, LEASE_FILE)})."
        )
    return f" from {other.describe()}: {why}"
