"""One run per model_dir: the lease refuses a second live run, takes over a dead one's, and works on GCS."""

import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf
from google.api_core import exceptions
from training_fixtures import write_config, write_shards

from kbert import experiment
from kbert.errors import ModelDirInUseError
from kbert.experiment import load_experiment
from kbert.runtime import lease
from kbert.runtime.lease import Lease
from kbert.runtime.strategy import make_strategy


def _dead_pid():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_a_second_run_on_a_model_dir_is_refused_naming_the_first(tmp_path):
    data = write_shards(str(tmp_path / "data"), "train", shards=1, records_per_shard=16)
    config = load_experiment([write_config(str(tmp_path / "c.yaml"), data, train={"total_steps": 2})])
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
    summary = experiment.run(config, str(tmp_path / "run"), make_strategy("one_device"), print_fn=lambda *a, **k: 0)
    assert summary["global_step"] == 2 and not (tmp_path / "run" / "lease.json").exists()


def test_a_dead_runs_lease_is_taken_over_and_said(tmp_path):
    first = Lease.take(str(tmp_path), on_lost=lambda: None)
    first._stop.set()  # the first run dies without releasing: its lease names a pid that is gone
    record = json.loads((tmp_path / "lease.json").read_text())
    (tmp_path / "lease.json").write_text(json.dumps(dict(record, pid=_dead_pid())))
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
