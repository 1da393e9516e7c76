"""The TPU launch without a TPU: flag handling, the resolver calls, the pod-slice refusals, TPU_LOAD_LIBRARY, and
Model Garden's v5p device assignment on a hand-made topology."""

import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf.tpu import topology_pb2

from kbert.cli import tpu_launch
from kbert.errors import StrategyError
from kbert.runtime import strategy as strategy_module
from kbert.runtime import tpu
from kbert.runtime.tpu import SliceHost

V5P_8 = tf.tpu.experimental.Topology(  # 2x2 chips, one TensorCore device per chip (v5p's megacore), one host
    mesh_shape=[2, 2, 1, 1], device_coordinates=np.array([[[x, y, 0, 0] for y in range(2) for x in range(2)]])
)


def _feature(kind):
    return topology_pb2.TPUHardwareFeature(embedding_feature=kind)


class _Resolver:
    def __init__(self, feature=None):
        self.tpu_hardware_feature = feature


@pytest.fixture
def calls(monkeypatch):
    """Records the resolver, connect, initialize and TPUStrategy calls that `tpu_strategy` makes."""
    made = []

    def resolver(tpu):
        made.append(("resolver", tpu))
        return _Resolver(_feature(topology_pb2.TPUHardwareFeature.V2))

    monkeypatch.setattr(tf.distribute.cluster_resolver, "TPUClusterResolver", resolver)
    monkeypatch.setattr(tf.config, "experimental_connect_to_cluster", lambda r: made.append(("connect",)))
    monkeypatch.setattr(tf.tpu.experimental, "initialize_tpu_system", lambda r: made.append(("initialize",)) or V5P_8)
    monkeypatch.setattr(
        tf.distribute,
        "TPUStrategy",
        lambda r, experimental_device_assignment: (
            made.append(("strategy", experimental_device_assignment)) or "tpu-strategy"
        ),
    )
    monkeypatch.setattr(tpu, "this_host", lambda: SliceHost())
    return made


def test_local_is_initialized_without_connecting(calls):
    assert tpu.tpu_strategy("") == "tpu-strategy"
    assert [c[0] for c in calls] == ["resolver", "initialize", "strategy"] and calls[0] == ("resolver", "local")


def test_a_name_connects_then_initializes_with_the_v5p_assignment(calls):
    tpu.tpu_strategy("my-v5p-32")
    assert [c[0] for c in calls] == ["resolver", "connect", "initialize", "strategy"]
    assert calls[0] == ("resolver", "my-v5p-32") and calls[-1][1].num_replicas == 4


def test_auto_with_tpu_picks_the_tpu_strategy(calls):
    assert strategy_module.make_strategy("auto", tpu="grpc://10.0.0.2:8470") == "tpu-strategy"
    assert calls[0] == ("resolver", "grpc://10.0.0.2:8470")


@pytest.mark.parametrize(
    "tpu_flag, host, words",
    [
        ("local", SliceHost(0, 4, "v4-32"), ["--tpu=local", "4-host v4-32", "--tpu=NAME"]),
        ("local", SliceHost(2, 4, "v4-32"), ["--tpu=local", "worker 2", "--worker=0"]),
        ("my-v4-32", SliceHost(1, 4, "v4-32"), ["--tpu=my-v4-32", "worker 1", "--worker=0"]),
    ],
)
def test_a_launch_tf_cannot_run_as_one_job_is_one_line_naming_the_fix(calls, tpu_flag, host, words):
    with pytest.raises(StrategyError) as error:
        tpu.tpu_strategy(tpu_flag, host)
    message = str(error.value)
    assert "\n" not in message and all(w in message for w in words), message
    assert calls == []  # refused before any TPU call


@pytest.mark.parametrize(
    "tpu_flag, host",
    [("my-v4-32", SliceHost(0, 4, "v4-32")), ("local", SliceHost(0, 1, "v4-8")), ("local", SliceHost())],
)
def test_worker_0_with_a_name_and_local_on_one_host_are_accepted(tpu_flag, host):
    tpu.check_launch(tpu_flag, host)


def test_the_slice_position_comes_from_gke_variables_or_the_metadata_server():
    env = {"TPU_WORKER_ID": "1", "TPU_WORKER_HOSTNAMES": "a,b,c,d", "TPU_ACCELERATOR_TYPE": "v5p-32"}
    assert tpu.host_from_env(env) == SliceHost(1, 4, "v5p-32") and tpu.host_from_env({}) is None
    metadata = {
        "agent-worker-number": "0",
        "accelerator-type": "v4-16",
        "worker-network-endpoints": "unknown:unknown:10.0.0.2,unknown:unknown:10.0.0.3",
    }
    assert tpu.host_from_metadata(lambda key: metadata[key]) == SliceHost(0, 2, "v4-16")
    assert tpu.host_from_metadata(lambda key: "") == SliceHost()  # unreachable: nothing to refuse on


def test_the_v5p_assignment_is_built_only_for_embedding_feature_v2():
    assignment = tpu.device_assignment(_feature(topology_pb2.TPUHardwareFeature.V2), V5P_8)
    assert (assignment.num_replicas, assignment.num_cores_per_replica) == (4, 1)
    cores = {tuple(assignment.coordinates(replica, 0)) for replica in range(4)}
    assert cores == {tuple(c) for c in V5P_8.device_coordinates[0]}  # every core, once
    for kind in (topology_pb2.TPUHardwareFeature.V1, topology_pb2.TPUHardwareFeature.UNSUPPORTED):
        assert tpu.device_assignment(_feature(kind), V5P_8) is None
    assert tpu.device_assignment(None, V5P_8) is None


@pytest.mark.parametrize(
    "strategy, tpu_flag, environ, expected",
    [
        ("auto", "my-v4-32", {}, "0"),
        ("tpu", "grpc://10.0.0.2:8470", {}, "0"),
        ("tpu", "local", {}, None),
        ("auto", "", {}, None),
        ("mirrored", "my-v4-32", {}, None),
        ("tpu", "my-v4-32", {"TPU_LOAD_LIBRARY": "1"}, "1"),
    ],
)
def test_tpu_load_library_is_set_for_a_remote_tpu_unless_the_user_set_it(strategy, tpu_flag, environ, expected):
    line = tpu_launch.controller_environment(strategy, tpu_flag, environ)
    assert environ.get("TPU_LOAD_LIBRARY") == expected
    assert (line is not None) == (expected == "0")
    assert line is None or ("TPU_LOAD_LIBRARY=0" in line and f"--tpu={tpu_flag}" in line)


@pytest.mark.spawns
def test_the_launch_module_loads_no_tensorflow():
    code = "import sys, kbert.cli.tpu_launch, kbert.run_pretraining; print('tensorflow' in sys.modules)"
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        == "False"
    )
