"""What this host CPU's vector units can do for TensorFlow's oneDNN kernels, read from /proc/cpuinfo and
`ONEDNN_MAX_CPU_ISA` (which caps the instructions oneDNN's kernels use; it is read when TensorFlow starts).
Imports nothing heavy, so benchmarks can print it before TensorFlow loads.

Example:

>>> isa_summary({"avx2", "fma", "avx512f"}, cap="AVX2")
'AVX2 FMA, AVX-512 (ONEDNN_MAX_CPU_ISA=AVX2)'
>>> bfloat16_note("mixed_bfloat16", "CPU", {"avx2", "fma"}, cap=None)
'train.mixed_precision=mixed_bfloat16 on a CPU without bfloat16 units (AVX2 FMA): ...'
"""

from __future__ import annotations

import os

# (feature label, cpuinfo flags that show it), narrowest first.
_FEATURES = (
    ("AVX2 FMA", ("avx2",)),
    ("AVX-512", ("avx512f",)),
    ("AVX-512 BF16", ("avx512_bf16",)),
    ("AMX", ("amx_bf16", "amx_tile")),
)
_BFLOAT16_FLAGS = {"avx512_bf16", "amx_bf16", "bf16"}  # x86 dot-product units; "bf16" is aarch64's
# oneDNN caps below AVX512_CORE_BF16: they keep its kernels off the bfloat16 units even where the CPU has them.
_CAPS_WITHOUT_BFLOAT16 = {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI"}


def _cpuinfo_field(names: tuple[str, ...], cpuinfo: str) -> str:
    """The first CPU's value of the first field in `names`; "" where absent (or no /proc/cpuinfo)."""
    try:
        with open(cpuinfo) as f:
            lines = f.read().splitlines()
    except OSError:
        return ""
    return next((line.split(":", 1)[1].strip() for line in lines if line.split(":", 1)[0].strip() in names), "")


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> set[str]:
    """The CPU's feature flags (x86 `flags`, aarch64 `Features`)."""
    return set(_cpuinfo_field(("flags", "Features"), cpuinfo).split())


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's model name, or "unknown CPU"."""
    return _cpuinfo_field(("model name", "Model"), cpuinfo) or "unknown CPU"


def onednn_cap() -> str | None:
    """`ONEDNN_MAX_CPU_ISA` upper-cased, or None where unset."""
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA")
    return cap.upper() if cap else None


def isa_summary(flags: set[str] | None = None, cap: str | None = "") -> str:
    """E.g. 'AVX2 FMA, AVX-512, AVX-512 BF16, AMX (ONEDNN_MAX_CPU_ISA=AVX2)': the vector features present, widest
    last, and the oneDNN cap if set. `flags` defaults to this CPU's, `cap` ("" for the environment's) to the
    environment's."""
    flags = cpu_flags() if flags is None else flags
    cap = onednn_cap() if cap == "" else cap
    present = [label for label, names in _FEATURES if flags & set(names)] or ["no AVX2"]
    return ", ".join(present) + (f" (ONEDNN_MAX_CPU_ISA={cap})" if cap else "")


def native_bfloat16(flags: set[str] | None = None, cap: str | None = "") -> bool:
    """Whether oneDNN's kernels can run bfloat16 matmuls on bfloat16 units here (AVX-512 BF16, AMX or aarch64's
    BF16, not capped below them by `ONEDNN_MAX_CPU_ISA`)."""
    flags = cpu_flags() if flags is None else flags
    cap = onednn_cap() if cap == "" else cap
    return bool(flags & _BFLOAT16_FLAGS) and cap not in _CAPS_WITHOUT_BFLOAT16


def bfloat16_note(policy: str, device_type: str, flags: set[str] | None = None, cap: str | None = "") -> str | None:
    """One line for a run that asked for `policy` on `device_type` ("CPU", "GPU", "TPU"): a warning where it is
    mixed_bfloat16 on a CPU whose kernels have no bfloat16 units (there bfloat16 is converted to and from float32
    around every matmul, slower than float32 alone); None otherwise."""
    if policy != "mixed_bfloat16" or device_type != "CPU" or native_bfloat16(flags, cap):
        return None
    return (
        f"train.mixed_precision=mixed_bfloat16 on a CPU without bfloat16 units ({isa_summary(flags, cap)}): "
        "it runs slower than float32 here; train.mixed_precision=float32 is faster on this machine."
    )
