"""What accelerators the host has, what TensorFlow will train on, and the refusal to train on the CPU beside them.

The host's hardware is read from the system (`kbert.runtime.accelerators`: PCI devices in sysfs, the NVIDIA
driver's /proc and /dev entries, `nvidia-smi -L`, the TPU environment variables), never from TensorFlow, whose
view is what is being checked: a host whose GPUs or TPUs TensorFlow cannot see would otherwise train on the CPU,
hundreds of times slower, without a word. Invariant: `check` refuses exactly when the strategy's devices are CPUs,
the host has a GPU or TPU, and the user did not ask for the CPU (`--device=cpu`); the message's first line names
the likely cause.

Example:

```python
strategy = make_strategy("auto")
print(report_line(find_accelerators(), strategy))   # devices: GPU x8 (NVIDIA H100 80GB HBM3) | ...
check(find_accelerators(), strategy, device="auto") # StrategyError on a host whose GPUs TF cannot see
```
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import os
import platform

import tensorflow as tf

from kbert.choices import DEVICES
from kbert.errors import StrategyError
from kbert.runtime.accelerators import Accelerators, find_accelerators  # noqa: F401 (its callers import it here)


def strategy_devices(strategy: tf.distribute.Strategy) -> tuple[str, int]:
    """The device type ("CPU", "GPU", "TPU") and the count of this host's devices the strategy trains on."""
    devices = strategy.extended.worker_devices
    return tf.DeviceSpec.from_string(devices[0]).device_type or "CPU", len(devices)


def _tensorflow_build() -> str:
    info = tf.sysconfig.get_build_info()
    cuda = f" (built for CUDA {info['cuda_version']})" if info.get("is_cuda_build") else ""
    return f"TensorFlow {tf.__version__}{cuda}, {platform.system()} {platform.machine()}"


def report_line(host: Accelerators, strategy: tf.distribute.Strategy) -> str:
    """One line: what the run trains on (kind x count, strategy, replicas), what the host has, which TensorFlow."""
    kind, count = strategy_devices(strategy)
    model = f" ({host.model})" if kind == host.kind and host.model else ""
    return (
        f"devices: {kind} x{count}{model} | {type(strategy).__name__}, {strategy.num_replicas_in_sync} "
        f"replica{'s' if strategy.num_replicas_in_sync > 1 else ''} | host accelerators: {host.describe()} | "
        f"{_tensorflow_build()}"
    )


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.version(distribution)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def _cuda_libraries_installed() -> bool:
    """cuDNN from the `tensorflow[and-cuda]` wheels (nvidia.cudnn), or on the loader's path."""
    import ctypes.util

    wheels = importlib.util.find_spec("nvidia") is not None and importlib.util.find_spec("nvidia.cudnn") is not None
    return wheels or ctypes.util.find_library("cudnn") is not None


@dataclasses.dataclass(frozen=True)
class Software:
    """What decides whether TensorFlow can open the host's accelerators (a parameter so tests can fake it)."""

    cuda_build: bool  # this TensorFlow has CUDA kernels (the Linux `tensorflow` wheel does)
    cuda_libraries: bool  # cuDNN & co. are installed (kbert[gpu])
    tpu_build: bool  # the `tensorflow-tpu` wheel is installed
    cuda_visible_devices: str | None  # the variable's value, None when unset

    @classmethod
    def of_this_process(cls) -> Software:
        return cls(
            cuda_build=bool(tf.sysconfig.get_build_info().get("is_cuda_build")),
            cuda_libraries=_cuda_libraries_installed(),
            tpu_build=_installed("tensorflow-tpu"),
            cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        )


def _gpu_cause(host: Accelerators, software: Software) -> str:
    """The likeliest reason TensorFlow sees none of the host's GPUs, with the fix; checked cheapest first."""
    if not host.driver_loaded:
        return (
            "the NVIDIA kernel driver is not loaded (no /proc/driver/nvidia, no /dev/nvidia*): install it or "
            "load it until `nvidia-smi` lists the GPUs"
        )
    if software.cuda_visible_devices is not None and software.cuda_visible_devices.strip() in ("", "-1"):
        return f"CUDA_VISIBLE_DEVICES={software.cuda_visible_devices!r} hides them: unset it"
    if not software.cuda_build:
        return (
            "this TensorFlow is a CPU-only build (tensorflow-cpu or tensorflow-tpu): "
            "pip install 'kbert[gpu]' (tensorflow[and-cuda])"
        )
    if not software.cuda_libraries:
        return "TensorFlow's CUDA libraries (cuDNN, cuBLAS) are not installed: pip install 'kbert[gpu]'"
    return (
        "TensorFlow could not open them although its CUDA libraries are installed: the NVIDIA driver is probably "
        "older than the CUDA 12 runtime TensorFlow 2.20 needs (see `nvidia-smi`); --verbose shows TF's log"
    )


def _tpu_cause(software: Software) -> str:
    if not software.tpu_build:
        return (
            "this TensorFlow has no TPU support: install tensorflow-tpu in place of tensorflow (docs/tpu.md, Install), "
            "then pass --strategy=tpu"
        )
    return "pass --strategy=tpu (with --tpu=local on a TPU VM) to train on it"


def refusal(host: Accelerators, trains_on: str, device: str, software: Software) -> str | None:
    """Why the run must not start, or None. Refuses a CPU run on a host with a GPU or TPU unless `device ==
    "cpu"`, and `device == "cpu"` with a strategy that is not on the CPU."""
    if device == "cpu":
        return (
            None
            if trains_on == "CPU"
            else (
                f"--device=cpu, but the strategy trains on {trains_on}: drop --device=cpu or choose "
                "--strategy=one_device/mirrored"
            )
        )
    if trains_on != "CPU" or not host.kind:
        return None
    cause = _gpu_cause(host, software) if host.kind == "GPU" else _tpu_cause(software)
    return (
        f"this host has {host.describe()} but TensorFlow would train on the CPU; likely cause: {cause}. "
        "Pass --device=cpu to train on the CPU anyway."
    )


def hide_accelerators() -> None:
    """Keeps TensorFlow off the GPUs (`--device=cpu`); call before anything lists or uses a device."""
    tf.config.set_visible_devices([], "GPU")


def check(
    host: Accelerators, strategy: tf.distribute.Strategy, device: str = "auto", software: Software | None = None
) -> None:
    """Raises StrategyError when `refusal` gives a reason.

    Raises:
      StrategyError: a CPU run on a host with a GPU or TPU that TensorFlow cannot use, without `--device=cpu`.
    """
    if device not in DEVICES:
        raise StrategyError(f"--device={device}: choose one of {', '.join(DEVICES)}.")
    reason = refusal(host, strategy_devices(strategy)[0], device, software or Software.of_this_process())
    if reason:
        raise StrategyError(reason)
