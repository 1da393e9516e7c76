"""One run per model_dir: the lease refuses a second live run, takes over a dead one's, and works on GCS."""

import json
import os
import socket
import subprocess
import sys
import threading
import time

import forkserver
import pytest
import tensorflow as tf
from google.api_core import exceptions
from lease_fixtures import dead_pid, take_at_once
from training_fixtures import cli_env, run_here, write_config, write_shards

from kbert import experiment
from kbert.errors import ModelDirInUseError
from kbert.experiment import load_experiment
from kbert.runtime import lease
from kbert.runtime.lease import Lease
from kbert.runtime.strategy import make_strategy


@pytest.mark.slow
def test_a_second_run_on_a_model_dir_is_refused_naming_the_first_and_an_evaluation_is_not(tmp_path):
    """One trained run for three (they were tests training the same 2-step run): a second training run is refused
    while the first holds the lease; once it is released, an empty lease file stops no run; an evaluation of the
    trained run takes no lease."""
    data = write_shards(str(tmp_path / "data"), "train", shards=1, records_per_shard=16)
    config_path = write_config(str(tmp_path / "c.yaml"), data, train={"total_steps": 2})
    config = load_experiment([config_path])
    (tmp_path / "run").mkdir()
    with Lease.take(str(tmp_path / "run"), on_lost=lambda: None):  # this process stands for the first run
        with pytest.raises(
            ModelDirInUseError,
            match=rf"--model_dir={tmp_path / 'run'} is in use by a run on .* "
            rf"\(pid {os.getpid()}, started .*Stop that run or use another",
        ):
            experiment.run(config, str(tmp_path / "run"), make_strategy("one_device"), print_fn=lambda *a, **k: 0)
        assert os.listdir(tmp_path / "run") == ["lease.json"]  # nothing else written
    assert not (tmp_path / "run" / "lease.json").exists()  # released
    # An empty lease file (what an older kbert left when it crashed while creating the lease) stops no run.
    (tmp_path / "run" / "lease.json").write_bytes(b"")
    run = tmp_path / "run"
    printed = run_here(config_path, run)  # kbert-pretrain's run, in this process: it raises nothing
    assert f"Took over the lease of --model_dir={run}: {run / 'lease.json'} could not be read (empty)" in printed
    assert json.loads((run / "summary.json").read_text())["global_step"] == 2 and not (run / "lease.json").exists()
    # An evaluation is no second run: it takes no lease, so it runs beside a run still training there, and leaves
    # that trainer's summary as it was (it writes eval_summary.json).
    trained = (run / "summary.json").read_text()
    config.override({"data": {"eval_files": config.data.train_files}})
    with Lease.take(str(run), on_lost=lambda: None):  # a run still training there
        experiment.run(config, str(run), make_strategy("one_device"), mode="eval", print_fn=lambda *a, **k: 0)
    assert (run / "summary.json").read_text() == trained
    assert json.loads((run / "eval_summary.json").read_text())["mode"] == "eval"


@pytest.mark.spawns
def test_a_dead_runs_lease_is_taken_over_and_said(tmp_path):
    first = Lease.take(str(tmp_path), on_lost=lambda: None)
    first._stop.set()  # the first run dies without releasing: its lease names a pid that is gone
    record = json.loads((tmp_path / "lease.json").read_text())
    (tmp_path / "lease.json").write_text(json.dumps(dict(record, pid=dead_pid())))
    lines = []
    second = Lease.take(str(tmp_path), print_fn=lambda *a, **k: lines.append(a[0]), on_lost=lambda: None)
    assert lines and lines[0].startswith(f"Took over the lease of --model_dir={tmp_path} from a run on")
    assert json.loads((tmp_path / "lease.json").read_text())["pid"] == os.getpid()
    second.release()


def test_a_lease_taken_over_while_held_is_noticed_at_the_next_refresh(tmp_path, monkeypatch):
    monkeypatch.setattr(lease, "REFRESH_EVERY", 0.05)
    lost = []
    held = Lease.take(str(tmp_path), on_lost=lambda: lost.append(True))
    (tmp_path / "lease.json").write_text(json.dumps({"host": "elsewhere", "pid": 1, "started": 0, "refreshed": 0}))
    held._thread.join(timeout=5)
    assert lost == [True] and held.lost
    held.release()
    assert json.loads((tmp_path / "lease.json").read_text())["host"] == "elsewhere"  # the other run's, untouched


class _FakeBlob:
    """google.cloud.storage.Blob's generation preconditions, in memory."""

    def __init__(self, bucket, name):
        self.bucket, self.name, self.generation = bucket, name, None

    def upload_from_string(self, data, if_generation_match):
        current = self.bucket.objects.get(self.name)
        if (current[1] if current else 0) != if_generation_match:
            raise exceptions.PreconditionFailed("generation mismatch")
        self.bucket.generation += 1
        self.bucket.objects[self.name] = (data, self.bucket.generation)
        self.generation = self.bucket.generation

    def reload(self):
        if self.name not in self.bucket.objects:
            raise exceptions.NotFound("no such object")
        self.generation = self.bucket.objects[self.name][1]

    def download_as_bytes(self, if_generation_match):
        data, generation = self.bucket.objects[self.name]
        if generation != if_generation_match:
            raise exceptions.PreconditionFailed("changed")
        return data

    def delete(self, if_generation_match):
        current = self.bucket.objects.get(self.name)
        if current is None:
            raise exceptions.NotFound("no such object")
        if current[1] != if_generation_match:
            raise exceptions.PreconditionFailed("generation mismatch")
        del self.bucket.objects[self.name]


class _FakeBucket:
    def __init__(self):
        self.objects, self.generation = {}, 0

    def blob(self, name):
        return _FakeBlob(self, name)


class _FakeClient:
    def __init__(self):
        self.buckets = {}

    def bucket(self, name):
        return self.buckets.setdefault(name, _FakeBucket())


def test_gcs_leases_use_generation_preconditions(monkeypatch):
    monkeypatch.setattr(lease, "REFRESH_EVERY", 3600.0)
    client = _FakeClient()
    store = lambda: lease.GcsStore("gs://bucket/run/lease.json", client=client)  # noqa: E731
    first = Lease.take("gs://bucket/run", store=store(), on_lost=lambda: None)
    assert list(client.buckets["bucket"].objects) == ["run/lease.json"]
    with pytest.raises(ModelDirInUseError, match=r"--model_dir=gs://bucket/run is in use by a run on"):
        Lease.take("gs://bucket/run", store=store(), on_lost=lambda: None)
    stale = store()
    with pytest.raises(lease.Conflict):  # a write from an old generation never lands
        stale.replace(b"{}", version=0)
    first.release()
    assert client.buckets["bucket"].objects == {}
    Lease.take("gs://bucket/run", store=store(), on_lost=lambda: None).release()


def test_a_model_dir_on_another_scheme_gets_no_lease_and_says_so(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # "ram://run/lease.json" read as a local path would land here, under "ram:"
    lines = []
    with Lease.take("ram://run", print_fn=lambda *a, **k: lines.append(a[0]), on_lost=lambda: None) as held:
        assert lines == [
            "No lease on --model_dir=ram://run: kbert leases only a local path, file:// or gs://, so "
            "nothing stops a second run from writing into it at the same time; make sure none does."
        ]
        assert not held._thread.is_alive()
        Lease.take("ram://run", print_fn=lambda *a, **k: lines.append(a[0]), on_lost=lambda: None).release()
    assert len(lines) == 2 and os.listdir(tmp_path) == [] and not tf.io.gfile.exists("ram://run/lease.json")


def test_a_file_url_model_dir_is_leased_on_its_disk(tmp_path):
    with Lease.take(f"file://{tmp_path}", on_lost=lambda: None):
        assert json.loads((tmp_path / "lease.json").read_text())["pid"] == os.getpid()
        with pytest.raises(ModelDirInUseError, match=rf"--model_dir={tmp_path} is in use by a run on"):
            Lease.take(str(tmp_path), on_lost=lambda: None)  # the same folder, spelled as a path
    assert not (tmp_path / "lease.json").exists()


def _into(lines: list):
    return lambda *a, **k: lines.append(a[0])


def _tiny_run(tmp_path, **train):
    data = write_shards(str(tmp_path / "data"), "train", shards=1, records_per_shard=16)
    return write_config(str(tmp_path / "c.yaml"), data, train={"total_steps": 2, **train})


def _write_lease(path, **fields):
    now = time.time()
    record = dict(lease.Holder.this_process().__dict__, started=now - 60, refreshed=now - 10)
    path.write_text(json.dumps(dict(record, **fields)))


def test_a_lease_with_this_processs_pid_and_another_start_is_this_runs_earlier_life_taken_over_at_once(tmp_path):
    # A container restarted after kill -9 keeps its hostname and often its PID (PID 1): the lease its earlier life
    # left, refreshed 10 s ago, names this very PID with another process start.
    mine = lease.process_start(os.getpid())
    lines = []
    # A lease written before the process start was recorded names no start: with this PID it is an earlier life too.
    for process_start in (mine - 1, None):
        _write_lease(tmp_path / "lease.json", process_start=process_start)
        Lease.take(str(tmp_path), print_fn=_into(lines), on_lost=lambda: None).release()
        assert len(lines) == 1 and lines[0].startswith(f"Took over the lease of --model_dir={tmp_path} from a run on ")
        assert lines.pop().endswith("it is this run's earlier life (the same pid, another process start).")


@pytest.mark.spawns
def test_the_process_start_and_boot_tell_a_live_holder_from_a_reused_pid(tmp_path, monkeypatch):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = lease.process_start(child.pid)
        assert started is not None and started >= lease.process_start(os.getpid())
        _write_lease(tmp_path / "lease.json", pid=child.pid, process_start=started)
        with pytest.raises(ModelDirInUseError, match=rf"is in use by a run on .* \(pid {child.pid}, "):
            Lease.take(str(tmp_path), on_lost=lambda: None)
        for stale, why in [
            ({"process_start": started + 1}, "its process is gone (another process has its pid now)"),
            ({"boot_id": "another-boot"}, "the host has restarted since"),
        ]:
            _write_lease(tmp_path / "lease.json", **{"pid": child.pid, "process_start": started, **stale})
            lines = []
            Lease.take(str(tmp_path), print_fn=_into(lines), on_lost=lambda: None).release()
            assert len(lines) == 1 and lines[0].startswith(
                f"Took over the lease of --model_dir={tmp_path} from a run on {socket.gethostname()} (pid {child.pid}, "
            )
            assert lines[0].endswith(f" s ago): {why}.")
    finally:
        child.kill()
        child.wait()


def test_a_holder_whose_pid_is_another_users_is_stale_once_unrefreshed_for_stale_after(tmp_path, monkeypatch):
    def kill(pid, signal):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "kill", kill)
    monkeypatch.setattr(lease, "process_start", lambda pid: None)  # /proc says nothing of it either
    _write_lease(tmp_path / "lease.json", pid=4242, process_start=None, boot_id=None)
    with pytest.raises(ModelDirInUseError, match=r"\(pid 4242, .*last seen 10 s ago\)"):
        Lease.take(str(tmp_path), on_lost=lambda: None)  # refreshed 10 s ago: alive as far as anyone can tell
    _write_lease(tmp_path / "lease.json", pid=4242, process_start=None, boot_id=None, refreshed=time.time() - 3600)
    lines = []
    Lease.take(str(tmp_path), print_fn=_into(lines), on_lost=lambda: None).release()
    assert len(lines) == 1 and lines[0].endswith("last seen 3600 s ago): it went unrefreshed for 3600 s.")


@pytest.mark.parametrize("content", [b"", b'{"host": "x", "pi', b"[]", b'{"host": "x"}'])
def test_an_unreadable_lease_file_is_taken_over_in_one_line(tmp_path, content):
    (tmp_path / "lease.json").write_bytes(content)
    lines = []
    with Lease.take(str(tmp_path), print_fn=_into(lines), on_lost=lambda: None):
        assert json.loads((tmp_path / "lease.json").read_text())["pid"] == os.getpid()
    why = "empty" if not content else "not a kbert lease: "
    assert len(lines) == 1
    assert lines[0].startswith(
        f"Took over the lease of --model_dir={tmp_path}: {tmp_path / 'lease.json'} could not be read ({why}"
    )


def test_the_lease_is_created_whole_and_one_of_many_local_takers_holds_it(tmp_path, monkeypatch):
    held, refused = take_at_once(str(tmp_path))
    assert len(held) == 1 and len(refused) == 7 and os.listdir(tmp_path) == ["lease.json"]
    held[0].release()

    def no_links(src, dst):
        raise PermissionError(1, "Operation not permitted")  # gcsfuse has no hard links

    monkeypatch.setattr(os, "link", no_links)
    with Lease.take(str(tmp_path), on_lost=lambda: None):
        assert os.listdir(tmp_path) == ["lease.json"]
        with pytest.raises(ModelDirInUseError):
            Lease.take(str(tmp_path), on_lost=lambda: None)
    assert os.listdir(tmp_path) == []


def test_another_hosts_lease_is_judged_by_its_version_on_this_hosts_clock(tmp_path, monkeypatch):
    monkeypatch.setattr(lease, "REFRESH_EVERY", 0.3)
    monkeypatch.setattr(lease, "STALE_AFTER", 1.5)
    # Its clock is an hour behind ours: "refreshed an hour ago" says nothing about whether it is alive.
    _write_lease(tmp_path / "lease.json", host="elsewhere", pid=7, refreshed=time.time() - 3600)
    store = lease.LocalStore(str(tmp_path / "lease.json"))
    version = store.read()[1]
    refreshed = version.replace(b'"pid": 7', b'"pid": 7 ')  # its refresh thread rewrites it
    refreshing = threading.Timer(0.5, lambda: store.replace(refreshed, version))
    refreshing.start()
    lines = []
    with pytest.raises(ModelDirInUseError, match=r"is in use by a run on elsewhere \(pid 7, "):
        Lease.take(str(tmp_path), print_fn=_into(lines), on_lost=lambda: None)
    refreshing.join()
    assert len(lines) == 1 and lines[0].startswith(f"--model_dir={tmp_path} is leased by a run on elsewhere (pid 7, ")
    assert lines[0].endswith(
        " s ago); watching it for up to 2 s to tell whether that run is alive (a live one refreshes it every 0 s)."
    )
    lines.clear()
    Lease.take(str(tmp_path), print_fn=_into(lines), on_lost=lambda: None).release()  # now nobody refreshes it
    assert len(lines) == 2 and lines[1].endswith("it went unchanged for 2 s, watched from here.")


class _FailingStore(lease.LocalStore):
    """A disk whose writes start failing (a full or unmounted volume)."""

    failing = False

    def replace(self, data, version):
        if self.failing:
            raise OSError(28, "No space left on device")
        return super().replace(data, version)


def test_refreshes_that_keep_failing_are_said_once_then_stop_the_run(tmp_path, monkeypatch):
    monkeypatch.setattr(lease, "REFRESH_EVERY", 0.05)
    monkeypatch.setattr(lease, "GIVE_UP_AFTER", 0.5)
    store, lines, expired = _FailingStore(str(tmp_path / "lease.json")), [], []
    held = Lease.take(str(tmp_path), print_fn=_into(lines), store=store, on_expired=expired.append)
    time.sleep(0.2)
    assert lines == [] and expired == []
    store.failing = True
    held._thread.join(timeout=10)
    assert lines == [
        f"Could not refresh the lease {tmp_path / 'lease.json'} (OSError: [Errno 28] No space left on device); "
        "retrying every 0 s, and stopping if none succeeds for 0 s."
    ]
    assert len(expired) == 1 and expired[0].startswith(f"the lease {tmp_path / 'lease.json'} could not be refreshed")
    assert "(last error: OSError: [Errno 28] No space left on device); stopping now, writing nothing more" in expired[0]
    held.release()


_FAILING_RUN = r"""
import glob, os, sys
from kbert.runtime import lease
lease.REFRESH_EVERY, lease.GIVE_UP_AFTER = 0.1, 1.0
replace = lease.LocalStore.replace
def failing_once_checkpointed(self, data, version):
    if glob.glob(os.path.join(os.path.dirname(self.path), "checkpoints", "ckpt-*.index")):
        raise OSError(5, "Input/output error")
    return replace(self, data, version)
lease.LocalStore.replace = failing_once_checkpointed
sys.argv = ["kbert-pretrain", "--config_file=" + sys.argv[1], "--model_dir=" + sys.argv[2], "--device=cpu"]
from kbert.run_pretraining import run
run()
"""


@pytest.mark.spawns
def test_a_run_whose_lease_cannot_be_refreshed_stops_with_its_checkpoints_intact(tmp_path):
    config, run = _tiny_run(tmp_path, total_steps=100000, steps_per_loop=2, checkpoint_interval=2), tmp_path / "run"
    result = forkserver.run(
        [sys.executable, "-c", _FAILING_RUN, config, str(run)],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == lease.EXPIRED_EXIT_CODE, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"kbert: error: the lease {run / 'lease.json'} could not be refreshed for ")
    assert "(last error: OSError: [Errno 5] Input/output error)" in last and "Traceback" not in result.stderr
    assert "Could not refresh the lease" in result.stdout
    saved = tf.train.latest_checkpoint(str(run / "checkpoints"))
    assert saved is not None
    reader = tf.train.load_checkpoint(saved)  # the newest checkpoint reads whole
    assert reader.get_variable_to_shape_map()
    # The same command, once the disk answers, resumes from it.
    step = int(saved.rsplit("-", 1)[1])
    config = _tiny_run(tmp_path, total_steps=step + 2, steps_per_loop=2, checkpoint_interval=2)
    summary = experiment.run(
        load_experiment([config]), str(run), make_strategy("one_device"), print_fn=lambda *a, **k: 0
    )
    assert summary["global_step"] == step + 2 and summary["restored_from"].endswith(f"ckpt-{step}")
