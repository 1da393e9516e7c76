"""Builds the `tf.distribute` strategy named by `--strategy` / `--tpu`.

Example:

>>> strategy = make_strategy("one_device")
>>> strategy.num_replicas_in_sync
1
"""

from __future__ import annotations

import json
import os

import tensorflow as tf

from kbert.choices import ALL_REDUCE, STRATEGIES
from kbert.errors import StrategyError
from kbert.runtime.tpu import tpu_strategy


def _tf_config_workers() -> int:
    raw = os.environ.get("TF_CONFIG", "")
    if not raw:
        return 0
    try:
        cluster = json.loads(raw).get("cluster", {})
    except json.JSONDecodeError as e:
        raise StrategyError(f"TF_CONFIG is not valid JSON ({e}); see docs/gpu_clusters.md for an example.") from None
    return len(cluster.get("worker", [])) + len(cluster.get("chief", []))


def _local_devices() -> list[str]:
    """All local GPUs, or every logical CPU device on a CPU-only host (one unless configured otherwise)."""
    gpus = tf.config.list_logical_devices("GPU")
    return [d.name for d in (gpus or tf.config.list_logical_devices("CPU"))]


def communication_options(all_reduce: str, gpus: int) -> tf.distribute.experimental.CommunicationOptions:
    """How MultiWorkerMirroredStrategy all-reduces: NCCL between GPUs (`auto` with GPUs, or `nccl`), the ring
    over gRPC otherwise (`auto` without GPUs, or `ring`). TF's own default is the ring even on GPUs."""
    if all_reduce not in ALL_REDUCE:
        raise StrategyError(f"--all_reduce={all_reduce}: choose one of {', '.join(ALL_REDUCE)}.")
    if all_reduce == "nccl" and not gpus:
        raise StrategyError(
            "--all_reduce=nccl needs GPUs, and TensorFlow sees none here; use --all_reduce=ring (or auto)."
        )
    nccl = all_reduce == "nccl" or (all_reduce == "auto" and gpus > 0)
    implementation = tf.distribute.experimental.CommunicationImplementation
    return tf.distribute.experimental.CommunicationOptions(
        implementation=implementation.NCCL if nccl else implementation.RING
    )


def make_strategy(name: str = "auto", tpu: str = "", all_reduce: str = "auto") -> tf.distribute.Strategy:
    """`auto` picks TPU when `--tpu` is given, multi-worker when TF_CONFIG lists several hosts, mirrored when
    there are several local devices, else one device. `all_reduce` is multi-worker's (`communication_options`);
    `tpu` is `local` (a single-host TPU VM) or, on worker 0 of a pod slice, the slice's name (`kbert.runtime.tpu`).

    Raises:
      StrategyError: an unknown name or all-reduce, `tpu` without a TPU, a pod-slice launch TF 2.20 cannot run
        (not on worker 0, or `local` on a multi-host slice), or a malformed TF_CONFIG.
    """
    if name not in STRATEGIES:
        raise StrategyError(f"--strategy={name}: choose one of {', '.join(STRATEGIES)}.")
    if name == "auto":
        if tpu:
            name = "tpu"
        elif _tf_config_workers() > 1:
            name = "multi_worker_mirrored"
        else:
            name = "mirrored" if len(_local_devices()) > 1 else "one_device"
    if name == "tpu":
        return tpu_strategy(tpu)
    if name == "multi_worker_mirrored":
        if not _tf_config_workers():
            raise StrategyError(
                "--strategy=multi_worker_mirrored needs TF_CONFIG describing the cluster; see docs/gpu_clusters.md."
            )
        gpus = len(tf.config.get_visible_devices("GPU"))  # not list_logical_devices: it would start TF too early
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=communication_options(all_reduce, gpus))
    if name == "mirrored":
        return tf.distribute.MirroredStrategy(devices=_local_devices())
    return tf.distribute.OneDeviceStrategy(_local_devices()[0])


def worker_index_and_count(strategy: tf.distribute.Strategy) -> tuple[int, int]:
    """This worker's index among the job's workers, and their count (0, 1 without a multi-worker cluster)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) or resolver is None:
        return 0, 1
    spec = resolver.cluster_spec().as_dict()
    chiefs = len(spec.get("chief", []))
    workers = chiefs + len(spec.get("worker", []))
    index = 0 if resolver.task_type == "chief" else chiefs + resolver.task_id
    return index, workers
