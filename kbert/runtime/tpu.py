"""TPUStrategy on a single-host TPU VM or a multi-host pod slice, launched the way TensorFlow 2.20 runs them.

TF 2.20's TPUStrategy has a single controller: one Python process builds the program and drives every chip.

* `--tpu=local` (the default): the process runs on a single-host TPU VM and opens the host's chips itself.
* `--tpu=NAME` (the Cloud TPU's name, resolved through the Cloud TPU API) or `--tpu=grpc://IP:8470,grpc://IP:8470`:
  the process runs on worker 0 of a pod slice and drives the TPU server of every host over gRPC. It must leave
  worker 0's chips to that host's server, so `TPU_LOAD_LIBRARY=0` is set before TensorFlow loads
  (`kbert.cli.tpu_launch`, which `kbert-pretrain` calls first).

Invariant: `tpu_strategy` refuses, before it touches a TPU, every launch the host shows to be wrong: any run on a
worker other than 0, and `--tpu=local` on a host of a multi-host slice. Run on every host, either would be N
independent jobs writing one model_dir, or a hang.

Example:

```python
strategy = tpu_strategy("my-v4-32")   # on worker 0 of the slice, with TPU_LOAD_LIBRARY=0
```
"""

from __future__ import annotations

import dataclasses
import os
import urllib.request
from collections.abc import Callable, Mapping

import tensorflow as tf

from kbert.errors import StrategyError, first_line
from kbert.runtime import devices

_METADATA_ATTRIBUTES = "http://metadata.google.internal/computeMetadata/v1/instance/attributes/"
_POD_DOCS = "docs/tpu.md, 'On a TPU pod slice'"


@dataclasses.dataclass(frozen=True)
class SliceHost:
    """Where this process runs in a TPU slice: its worker index and the slice's host count (None: not known)."""

    worker: int | None = None
    hosts: int | None = None
    accelerator_type: str = ""


def _count(comma_list: str) -> int | None:
    return len(comma_list.split(",")) if comma_list else None


def _index(text: str) -> int | None:
    return int(text) if text.strip().isdigit() else None


def host_from_env(env: Mapping[str, str]) -> SliceHost | None:
    """The slice position GKE gives TPU pods (TPU_WORKER_ID, TPU_WORKER_HOSTNAMES), or None where they are unset.
    A plain TPU VM shell has none of them: its position is in the metadata server."""
    if "TPU_WORKER_ID" not in env and "TPU_WORKER_HOSTNAMES" not in env:
        return None
    return SliceHost(
        _index(env.get("TPU_WORKER_ID", "")),
        _count(env.get("TPU_WORKER_HOSTNAMES", "")),
        env.get("TPU_ACCELERATOR_TYPE", ""),
    )


def _metadata_attribute(key: str) -> str:
    """A TPU VM's metadata attribute, "" when unreachable (the check then has nothing to refuse on)."""
    request = urllib.request.Request(_METADATA_ATTRIBUTES + key, headers={"Metadata-Flavor": "Google"})
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            return response.read().decode().strip()
    except (OSError, ValueError):
        return ""


def host_from_metadata(fetch: Callable[[str], str] = _metadata_attribute) -> SliceHost:
    """A TPU VM's slice position: `agent-worker-number`, and one `worker-network-endpoints` entry per host."""
    return SliceHost(
        _index(fetch("agent-worker-number")), _count(fetch("worker-network-endpoints")), fetch("accelerator-type")
    )


def this_host(env: Mapping[str, str] | None = None) -> SliceHost:
    """This process's slice position from GKE's variables, else from the metadata server on a host with TPU chips
    (other hosts are not asked, so a CPU or GPU machine makes no network call); unknown otherwise."""
    env = os.environ if env is None else env
    found = host_from_env(env)
    if found is not None:
        return found
    return host_from_metadata() if devices.find_accelerators(env=env).kind == "TPU" else SliceHost()


def _slice(host: SliceHost) -> str:
    return f"a {host.hosts}-host {host.accelerator_type or 'TPU'} slice"


def check_launch(tpu: str, host: SliceHost) -> None:
    """Refuses a launch TF 2.20 cannot run as one job: any worker but 0, `local` on a multi-host slice.

    Raises:
      StrategyError: one line naming --tpu and the launch that works.
    """
    if host.worker not in (None, 0):
        raise StrategyError(
            f"--tpu={tpu}: this host is worker {host.worker} of {_slice(host)}; TF 2.20 drives the whole slice from "
            f"one process on worker 0: start kbert-pretrain there only (gcloud compute tpus tpu-vm ssh NAME "
            f"--worker=0) with --tpu=NAME ({_POD_DOCS})."
        )
    if tpu == "local" and (host.hosts or 1) > 1:
        raise StrategyError(
            f"--tpu=local on {_slice(host)}: 'local' drives this host's chips only; on worker 0 pass --tpu=NAME, "
            f"the slice's name, to drive every host ({_POD_DOCS})."
        )


def _connect(tpu: str) -> tuple[tf.distribute.cluster_resolver.TPUClusterResolver, tf.tpu.experimental.Topology]:
    """Model Garden's `tpu_initialize`: a remote TPU is connected as a cluster first, the local one is not."""
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        if tpu != "local":
            tf.config.experimental_connect_to_cluster(resolver)
        return resolver, tf.tpu.experimental.initialize_tpu_system(resolver)
    except Exception as e:  # TF raises ValueError/NotFoundError/InvalidArgumentError depending on what is missing.
        raise StrategyError(
            f"--strategy=tpu: no TPU reachable with --tpu={tpu} ({first_line(e)}). On a single-host TPU VM pass "
            "--tpu=local; on worker 0 of a pod slice pass --tpu=NAME with the TPU servers running on every host; "
            "elsewhere use --strategy=auto, mirrored or one_device."
        ) from None


def needs_explicit_assignment(hardware_feature) -> bool:
    """Whether Model Garden gives this TPU an explicit device assignment: it reports embedding feature V2 (v5p's
    SparseCore generation). `hardware_feature` is the resolver's TPUHardwareFeature proto, None before init."""
    if hardware_feature is None:
        return False
    feature = tf.tpu.experimental.HardwareFeature(hardware_feature).embedding_feature
    return feature == tf.tpu.experimental.HardwareFeature.EmbeddingFeature.V2


def device_assignment(
    hardware_feature, topology: tf.tpu.experimental.Topology
) -> tf.tpu.experimental.DeviceAssignment | None:
    """Model Garden's v5p work-around: one replica per core over every core of the topology, ordered by
    `DeviceAssignment.build`; None (TPUStrategy's default assignment) on TPUs that do not need it."""
    if not needs_explicit_assignment(hardware_feature):
        return None
    cores = topology.num_tasks * topology.num_tpus_per_task  # the count Model Garden reads as metadata.num_cores
    return tf.tpu.experimental.DeviceAssignment.build(topology, num_replicas=cores)


def tpu_strategy(tpu: str, host: SliceHost | None = None) -> tf.distribute.TPUStrategy:
    """A TPUStrategy over `tpu` (`local` when empty) after `check_launch`; `host` defaults to `this_host()`.

    Raises:
      StrategyError: a wrong launch on a pod slice, or no TPU reachable.
    """
    name = tpu or "local"
    check_launch(name, this_host() if host is None else host)
    resolver, topology = _connect(name)
    return tf.distribute.TPUStrategy(
        resolver, experimental_device_assignment=device_assignment(resolver.tpu_hardware_feature, topology)
    )
