"""kbert's dense sublayers and tied logits reach oneDNN's fused kernels, and compute what the 3D forms compute.

The fused forms are what close the CPU gap to Model Garden's step (issue #32): a Dense layer on [B*S, H] token rows
is a MatMul that grappler fuses with its BiasAdd and GELU; the tied logits are one 2D MatMul whose table gradient
is a MatMul, not a broadcast BatchMatMul summed over the batch.
"""

import glob

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops
from tensorflow.python.util import _pywrap_util_port
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from kbert.modeling import BertConfig, TransformerBlock
from kbert.modeling.encoder import block_config
from kbert.modeling.rows import tied_logits, token_rows
from kbert.runtime.cpu_isa import bfloat16_note, isa_summary, native_bfloat16

TINY = BertConfig(
    vocab_size=97,
    hidden_size=32,
    num_hidden_layers=1,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=32,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)


def executed_op_types(function, *args, logdir) -> list[str]:
    """The op types (after grappler and oneDNN's rewrites) that one call of `function` ran."""
    function(*args)
    tf.profiler.experimental.start(str(logdir))
    function(*args)
    tf.profiler.experimental.stop()
    space = xplane_pb2.XSpace()
    with open(glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True)[0], "rb") as f:
        space.ParseFromString(f.read())
    return [
        plane.event_metadata[event.metadata_id].name.rsplit(":", 1)[1]
        for plane in space.planes
        for line in plane.lines
        if line.name.startswith("tf_Compute")
        for event in line.events
        if ":" in plane.event_metadata[event.metadata_id].name
        and "::" not in plane.event_metadata[event.metadata_id].name
    ]


@pytest.mark.skipif(not _pywrap_util_port.IsMklEnabled(), reason="oneDNN's fusions need a oneDNN build of TF")
def test_block_forward_runs_fused_matmuls(tmp_path):
    block = TransformerBlock(**block_config(TINY, 0), name="layer_0")
    block.build()
    forward = tf.function(lambda x: block(x, ops.ones((2, 1, 8), "int32")))
    types = executed_op_types(forward, tf.random.normal((2, 8, 32)), logdir=tmp_path)
    # query, key, value, attention output, intermediate (with its GELU) and output: each MatMul + BiasAdd fused.
    assert types.count("_MklNativeFusedMatMul") == 6, sorted(types)
    assert "BiasAdd" not in types and "Erfc" not in types, sorted(types)


@pytest.mark.skipif(not _pywrap_util_port.IsMklEnabled(), reason="oneDNN's fusions need a oneDNN build of TF")
def test_tied_logits_table_gradient_is_one_matmul(tmp_path):
    rows, table, bias = tf.random.normal((6, 32)), tf.Variable(tf.random.normal((97, 32))), tf.Variable(tf.zeros(97))

    @tf.function
    def step(rows):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tied_logits(rows, table, bias) ** 2)
        return tape.gradient(loss, [table, bias])

    types = executed_op_types(step, rows, logdir=tmp_path)
    assert not any("BatchMatMul" in t for t in types) and "Sum" not in types, sorted(types)


def test_tied_logits_match_the_batched_einsum():
    rng = np.random.default_rng(0)
    hidden = rng.standard_normal((2, 5, 32)).astype(np.float32)
    table, bias = rng.standard_normal((97, 32)).astype(np.float32), rng.standard_normal(97).astype(np.float32)
    got = tied_logits(token_rows(hidden), table, bias)
    np.testing.assert_allclose(
        np.reshape(got, (2, 5, 97)), np.einsum("bph,vh->bpv", hidden, table) + bias, rtol=1e-5, atol=1e-5
    )


def test_tied_logits_are_float32_under_mixed_precision():
    rows, table = ops.ones((3, 32), "bfloat16"), ops.ones((97, 32), "bfloat16")
    assert keras.backend.standardize_dtype(tied_logits(rows, table, ops.zeros(97)).dtype) == "float32"


def test_isa_summary_and_bfloat16_units():
    sapphire_rapids = {"avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}
    assert isa_summary(sapphire_rapids, cap=None) == "AVX2 FMA, AVX-512, AVX-512 BF16, AMX"
    assert isa_summary({"sse4_2"}, cap=None) == "no AVX2"
    assert native_bfloat16(sapphire_rapids, cap=None) and native_bfloat16(sapphire_rapids, cap="AVX512_CORE_AMX")
    assert not native_bfloat16(sapphire_rapids, cap="AVX2")
    assert not native_bfloat16({"avx2", "fma", "avx512f"}, cap=None)  # Skylake-SP: AVX-512 without BF16


def test_bfloat16_note_only_for_bfloat16_on_cpus_without_its_units():
    epyc = {"avx2", "fma"}
    assert "slower than float32" in bfloat16_note("mixed_bfloat16", "CPU", epyc, cap=None)
    assert "\n" not in bfloat16_note("mixed_bfloat16", "CPU", epyc, cap=None)
    assert bfloat16_note("float32", "CPU", epyc, cap=None) is None
    assert bfloat16_note("mixed_bfloat16", "GPU", epyc, cap=None) is None
    assert bfloat16_note("mixed_bfloat16", "CPU", {"avx512f", "avx512_bf16"}, cap=None) is None
