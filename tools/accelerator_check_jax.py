"""Accelerator check for kbert under JAX, with no TensorFlow: BERT-Base training throughput against keras-hub, MFU,
cuDNN flash attention on and off, and kbert's LAMB against a float64 reference, on one GPU.

    KERAS_BACKEND=jax python tools/accelerator_check_jax.py --json=out.json     # one GPU: at most ~8 minutes
    KERAS_BACKEND=jax JAX_PLATFORMS=cpu python tools/accelerator_check_jax.py --smoke   # tiny sizes on the CPU
    python tools/accelerator_check_jax.py --prepare_wheels=wheels   # here: the wheels a host without them needs

Needs JAX, numpy, absl-py, keras and keras-hub (which imports kagglehub, kagglesdk, regex, tokenizers and
sentencepiece), never TensorFlow (keras-hub imports it where it is installed; nothing here uses it).
docs/accelerators.md says how to run it on a lent H200 (the wheels and the command) and what good figures look
like, and the figures of its run on an H200 on 2026-12-04 (every phase ok, 329 s).

Phases, in this order, in one process (each one's failure is its result; the next still runs):

  devices          what JAX sees, the versions, whether TensorFlow was imported (keras-hub imports it where it is
                   installed; tests/test_accelerator_check_jax.py blocks it)
  matmul           a jitted bf16 matmul (8192^3), timed: the peak MFU is measured against; the data sheet's too
  lamb_vs_float64  5 kbert LAMB steps (jitted, float32, on the device) against a NumPy float64 LAMB
  <who>_<seq>      BERT-Base, mixed_bfloat16, the config's dropout, at seq 128 (20 predictions) and 512 (76):
                   kbert's BertPretrainer + kbert LAMB at the largest batch that fits (1024 and 256 tried first,
                   halved on out-of-memory), then keras-hub's BertMaskedLM with keras.optimizers.Lamb and AdamW at
                   that batch (halved if it does not fit). Each is model.compile + keras.Model.fit on arrays in
                   memory: sequences/s of the timed fit (10 steps after 2 that compile), MFU
  flash_<on|off>_<seq>  kbert with attention dropout 0 (the fused kernels take no dropout), Keras's choice of
                   attention (cuDNN flash on a GPU) against XLA's unfused attention
                   (keras.config.disable_flash_attention(), which kbert's attention follows)

Writes every figure to one JSON file after each phase (`--json`), prints one table, exits 1 if a phase failed and 3
if none failed but some were skipped to stay within --budget_s. The data is random token ids with a Zipf
distribution, so the loss falls; nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.9")  # JAX takes 75% of a GPU's memory by default

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

flags.DEFINE_bool("smoke", False, "Every phase at tiny sizes (bert_tiny-like, seq 32), on the CPU.")
flags.DEFINE_string("json", None, "The results file; default: accelerator_check_jax.json in the temp folder.")
flags.DEFINE_list("phases", [], "Run only these phases (default: all), e.g. matmul,kbert_lamb_512.")
flags.DEFINE_integer(
    "budget_s",
    360,
    "Start no training phase once this many seconds, less the last training phase's, have passed (it is then skipped).",
)
flags.DEFINE_string(
    "prepare_wheels",
    None,
    "Download the wheels a Python 3.12 x86-64 host without keras and keras-hub needs into this folder, then exit.",
)
FLAGS = flags.FLAGS

OK, FAIL, SKIPPED = "ok", "FAIL", "skipped"
# What a JAX host without them needs to run this (the H200 image has the rest: jax, numpy, absl-py, h5py,
# ml-dtypes, rich, packaging, regex, requests, pyyaml, tqdm, protobuf, tokenizers, sentencepiece).
WHEELS = ("keras", "namex", "optree", "keras-hub", "kagglehub", "kagglesdk")
# Dense bf16 FLOP/s per device from the data sheets, as kbert.runtime.flops.PEAK_BF16_FLOPS has them for
# TensorFlow's device names, which JAX's differ from ("TPU v5 lite"); first match wins.
NOMINAL_BF16 = [
    (r"H100.*PCIe", 756e12),
    (r"H100.*NVL", 835e12),
    (r"H100|H200", 989e12),
    (r"A100", 312e12),
    (r"\bL4\b", 121e12),
    (r"v6e", 918e12),
    (r"v5p", 459e12),
    (r"v5e|v5 ?lite", 197e12),
    (r"v4", 275e12),
]


@dataclasses.dataclass(frozen=True)
class Sizes:
    model: dict[str, Any]  # BertConfig fields over bert_base
    seqs: dict[int, int]  # sequence length -> masked predictions
    max_tokens: int  # the largest batch tried is max_tokens // seq
    min_batch: int
    warmup_steps: int  # the first fit: compile and warm up
    timed_steps: int
    matmul: int
    lamb_shape: tuple[int, int]


FULL = Sizes(
    model={},
    seqs={128: 20, 512: 76},
    max_tokens=131072,
    min_batch=8,
    warmup_steps=2,
    timed_steps=10,
    matmul=8192,
    lamb_shape=(768, 3072),
)
SMOKE = Sizes(
    model=dict(
        vocab_size=512,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    ),
    seqs={32: 5},
    max_tokens=256,
    min_batch=2,
    warmup_steps=1,
    timed_steps=2,
    matmul=256,
    lamb_shape=(64, 48),
)


def _sizes() -> Sizes:
    return SMOKE if FLAGS.smoke else FULL


def _bert_config(**changes: Any):
    from kbert.modeling import BertConfig

    return BertConfig.load("bert_base").replace(**{**_sizes().model, **changes})


# -- data ----------------------------------------------------------------------------------------------------------


def _batch(rows: int, seq: int, preds: int, vocab: int) -> dict[str, np.ndarray]:
    """kbert's batch dict (kbert.data.schema) of full-length rows: Zipf token ids over the first thousand ids, so a
    model learns their frequencies and the loss falls."""
    rng = np.random.default_rng(seq)

    def zipf(*shape: int) -> np.ndarray:
        return (5 + (rng.zipf(1.3, shape) - 1) % (min(vocab, 1000) - 5)).astype(np.int32)

    positions = np.sort(np.argsort(rng.random((rows, seq - 1)), axis=1)[:, :preds] + 1, axis=1)
    return {
        "input_ids": zipf(rows, seq),
        "input_mask": np.ones((rows, seq), np.int32),
        "segment_ids": np.broadcast_to(np.arange(seq) >= seq // 2, (rows, seq)).astype(np.int32),
        "masked_lm_positions": positions.astype(np.int32),
        "masked_lm_ids": zipf(rows, preds),
        "masked_lm_weights": np.ones((rows, preds), np.float32),
        "next_sentence_labels": rng.integers(0, 2, (rows, 1)).astype(np.int32),
    }


def _fit_data(who: str, batch: dict[str, np.ndarray]) -> tuple[Any, Any, Any]:
    """(x, y, sample_weight) of model.fit: kbert takes the batch dict; keras-hub's BertMaskedLM its own names."""
    if who.startswith("hub"):
        x = {
            "token_ids": batch["input_ids"],
            "padding_mask": batch["input_mask"],
            "segment_ids": batch["segment_ids"],
            "mask_positions": batch["masked_lm_positions"],
        }
        return x, batch["masked_lm_ids"], batch["masked_lm_weights"]
    return batch, None, None


# -- the contestants -----------------------------------------------------------------------------------------------


def _build(who: str, config) -> Any:
    """A compiled model: kbert's BertPretrainer with kbert's LAMB, or keras-hub's BertMaskedLM of the same size with
    Keras's Lamb or AdamW. mixed_bfloat16 for all (no loss scaling: bf16 needs none)."""
    import keras

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    keras.utils.set_random_seed(0)
    if not who.startswith("hub"):
        from kbert.modeling import BertPretrainer
        from kbert.optimizers import LAMB

        model = BertPretrainer(config)
        model.compile(optimizer=LAMB(2e-3, weight_decay=0.01))
        return model
    import keras_hub

    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=config.vocab_size,
        num_layers=config.num_hidden_layers,
        num_heads=config.num_attention_heads,
        hidden_dim=config.hidden_size,
        intermediate_dim=config.intermediate_size,
        dropout=config.hidden_dropout_prob,
        max_sequence_length=config.max_position_embeddings,
    )
    model = keras_hub.models.BertMaskedLM(backbone, preprocessor=None)
    optimizer = (
        keras.optimizers.Lamb(2e-3, weight_decay=0.01)
        if who == "hub_lamb"
        else keras.optimizers.AdamW(1e-4, weight_decay=0.01)
    )
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        weighted_metrics=[keras.metrics.SparseCategoricalAccuracy()],
    )
    return model


@contextlib.contextmanager
def _attention(flash: bool | None = None):
    """Keras's flash-attention setting, which kbert's attention follows (None: Keras chooses, cuDNN flash on a GPU;
    False: XLA's unfused attention); yields the implementations jax.nn.dot_product_attention traced ('cudnn',
    'xla'; none: the explicit softmax)."""
    import jax
    import keras

    original, used = jax.nn.dot_product_attention, []

    def logged(*args, implementation=None, **kwargs):
        out = original(*args, implementation=implementation, **kwargs)  # Keras falls back to 'xla' if this raises
        used.append(implementation or "xla")
        return out

    jax.nn.dot_product_attention = logged
    if flash is False:
        keras.config.disable_flash_attention()
    try:
        yield used
    finally:
        jax.nn.dot_product_attention = original
        keras.config.enable_flash_attention()


# -- measuring -----------------------------------------------------------------------------------------------------


def _is_out_of_memory(error: Exception) -> bool:
    return re.search(r"RESOURCE_EXHAUSTED|[Oo]ut of memory", str(error)) is not None


def _release() -> None:
    """Frees the last model's device memory before the next one is built."""
    import keras

    keras.backend.clear_session()
    gc.collect()


def _train_rate(
    who: str, config, batch_dict: dict[str, np.ndarray], batch: int, flash: bool | None = None
) -> dict[str, Any]:
    """Builds `who`, fits `warmup_steps` (compiling) then `timed_steps` steps of `batch` rows: sequences/s of the
    timed fit. Raises what the fit raises (out of memory too)."""
    import keras

    s = _sizes()
    x, y, weights = _fit_data(who, {k: v[: batch * s.timed_steps] for k, v in batch_dict.items()})
    model = _build(who, config)
    # keras.Model.fit, not keras-hub's: that one wraps arrays in a grain or tf.data pipeline even without a
    # preprocessor, so it needs grain or TensorFlow. The compiled train step is the same either way.
    fit = functools.partial(
        keras.Model.fit, model, x=x, y=y, sample_weight=weights, batch_size=batch, epochs=1, shuffle=False, verbose=0
    )
    with _attention(flash) as used:
        start = time.perf_counter()
        first = fit(steps_per_epoch=s.warmup_steps).history["loss"][0]
        compile_seconds = time.perf_counter() - start
        start = time.perf_counter()
        last = fit(steps_per_epoch=s.timed_steps).history["loss"][0]
        seconds = time.perf_counter() - start
    return {
        "batch": batch,
        "sequences_per_second": batch * s.timed_steps / seconds,
        "step_seconds": seconds / s.timed_steps,
        "compile_and_warmup_seconds": compile_seconds,
        "loss_first": first,
        "loss_last": last,
        "attention": sorted(set(used)) or ["explicit softmax"],
    }


def _largest_batch(run: Callable[[int], dict[str, Any]], start: int, smallest: int) -> dict[str, Any]:
    """run(batch) at `start`, halving on out-of-memory down to `smallest`: the largest power-of-two fraction of
    `start` that fits (the cap is tried first, so a cap that fits costs one compile)."""
    batch, too_big = start, []
    while batch >= smallest:
        try:
            return {**run(batch), "out_of_memory_at": too_big}
        except Exception as error:  # noqa: BLE001 - anything but out-of-memory is raised
            if not _is_out_of_memory(error):
                raise
            too_big.append(batch)
        _release()  # here, not in the except block: its traceback holds the model
        batch //= 2
    raise RuntimeError(f"out of memory at every batch from {start} down to {smallest}: {too_big}")


def _rate_figures(
    result: dict[str, Any], config, seq: int, preds: int, ctx: dict[str, Any], sentence_head: bool
) -> dict[str, Any]:
    """Adds FLOPs and MFU (against the matmul measured in this run, and the data sheet's peak) to a rate."""
    from kbert.runtime.flops import training_flops_per_sequence

    flops = training_flops_per_sequence(config, seq, preds, sentence_head)
    achieved = result["sequences_per_second"] * flops
    result.update(
        flops_per_sequence=flops,
        achieved_tflops=achieved / 1e12,
        mfu_measured=achieved / ctx["peak"] if ctx.get("peak") else None,
        mfu_nominal=achieved / ctx["nominal"] if ctx.get("nominal") else None,
    )
    finite = math.isfinite(result["loss_first"]) and math.isfinite(result["loss_last"])
    mfu = " ".join(f"{result[k]:.1%} {k[4:]}" for k in ("mfu_measured", "mfu_nominal") if result[k] is not None)
    result.update(
        status=OK if finite and result["sequences_per_second"] > 0 else FAIL,
        summary=f"batch {result['batch']}: {result['sequences_per_second']:.1f} seq/s, MFU "
        f"{mfu or 'n/a'}, loss {result['loss_first']:.2f} -> {result['loss_last']:.2f}, "
        f"attention {'+'.join(result['attention'])}",
    )
    return result


# -- the phases ----------------------------------------------------------------------------------------------------


def phase_devices(ctx: dict[str, Any]) -> dict[str, Any]:
    import jax
    import keras
    import keras_hub

    devices = jax.devices()
    kind, platform = devices[0].device_kind, devices[0].platform
    ctx["nominal"] = next((peak for pattern, peak in NOMINAL_BF16 if re.search(pattern, kind)), None)
    tensorflow = sys.modules.get("tensorflow") is not None
    versions = {
        "python": sys.version.split()[0],
        "jax": jax.__version__,
        "keras": keras.__version__,
        "keras_hub": keras_hub.__version__,
        "backend": keras.backend.backend(),
    }
    refused = (platform == "cpu" and not FLAGS.smoke) or versions["backend"] != "jax"
    ctx.update(refused=refused, platform=platform)
    return {
        "status": FAIL if refused else OK,
        "platform": platform,
        "device_kind": kind,
        "count": len(devices),
        "versions": versions,
        "tensorflow_imported": tensorflow,
        "nominal_bf16_flops": ctx["nominal"],
        "summary": f"{len(devices)} x {kind} ({platform}), jax {jax.__version__}, keras {keras.__version__}, "
        f"keras-hub {keras_hub.__version__}, backend {versions['backend']}, TensorFlow "
        f"{'imported (keras-hub imports it where installed)' if tensorflow else 'not imported'}"
        + ("; full sizes need an accelerator (or --smoke)" if platform == "cpu" and refused else ""),
    }


def phase_matmul(ctx: dict[str, Any]) -> dict[str, Any]:
    """A jitted bf16 n^3 matmul on random data: the best of 3 rounds of 10 dispatches, each round timed to the end of
    its last."""
    import jax
    import jax.numpy as jnp

    n = _sizes().matmul
    a, b = (jax.random.normal(key, (n, n), jnp.bfloat16) for key in jax.random.split(jax.random.key(0)))
    matmul = jax.jit(jnp.matmul)
    for _ in range(3):
        matmul(a, b).block_until_ready()
    rounds = []
    for _ in range(3):
        start = time.perf_counter()
        outs = [matmul(a, b) for _ in range(10)]
        jax.block_until_ready(outs)
        rounds.append((time.perf_counter() - start) / 10)
    ctx["peak"] = 2.0 * n**3 / min(rounds)
    nominal = f"{ctx['nominal'] / 1e12:.0f} nominal (data sheet)" if ctx.get("nominal") else "no nominal peak known"
    return {
        "status": OK,
        "size": n,
        "seconds": rounds,
        "measured_bf16_flops": ctx["peak"],
        "nominal_bf16_flops": ctx.get("nominal"),
        "summary": f"bf16 {n}^3: {ctx['peak'] / 1e12:.1f} TFLOP/s measured, {nominal}",
    }


def lamb_float64(weights, grad_steps, adapted, lr, beta_1=0.9, beta_2=0.999, epsilon=1e-6, weight_decay=0.01):
    """The paper's LAMB in float64 (You et al. 2019, Algorithm 2, with bias correction): per variable,
    r = m̂ / (√v̂ + ε) + λ·w, w ← w − lr·(‖w‖ / ‖r‖)·r; variables not `adapted` get neither decay nor trust ratio."""
    w = [np.asarray(x, np.float64) for x in weights]
    m, v = [np.zeros_like(x) for x in w], [np.zeros_like(x) for x in w]
    for t, grads in enumerate(grad_steps, start=1):
        for i, g in enumerate(np.asarray(x, np.float64) for x in grads):
            m[i] = beta_1 * m[i] + (1 - beta_1) * g
            v[i] = beta_2 * v[i] + (1 - beta_2) * g * g
            r = (m[i] / (1 - beta_1**t)) / (np.sqrt(v[i] / (1 - beta_2**t)) + epsilon)
            phi = 1.0
            if adapted[i]:
                r = r + weight_decay * w[i]
                w_norm, r_norm = np.linalg.norm(w[i]), np.linalg.norm(r)
                phi = w_norm / r_norm if w_norm > 0 and r_norm > 0 else 1.0
            w[i] = w[i] - lr * phi * r
    return w


def phase_lamb_vs_float64(
    ctx: dict[str, Any], steps: int = 5, lr: float = 1e-2, tolerance: float = 1e-4
) -> dict[str, Any]:
    """kbert's LAMB, jitted through Keras's stateless_apply on float32 variables on the device, against
    `lamb_float64`: each variable's error relative to the size of its float64 change over `steps` steps."""
    import jax
    import keras

    from kbert.optimizers import LAMB

    rng = np.random.default_rng(7)
    rows, cols = _sizes().lamb_shape
    names = {"kernel": (rows, cols), "bias": (cols,), "LayerNorm_gamma": (cols,)}  # the last two: excluded
    start = [
        (rng.normal(0, 0.02, shape) + (name == "LayerNorm_gamma")).astype(np.float32) for name, shape in names.items()
    ]
    grads = [
        [(rng.normal(0, 1, x.shape) * 10.0 ** rng.uniform(-3, 1)).astype(np.float32) for x in start]
        for _ in range(steps)
    ]
    variables = [keras.Variable(x, dtype="float32", name=name) for x, name in zip(start, names)]
    optimizer = LAMB(lr, weight_decay=0.01)
    optimizer.build(variables)
    apply = jax.jit(optimizer.stateless_apply)
    values, slots = [v.value for v in variables], [v.value for v in optimizer.variables]
    for step in grads:
        values, slots = apply(slots, step, values)
    device = str(next(iter(values[0].devices())))
    reference = lamb_float64(start, grads, [name == "kernel" for name in names], lr)
    errors = {
        name: float(np.linalg.norm(np.asarray(got, np.float64) - want) / np.linalg.norm(want - x0))
        for name, got, want, x0 in zip(names, values, reference, start)
    }
    worst = max(errors.values())
    return {
        "status": OK if worst < tolerance else FAIL,
        "relative_errors": errors,
        "tolerance": tolerance,
        "steps": steps,
        "device": device,
        "summary": f"{steps} steps on {device}: worst error {worst:.1e} of the float64 change (tolerance "
        f"{tolerance:.0e})",
    }


def phase_contest(ctx: dict[str, Any], who: str, seq: int) -> dict[str, Any]:
    """One contestant at `seq`: kbert searches for its batch from the cap; keras-hub starts at kbert's."""
    s, config = _sizes(), _bert_config()
    preds = s.seqs[seq]
    start = s.max_tokens // seq if who == "kbert_lamb" else ctx["batch"].get(seq, s.max_tokens // seq)
    data = _batch(start * s.timed_steps, seq, preds, config.vocab_size)
    result = _largest_batch(lambda b: _train_rate(who, config, data, b), start, s.min_batch)
    if who == "kbert_lamb":
        ctx["batch"][seq] = result["batch"]
    return _rate_figures(result, config, seq, preds, ctx, sentence_head=not who.startswith("hub"))


def _modern_config():
    """The run's BERT as a ModernBERT-class model of the same matmul FLOPs per token outside attention: rotary
    positions, GeGLU at 2/3 of the inner width (three projections for two), pre-LayerNorm without biases, a global
    layer every third and local windows of 128 tokens (8 in --smoke) between, masked LM only, no dropout."""
    from kbert.modeling import BertConfig

    bert = _bert_config()
    sizes = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "max_position_embeddings")
    return BertConfig.load("modernbert_base").replace(
        **{name: getattr(bert, name) for name in sizes},
        intermediate_size=bert.intermediate_size * 2 // 3,
        local_attention=8 if FLAGS.smoke else 128,
    )


def phase_modern(ctx: dict[str, Any], seq: int) -> dict[str, Any]:
    """kbert's ModernBERT-class model with kbert's LAMB at kbert BERT's batch, on masked-LM-only rows of one
    segment: its rate and MFU beside BERT's (`kbert_lamb_{seq}`)."""
    s, config = _sizes(), _modern_config()
    preds, start = s.seqs[seq], ctx["batch"].get(seq, s.max_tokens // seq)
    data = _batch(start * s.timed_steps, seq, preds, config.vocab_size)
    data = {k: v for k, v in data.items() if k != "next_sentence_labels"}
    data["segment_ids"] = np.zeros_like(data["segment_ids"])
    result = _largest_batch(lambda b: _train_rate("kbert_lamb", config, data, b), start, s.min_batch)
    return _rate_figures(result, config, seq, preds, ctx, sentence_head=False)


def phase_flash(ctx: dict[str, Any], on: bool, seq: int) -> dict[str, Any]:
    """kbert without attention dropout (the fused kernels take none), Keras's choice of attention (on) or XLA's
    unfused one (off)."""
    s, config = _sizes(), _bert_config(attention_probs_dropout_prob=0.0)
    preds, start = s.seqs[seq], ctx["batch"].get(seq, s.max_tokens // seq)
    data = _batch(start * s.timed_steps, seq, preds, config.vocab_size)
    result = _largest_batch(
        lambda b: _train_rate("kbert_lamb", config, data, b, flash=None if on else False), start, s.min_batch
    )
    result = _rate_figures(result, config, seq, preds, ctx, sentence_head=True)
    if on and ctx.get("platform") == "gpu" and "cudnn" not in result["attention"]:
        result.update(status=FAIL, summary=result["summary"] + "; cuDNN flash attention NOT used")
    return result


def _phases() -> dict[str, Callable[[dict[str, Any]], dict[str, Any]]]:
    """Every phase in running order: the contest at each length with the modern model beside it, then flash
    off/on, longest first."""
    seqs = list(_sizes().seqs)
    phases = {"devices": phase_devices, "matmul": phase_matmul, "lamb_vs_float64": phase_lamb_vs_float64}
    for seq in seqs:
        for who in ("kbert_lamb", "hub_lamb", "hub_adamw"):
            phases[f"{who}_{seq}"] = lambda ctx, who=who, seq=seq: phase_contest(ctx, who, seq)
        phases[f"modern_lamb_{seq}"] = lambda ctx, seq=seq: phase_modern(ctx, seq)
    for seq in sorted(seqs, reverse=True):
        for on in (False, True):
            name = f"flash_{'on' if on else 'off'}_{seq}"
            phases[name] = lambda ctx, on=on, seq=seq: phase_flash(ctx, on, seq)
    return phases


# -- wheels, the table, main ---------------------------------------------------------------------------------------


def prepare_wheels(directory: str) -> int:
    """Downloads WHEELS, at the versions installed here (what the smoke test ran), for CPython 3.12 manylinux
    x86-64, without their dependencies (the host has them); prints their sizes. 1 if pip fails or they would not fit
    the 64 MiB a device call carries."""
    from importlib.metadata import version

    platforms = [f"--platform=manylinux_{v}_x86_64" for v in ("2_28", "2_27", "2_17")] + [
        "--platform=manylinux2014_x86_64"
    ]
    pins = [f"{name}=={version(name)}" for name in WHEELS]
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version=3.12",
        "--implementation=cp",
        *platforms,
        "--dest",
        directory,
        *pins,
    ]
    if subprocess.run(command).returncode:
        return 1
    files = sorted(f for f in os.listdir(directory) if f.endswith(".whl"))
    total = sum(os.path.getsize(os.path.join(directory, f)) for f in files)
    for f in files:
        print(f"{os.path.getsize(os.path.join(directory, f)) / 2**20:8.2f} MiB  {f}")
    print(f"{total / 2**20:8.2f} MiB  in all ({len(files)} wheels)")
    return 0 if total < 48 * 2**20 else 1


def _table(results: dict[str, dict[str, Any]]) -> str:
    rows = [f"{'phase':16s} {'status':8s} {'seconds':>8s}  result"]
    rows += [f"{p:16s} {r['status']:8s} {r.get('seconds', 0):8.1f}  {r['summary']}" for p, r in results.items()]
    return "\n".join(rows)


def _run_phase(name: str, phase: Callable, ctx: dict[str, Any]) -> dict[str, Any]:
    print(f"accelerator_check_jax: {name} ...", flush=True)
    start = time.perf_counter()
    try:
        result = phase(ctx)
    except Exception as error:  # noqa: BLE001 - a phase's failure is its result; the next phase still runs
        result = {"status": FAIL, "summary": f"{type(error).__name__}: {str(error).strip()[:300]}"}
    result["seconds"] = time.perf_counter() - start
    _release()
    return result


def _quick_cpu_compiles() -> None:
    """--smoke: XLA's CPU compiler at its lowest optimisation, which compiles a train step 2 to 4 times faster (the
    figures do not matter there). Set before JAX starts; the thunk flag only where JAX still knows it (< 0.11)."""
    from importlib.metadata import version

    quick = ["--xla_backend_optimization_level=0"]
    if tuple(int(p) for p in version("jax").split(".")[:2]) < (0, 11):
        quick.append("--xla_cpu_use_thunk_runtime=false")
    os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), *quick]).strip()


def main(argv: list[str]) -> None:
    del argv
    if FLAGS.prepare_wheels:
        sys.exit(prepare_wheels(FLAGS.prepare_wheels))
    if FLAGS.smoke and "jax" not in sys.modules:
        _quick_cpu_compiles()
    phases = _phases()
    chosen = FLAGS.phases or list(phases)
    unknown = sorted(set(chosen) - set(phases))
    if unknown:
        raise app.UsageError(f"--phases: unknown {', '.join(unknown)}; choose from {', '.join(phases)}")
    path = FLAGS.json or os.path.join(tempfile.gettempdir(), "accelerator_check_jax.json")
    began, last, ctx, results = time.perf_counter(), 0.0, {"batch": {}}, {}
    for name in ["devices"] + [p for p in phases if p in chosen and p != "devices"]:
        elapsed = time.perf_counter() - began
        if ctx.get("refused"):
            results[name] = {"status": SKIPPED, "summary": "the devices phase refused this host"}
        elif name.startswith(("kbert", "hub", "modern", "flash")) and elapsed + last > FLAGS.budget_s:
            results[name] = {
                "status": SKIPPED,
                "summary": f"--budget_s={FLAGS.budget_s}: {elapsed:.0f} s gone, "
                f"the last training phase took {last:.0f} s",
            }
        else:
            results[name] = _run_phase(name, phases[name], ctx)
            last = results[name]["seconds"] if name.startswith(("kbert", "hub", "flash")) else last
        report = {
            "smoke": FLAGS.smoke,
            "ok": all(r["status"] == OK for r in results.values()),
            "seconds": time.perf_counter() - began,
            "phases": results,
        }
        with open(path, "w") as f:
            json.dump(report, f, indent=1, default=float)
    print(f"\n{_table(results)}\n\nresults: {path}")
    statuses = {r["status"] for r in results.values()}
    sys.exit(1 if FAIL in statuses else 3 if SKIPPED in statuses else 0)


if __name__ == "__main__":
    app.run(main)
