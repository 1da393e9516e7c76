"""The peak FLOP/s a `tf.distribute` strategy's training is measured against: the data sheet's bf16 peak of its
devices, or a large matmul timed on the spot (a CPU). The FLOPs per sequence, the data sheets and MFU itself are
`kbert.runtime.flops`, which needs no TensorFlow.

Example:

```python
peak, source = peak_flops_of(strategy, "NVIDIA H100 80GB HBM3")   # 8 replicas: (7.9e15, 'data-sheet bf16 ...')
peak, source = peak_flops_of(one_cpu, "", "bfloat16")             # (..., 'a bfloat16 matmul timed on this host')
```
"""

from __future__ import annotations

import functools
import time

import tensorflow as tf

from kbert.runtime.flops import peak_bf16_flops


def measured_peak_flops(size: int = 2048, repeats: int = 10, dtype: str = "float32", max_seconds: float = 1.0) -> float:
    """FLOP/s of a large `dtype` matmul on this device: the denominator where no data sheet applies (a CPU). It
    is the fastest of up to `repeats` timed matmuls, fewer once `max_seconds` have passed. The fastest, not the
    mean: a run's input pipeline starts filling its buffers (and an MSLT stage may be built ahead) while this is
    timed, and a mean taken under that load has read half the peak (MFU 122% against 62% for the same recipe).
    The time limit matters where bf16 matmuls are slow (a CPU without bf16 units), as the run waits for this."""
    a = tf.cast(tf.random.normal((size, size)), dtype)
    b = tf.cast(tf.random.normal((size, size)), dtype)
    matmul = tf.function(lambda x, y: tf.linalg.matmul(x, y), autograph=False)
    matmul(a, b).numpy()
    fastest, start = float("inf"), time.perf_counter()
    for _ in range(repeats):
        began = time.perf_counter()
        matmul(a, b).numpy()
        fastest = min(fastest, time.perf_counter() - began)
        if time.perf_counter() - start > max_seconds:
            break
    return 2.0 * size**3 / fastest


@functools.cache
def _host_peak_flops(dtype: str) -> float:
    """This host's matmul peak in `dtype`, timed once a process: every stage of a run shares one denominator. The
    fastest of 10 matmuls, a quarter of a second at most on a core: it delays every run's first step."""
    return measured_peak_flops(size=1024, repeats=10, dtype=dtype, max_seconds=0.25)


def peak_flops_of(
    strategy: tf.distribute.Strategy, device_model: str, compute_dtype: str = "float32"
) -> tuple[float, str]:
    """Peak FLOP/s of everything `strategy` trains on, and where the figure comes from: the data sheet's bf16 peak
    of `device_model` times the replicas on GPUs and TPUs, else a matmul in the run's `compute_dtype` timed on this
    host (a CPU's logical devices share its cores). A CPU's bf16 matmuls (AMX, AVX-512 BF16) can run twice as fast as
    its float32 ones or more, so a bf16 run measured against a float32 matmul would show an MFU above 100%."""
    kind = tf.DeviceSpec.from_string(strategy.extended.worker_devices[0]).device_type
    stated = peak_bf16_flops(device_model) if kind in ("GPU", "TPU") else None
    if stated:
        return stated * strategy.num_replicas_in_sync, f"data-sheet bf16 peak of {device_model}"
    return _host_peak_flops(compute_dtype), f"a {compute_dtype} matmul timed on this host"
