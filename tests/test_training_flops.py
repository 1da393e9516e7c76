"""kbert.training.flops: the data-sheet peak of a device's model name, and a matmul timed on the spot."""

from kbert.training.flops import measured_peak_flops, peak_bf16_flops


def test_the_first_matching_data_sheet_entry_wins():
    assert peak_bf16_flops("NVIDIA H100 PCIe") == 756e12 and peak_bf16_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert peak_bf16_flops("NVIDIA H200") == 989e12 and peak_bf16_flops("TPU v5 lite") is None
    assert peak_bf16_flops("TPU v5lite") == 197e12 and peak_bf16_flops("NVIDIA L40S") is None


def test_a_timed_matmul_gives_a_positive_rate():
    assert measured_peak_flops(size=64, repeats=2) > 0
