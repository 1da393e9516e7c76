"""kbert.runtime.flops and kbert.training.peak_flops: FLOPs per sequence, the data-sheet peak of a device's model name,
and a matmul timed on the spot."""

import tensorflow as tf

from kbert.modeling import BertConfig, BertEncoder, MaskedLMHead
from kbert.runtime.flops import peak_bf16_flops, training_flops_per_sequence
from kbert.training.peak_flops import measured_peak_flops, peak_flops_of


def test_the_first_matching_data_sheet_entry_wins():
    assert peak_bf16_flops("NVIDIA H100 PCIe") == 756e12 and peak_bf16_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert peak_bf16_flops("NVIDIA H200") == 989e12 and peak_bf16_flops("TPU v5 lite") is None
    assert peak_bf16_flops("TPU v5lite") == 197e12 and peak_bf16_flops("NVIDIA L40S") is None


def test_a_timed_matmul_gives_a_positive_rate():
    assert measured_peak_flops(size=64, repeats=2) > 0


def test_a_cpu_peak_is_timed_in_the_run_s_precision():
    """A bf16 run on a CPU is measured against a bf16 matmul: against a float32 one, the CPU's bf16 units put its MFU
    above 100%."""
    cpu = tf.distribute.OneDeviceStrategy("/cpu:0")
    for dtype in ("float32", "bfloat16"):
        peak, source = peak_flops_of(cpu, "", dtype)
        assert peak > 0 and source == f"a {dtype} matmul timed on this host"


def test_flops_per_sequence_of_bert_base_with_and_without_the_sentence_head():
    base = BertConfig.load("bert_base")
    assert training_flops_per_sequence(base, 128, 20) == 69928989696.0
    assert training_flops_per_sequence(base, 512, 76) == 3.0 * (
        512 * 12 * (8 * 768**2 + 4 * 768 * 3072 + 4 * 512 * 768)
        + 76 * (2 * 768**2 + 2 * 768 * 30522)
        + 2 * 768**2
        + 4 * 768
    )
    assert training_flops_per_sequence(base, 128, 20) - training_flops_per_sequence(base, 128, 20, False) == 3 * (
        2 * 768**2 + 4 * 768
    )


def test_blocks_below_an_mslt_cut_count_their_forward_pass_alone():
    base = BertConfig.load("bert_base")
    per_layer = 128 * (8 * 768**2 + 4 * 768 * 3072 + 4 * 128 * 768)
    full = training_flops_per_sequence(base, 128, 20)
    assert training_flops_per_sequence(base, 128, 20, forward_only_layers=8) == full - 8 * 2 * per_layer


def test_a_modern_model_counts_local_layers_on_their_window_and_the_gated_feed_forward_three_times():
    """modernbert_base at 1,024 tokens: global layers (0, 3, ..., 21) attend over S keys, local ones over
    window + 1 = 129; GeGLU's projections are H x 2I and I x H; rotary positions and norms are no matmul; no sentence
    head. And its parameters are the published model's (149.7M: no position table, no biases)."""
    modern = BertConfig.load("modernbert_base")
    s, h, i, v = 1024, 768, 1152, 50368
    projections = s * (4 * 2 * h * h + 2 * h * 2 * i + 2 * i * h)
    layers = [projections + 2 * 2 * s * (s if n % 3 == 0 else 129) * h for n in range(22)]
    assert training_flops_per_sequence(modern, s, 154, sentence_head=False) == 3.0 * (
        sum(layers) + 154 * (2 * h * h + 2 * h * v)
    )
    assert training_flops_per_sequence(modern, s, 154) == training_flops_per_sequence(modern, s, 154, False)
    costs = BertEncoder.cost(modern, s)
    parts = costs["embeddings"] + costs["final_norm"] + costs["pooler"] + MaskedLMHead.cost(modern, 1)
    assert parts.parameters + sum(cost.parameters for cost in costs["blocks"]) == 149_655_232
