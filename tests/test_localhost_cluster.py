"""kbert.bench.localhost_cluster: every worker's TF_CONFIG, and workers launched and waited for together."""

import json
import sys

import pytest

from kbert.bench import localhost_cluster


@pytest.mark.spawns
def test_every_worker_gets_the_same_cluster_and_its_own_index():
    ports = localhost_cluster.free_ports(3)
    assert len(set(ports)) == 3
    configs = [json.loads(c) for c in localhost_cluster.tf_configs(ports)]
    assert [c["task"] for c in configs] == [{"type": "worker", "index": i} for i in range(3)]
    assert all(c["cluster"] == {"worker": [f"localhost:{p}" for p in ports]} for c in configs)


@pytest.mark.spawns
def test_launch_gives_each_worker_its_tf_config_and_log(tmp_path):
    logs = [str(tmp_path / f"w{i}.log") for i in range(3)]
    command = [sys.executable, "-c", "import os; print(os.environ.get('TF_CONFIG', 'none'))"]
    workers = localhost_cluster.launch(command, ["one", "two", ""], {"TF_CONFIG": "inherited"}, logs)
    assert localhost_cluster.wait_all(workers, poll_seconds=0.01) == [0, 0, 0]
    assert [open(log).read().strip() for log in logs] == ["one", "two", "inherited"]


@pytest.mark.spawns
def test_a_failed_worker_stops_the_others(tmp_path):
    logs = [str(tmp_path / f"w{i}.log") for i in range(2)]
    command = [
        sys.executable,
        "-c",
        "import os, sys, time; os.environ['TF_CONFIG'] == 'fail' and sys.exit(3); time.sleep(60)",
    ]
    workers = localhost_cluster.launch(command, ["fail", "wait"], {}, logs)
    codes = localhost_cluster.wait_all(workers, poll_seconds=0.01)
    assert codes[0] == 3 and codes[1] == -15  # SIGTERM, long before its minute of sleep
