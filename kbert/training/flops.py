"""Model FLOPs utilisation (MFU) of BERT pretraining: the matmul FLOPs a training step does per sequence, the peak
FLOP/s it is measured against (a device's data sheet, or a large matmul timed on the spot), and their ratio.

Invariant: MFU counts the model's own matmul FLOPs (forward and backward, the embeddings' gathers excluded),
whatever the implementation recomputes or skips, so two implementations of one model compare by their step rate.

Example:

>>> from kbert.modeling import BertConfig
>>> flops = training_flops_per_sequence(BertConfig.load("bert_base"), seq_length=128, max_predictions=20)
>>> f"{flops / 1e9:.0f} GFLOP per sequence"
'70 GFLOP per sequence'
>>> peak_bf16_flops("NVIDIA H100 80GB HBM3"), peak_bf16_flops("a CPU")
(989000000000000.0, None)
>>> f"{model_flops_utilisation(1000.0, flops, 989e12):.1%}"
'7.1%'
"""

from __future__ import annotations

import re
import time
from typing import Optional

import tensorflow as tf

from kbert.modeling import BertConfig

# Dense bf16 FLOP/s per TensorFlow device (a GPU; a TPU chip: v4, v5e and v5p have one TF device per chip), from
# NVIDIA's and Google's data sheets. Checked in order: the first pattern that matches the device's model wins.
PEAK_BF16_FLOPS = [(r"H100.*PCIe", 756e12), (r"H100.*NVL", 835e12), (r"H100|H200", 989e12), (r"A100", 312e12),
                   (r"\bL4\b", 121e12), (r"v6e", 918e12), (r"v5p", 459e12), (r"v5e|v5lite", 197e12),
                   (r"v4", 275e12)]


def training_flops_per_sequence(config: BertConfig, seq_length: int, max_predictions: int) -> float:
    """Matmul FLOPs of one forward+backward pass (3x forward) for one sequence; embeddings' gathers excluded."""
    h, i, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    per_token = layers * (2 * 4 * h * h + 2 * 2 * h * i + 2 * 2 * seq_length * h)
    head = max_predictions * (2 * h * h + 2 * h * config.vocab_size) + 2 * h * h + 2 * h * 2
    return 3.0 * (seq_length * per_token + head)


def peak_bf16_flops(device_model: str) -> Optional[float]:
    """Dense bf16 FLOP/s of one device of `device_model` (e.g. "NVIDIA H100 80GB HBM3"), or None when unknown."""
    return next((flops for pattern, flops in PEAK_BF16_FLOPS if re.search(pattern, device_model)), None)


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


def model_flops_utilisation(sequences_per_second: float, flops_per_sequence: float, peak_flops: float) -> float:
    """The share of `peak_flops` (FLOP/s of every device the sequences ran on) that the model's matmuls use."""
    return sequences_per_second * flops_per_sequence / peak_flops


def peak_flops_of(strategy: tf.distribute.Strategy, device_model: str) -> tuple[float, str]:
    """Peak FLOP/s of everything `strategy` trains on, and where the figure comes from: the data sheet's bf16 peak
    of `device_model` times the replicas on GPUs and TPUs, else a float32 matmul timed on this host (a CPU's
    logical devices share its cores)."""
    kind = tf.DeviceSpec.from_string(strategy.extended.worker_devices[0]).device_type
    stated = peak_bf16_flops(device_model) if kind in ("GPU", "TPU") else None
    if stated:
        return stated * strategy.num_replicas_in_sync, f"data-sheet bf16 peak of {device_model}"
    return measured_peak_flops(size=1024, repeats=5), "a float32 matmul timed on this host"
