"""The peak FLOP/s a `tf.distribute` strategy's training is measured against: the data sheet's bf16 peak of its
devices, or a large matmul timed on the spot (a CPU). The FLOPs per sequence, the data sheets and MFU itself are
`kbert.runtime.flops`, which needs no TensorFlow.

Example:

```python
peak, source = peak_flops_of(strategy, "NVIDIA H100 80GB HBM3")   # 8 replicas: (7.9e15, 'data-sheet bf16 ...')
```
"""

from __future__ import annotations

import time

import tensorflow as tf

from kbert.runtime.flops import peak_bf16_flops


def measured_peak_flops(size: int = 2048, repeats: int = 10) -> float:
    """FLOP/s of a large float32 matmul on this device: the denominator where no data sheet applies (a CPU)."""
    a = tf.random.normal((size, size))
    b = tf.random.normal((size, size))
    matmul = tf.function(lambda x, y: tf.linalg.matmul(x, y))
    matmul(a, b).numpy()
    start = time.perf_counter()
    for _ in range(repeats):
        out = matmul(a, b)
    out.numpy()
    return 2.0 * size ** 3 * repeats / (time.perf_counter() - start)


def peak_flops_of(strategy: tf.distribute.Strategy, device_model: str) -> tuple[float, str]:
    """Peak FLOP/s of everything `strategy` trains on, and where the figure comes from: the data sheet's bf16 peak
    of `device_model` times the replicas on GPUs and TPUs, else a float32 matmul timed on this host (a CPU's
    logical devices share its cores)."""
    kind = tf.DeviceSpec.from_string(strategy.extended.worker_devices[0]).device_type
    stated = peak_bf16_flops(device_model) if kind in ("GPU", "TPU") else None
    if stated:
        return stated * strategy.num_replicas_in_sync, f"data-sheet bf16 peak of {device_model}"
    return measured_peak_flops(size=1024, repeats=5), "a float32 matmul timed on this host"
