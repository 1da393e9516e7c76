"""The FLOPs side of model FLOPs utilisation (MFU), without TensorFlow: the matmul FLOPs a BERT training step does
per sequence, the data sheets' dense bf16 peaks, and their ratio. `kbert.training.peak_flops` adds the peaks of a
`tf.distribute` strategy; `tools/accelerator_check_jax.py` uses these on a host without TensorFlow.

Invariant: MFU counts the model's own matmul FLOPs (forward and backward, the embeddings' gathers excluded),
whatever the implementation recomputes or skips, so two implementations of one model compare by their step rate.
Blocks the model itself cuts off from the backward pass (an MSLT stage's frozen ones) count forward only.

Example:

>>> from kbert.modeling import BertConfig, BertEncoder, MaskedLMHead, NextSentenceHead
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

from kbert.modeling import BertConfig, BertEncoder, MaskedLMHead, NextSentenceHead

# Dense bf16 FLOP/s per TensorFlow device (a GPU; a TPU chip: v4, v5e and v5p have one TF device per chip), from
# NVIDIA's and Google's data sheets. Checked in order: the first pattern that matches the device's model wins.
PEAK_BF16_FLOPS = [
    (r"H100.*PCIe", 756e12),
    (r"H100.*NVL", 835e12),
    (r"H100|H200", 989e12),
    (r"A100", 312e12),
    (r"\bL4\b", 121e12),
    (r"v6e", 918e12),
    (r"v5p", 459e12),
    (r"v5e|v5lite", 197e12),
    (r"v4", 275e12),
]


def training_flops_per_sequence(
    config: BertConfig, seq_length: int, max_predictions: int, sentence_head: bool = True, forward_only_layers: int = 0
) -> float:
    """Matmul FLOPs of one forward+backward pass (3x forward) for one sequence; embeddings' gathers excluded.
    `sentence_head=False` leaves out the pooler and next-sentence head (a masked-LM-only model, e.g. keras-hub's
    BertMaskedLM). `forward_only_layers` bottom blocks count their forward pass alone: an MSLT stage's frozen
    blocks below its backward cut (`BertEncoder.stop_gradient_below`), which have no backward pass in the model.
    The counts are the parts' own (`BertEncoder.cost`, the heads' `cost`)."""
    costs = BertEncoder.cost(config, seq_length)
    blocks = [cost.flops for cost in costs["blocks"]]
    head = MaskedLMHead.cost(config, max_predictions).flops
    if sentence_head:
        head += costs["pooler"].flops + NextSentenceHead.cost(config).flops
    return 3.0 * (sum(blocks[forward_only_layers:]) + head) + sum(blocks[:forward_only_layers])


def peak_bf16_flops(device_model: str) -> float | None:
    """Dense bf16 FLOP/s of one device of `device_model` (e.g. "NVIDIA H100 80GB HBM3"), or None when unknown."""
    return next((flops for pattern, flops in PEAK_BF16_FLOPS if re.search(pattern, device_model)), None)


def model_flops_utilisation(sequences_per_second: float, flops_per_sequence: float, peak_flops: float) -> float:
    """The share of `peak_flops` (FLOP/s of every device the sequences ran on) that the model's matmuls use."""
    return sequences_per_second * flops_per_sequence / peak_flops
