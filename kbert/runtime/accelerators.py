"""The GPUs and TPU chips a host has, as the system shows them, read without TensorFlow.

From PCI devices in sysfs, the NVIDIA driver's /proc and /dev entries, `nvidia-smi -L` and the TPU environment
variables. TensorFlow is not imported here, so the answer is known before it starts: `kbert.runtime.console` uses it
to keep TensorFlow from probing for CUDA on a host with no GPU, and `kbert.runtime.devices` to check the strategy
TensorFlow built against the hardware.

Example:

```python
find_accelerators()   # Accelerators(kind="GPU", count=8, model="NVIDIA H100 80GB HBM3"), or Accelerators() for none
```
"""

from __future__ import annotations

import dataclasses
import glob
import os
import shutil
import subprocess
from collections.abc import Mapping

_NVIDIA_VENDOR = "0x10de"
_GOOGLE_VENDOR = "0x1ae0"
# Google's PCI device ids of TPU chips (as libtpu and JAX detect them); other Google devices, e.g. gVNIC, are not.
_TPU_DEVICE_IDS = {
    "0x0027": "TPU v2/v3",
    "0x005e": "TPU v4",
    "0x0062": "TPU v5p",
    "0x0063": "TPU v5e",
    "0x006f": "TPU v6e",
}
# Display controllers (VGA 0x0300, 3D 0x0302): NVIDIA's NVSwitch and audio functions share the vendor id.
_DISPLAY_CLASS_PREFIX = "0x03"


@dataclasses.dataclass(frozen=True)
class Accelerators:
    """The GPUs or TPU chips the host has, as the system shows them (none: `kind == ""`)."""

    kind: str = ""  # "GPU", "TPU" or ""
    count: int = 0
    model: str = ""  # e.g. "NVIDIA H100 80GB HBM3", "TPU v5e"; "" when unknown
    driver_loaded: bool = True  # NVIDIA: /proc/driver/nvidia or /dev/nvidiaN exists (the kernel module is up)

    def describe(self) -> str:
        return f"{self.count} {self.model or self.kind}{'s' if self.count > 1 else ''}" if self.kind else "none"


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _pci_devices(root: str) -> list[tuple[str, str, str]]:
    """(vendor, device, class) of every PCI function in sysfs."""
    return [
        (_read(f"{d}/vendor"), _read(f"{d}/device"), _read(f"{d}/class"))
        for d in sorted(glob.glob(os.path.join(root, "sys/bus/pci/devices/*")))
    ]


def _nvidia_smi_models() -> list[str]:
    """GPU names from `nvidia-smi -L` ("GPU 0: NVIDIA A100-SXM4-80GB (UUID: ...)"), or [] without it."""
    if not shutil.which("nvidia-smi"):
        return []
    try:  # a wedged driver can hang nvidia-smi; the report must not
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=15).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.split(":", 1)[1].split("(UUID")[0].strip() for line in out.splitlines() if line.startswith("GPU ")]


def _nvidia_entries(root: str) -> tuple[list[str], list[str], list[tuple[str, str, str]]]:
    """The driver's per-GPU /proc directories, the /dev/nvidiaN nodes and the NVIDIA display PCI functions."""
    proc = sorted(glob.glob(os.path.join(root, "proc/driver/nvidia/gpus/*")))
    nodes = glob.glob(os.path.join(root, "dev/nvidia[0-9]*"))
    pci = [p for p in _pci_devices(root) if p[0] == _NVIDIA_VENDOR and p[2].startswith(_DISPLAY_CLASS_PREFIX)]
    return proc, nodes, pci


def _nvidia(root: str) -> Accelerators | None:
    proc, nodes, pci = _nvidia_entries(root)
    models = [
        line.split(":", 1)[1].strip()
        for d in proc
        for line in _read(f"{d}/information").splitlines()
        if line.startswith("Model:")
    ] or (_nvidia_smi_models() if proc or nodes else [])
    count = max(len(proc), len(nodes), len(pci), len(models))
    if not count:
        return None
    return Accelerators("GPU", count, models[0] if models else "NVIDIA GPU", driver_loaded=bool(proc or nodes))


def _tpu(root: str, env: Mapping[str, str]) -> Accelerators | None:
    chips = [_TPU_DEVICE_IDS[p[1]] for p in _pci_devices(root) if p[0] == _GOOGLE_VENDOR and p[1] in _TPU_DEVICE_IDS]
    accelerator_type = env.get("TPU_ACCELERATOR_TYPE", "")  # set on GKE TPU nodes, e.g. "v5litepod-8"
    if not chips and not accelerator_type:
        return None
    # Without sysfs (some containers) the env var alone says a TPU is attached, not how many chips: the /dev
    # nodes (/dev/accelN on v2-v4 and v5p, /dev/vfio/N on v5e and v6e) count them.
    nodes = glob.glob(os.path.join(root, "dev/accel[0-9]*")) or glob.glob(os.path.join(root, "dev/vfio/[0-9]*"))
    model = chips[0] if chips else f"TPU {accelerator_type}"
    return Accelerators("TPU", len(chips) or len(nodes) or 1, model)


def find_accelerators(root: str = "/", env: Mapping[str, str] | None = None) -> Accelerators:
    """The host's NVIDIA GPUs or TPU chips from sysfs, /proc, /dev, `nvidia-smi` and the environment.

    `root` and `env` exist for tests (a fake tree); they default to this machine's.
    """
    env = os.environ if env is None else env
    return _nvidia(root) or _tpu(root, env) or Accelerators()


def has_accelerators(root: str = "/", env: Mapping[str, str] | None = None) -> bool:
    """Whether `find_accelerators` finds a GPU or TPU chip, without running `nvidia-smi` (which only names them)."""
    env = os.environ if env is None else env
    return any(_nvidia_entries(root)) or _tpu(root, env) is not None
