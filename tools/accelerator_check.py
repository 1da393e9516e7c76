"""One-shot check of a GPU or TPU host for kbert: devices, numerics, replicas, exact resume, throughput, memory.

    python tools/accelerator_check.py            # on the GPU or TPU host with kbert installed: at most ~10 minutes
    python tools/accelerator_check.py --smoke    # every phase at tiny sizes on the CPU (tests/ runs it)

Phases, each in a subprocess with its own time limit (`--smoke` runs them all in one process):

  report      the device report of kbert-pretrain (and its refusal), the time of the first matmul
  numerics    bert_mini, 20 steps bf16 + LAMB + gradient accumulation 2 + global_clipnorm, XLA off and on: finite,
              falling, agreeing within 2%; fp16 with loss scaling too on a GPU
  replicas    two devices under MirroredStrategy reach one device's weights (TF32 off, dropout 0); GPU and CPU
  resume      kbert-pretrain killed with SIGKILL after its first checkpoint and rerun ends bit-identical to an
              uninterrupted run (train.deterministic); SIGTERM exits with status 42
  throughput  bert_base bf16 at the largest micro-batch that fits (doubling search), XLA off and on: sequences/s,
              MFU against the chip's bf16 peak, the LAMB update's share of a step, input-only sequences/s with static
              and dynamic masking
  memory      the largest bert_large micro-batch at seq 512, as the gradient_accumulation_steps each phase-2 config
              in configs/experiments needs

Writes every figure to one JSON file (`--json`, default WORK_DIR/accelerator_check.json), prints one table, and
exits 1 if a phase failed. The data is made here (random records with a skewed token distribution, so the loss
falls), so nothing but kbert is needed. docs/accelerators.md says what good figures look like.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# H100/H200 JIT-compile TF 2.20's PTX at start-up; a cache too small for it compiles again on every start.
os.environ.setdefault("CUDA_CACHE_MAXSIZE", str(4 << 30))

from absl import app, flags  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
flags.DEFINE_bool("smoke", False, "Every phase at tiny sizes on the CPU, in one process (about 1.5 min on 2 cores).")
flags.DEFINE_string("work_dir", None, "Data, runs and per-phase results; default: a new temporary folder.")
flags.DEFINE_string("json", None, "The results file; default WORK_DIR/accelerator_check.json.")
flags.DEFINE_list("phases", [], "Run only these phases (default: all).")
flags.DEFINE_string("tpu", "local", "TPU name for TPUStrategy on a TPU host ('local' on a TPU VM).")
flags.DEFINE_list("child", [], "Internal: run these phases in this process and write their results.")
FLAGS = flags.FLAGS

OK, FAIL, SKIPPED = "ok", "FAIL", "skipped"


@dataclasses.dataclass(frozen=True)
class Sizes:
    """Everything the phases size: the real ones, and tiny ones for --smoke."""

    models: dict[str, dict[str, Any]]  # role ("mini", "base", "large") -> params_override entries of the model
    seq: int
    preds: int
    long_seq: int
    long_preds: int
    vocab: int  # token ids in the records stay below it
    numerics_batch: int
    numerics_steps: int
    replica_steps: int
    resume_steps: int
    resume_interval: int
    timed_steps: int
    base_search: tuple[int, int]  # first micro-batch tried, largest tried
    large_search: tuple[int, int]
    limits: dict[str, int]  # phase -> seconds


_TINY = {
    "model.bert": "bert_tiny",
    "model.overrides.vocab_size": 512,
    "model.overrides.hidden_size": 32,
    "model.overrides.num_attention_heads": 2,
    "model.overrides.intermediate_size": 64,
    "model.overrides.num_hidden_layers": 2,
    "model.overrides.max_position_embeddings": 64,
}
FULL = Sizes(
    models={
        "mini": {"model.bert": "bert_mini"},
        "base": {"model.bert": "bert_base"},
        "large": {"model.bert": "bert_large"},
    },
    seq=128,
    preds=20,
    long_seq=512,
    long_preds=80,
    vocab=30522,
    numerics_batch=32,
    numerics_steps=20,
    replica_steps=3,
    resume_steps=40,
    resume_interval=4,
    timed_steps=10,
    base_search=(64, 1024),
    large_search=(8, 256),
    limits={"report": 60, "numerics": 120, "replicas": 60, "resume": 120, "throughput": 150, "memory": 90},
)
SMOKE = Sizes(
    models={"mini": _TINY, "base": _TINY, "large": _TINY},
    seq=32,
    preds=5,
    long_seq=64,
    long_preds=10,
    vocab=512,
    numerics_batch=8,
    numerics_steps=10,
    replica_steps=2,
    resume_steps=12,
    resume_interval=2,
    timed_steps=3,
    base_search=(8, 8),  # one size each: the search's loop runs, without a second model to build
    large_search=(4, 4),
    # Twice what an idle 2-core machine needs: the suite runs this beside another test on the same cores.
    limits={"report": 60, "numerics": 120, "replicas": 60, "resume": 180, "throughput": 120, "memory": 60},
)
PHASES = list(FULL.limits)


def _sizes() -> Sizes:
    return SMOKE if FLAGS.smoke else FULL


# -- data and configs --------------------------------------------------------------------------------------------


def _records(
    directory: str, seq: int, preds: int, vocab: int, masked: bool = True, count: int = 256, shards: int = 2
) -> str:
    """Random records under `directory` (written once): masked, or unmasked for dynamic masking (as
    `--no_masking` writes them); returns their glob. Token ids follow a Zipf law over the first thousand ids, so a
    model can learn the frequencies and the loss falls within a few steps."""
    import numpy as np
    import tensorflow as tf

    from kbert.data.tfrecord_writer import example_proto

    pattern = os.path.join(directory, "train-*.tfrecord")
    if tf.io.gfile.glob(pattern):
        return pattern
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(0)

    def zipf(n: int):
        return 5 + (rng.zipf(1.3, n) - 1) % (min(vocab, 1000) - 5)

    for shard in range(shards):
        with tf.io.TFRecordWriter(os.path.join(directory, f"train-{shard}.tfrecord")) as writer:
            for _ in range(count // shards):
                features = {
                    "input_ids": zipf(seq),
                    "input_mask": np.ones(seq, np.int64),
                    "segment_ids": (np.arange(seq) >= seq // 2).astype(np.int64),
                    "next_sentence_labels": rng.integers(0, 2, 1),
                }
                if masked:
                    features.update(
                        masked_lm_positions=np.sort(rng.choice(np.arange(1, seq), preds, replace=False)),
                        masked_lm_ids=zipf(preds),
                        masked_lm_weights=np.ones(preds, np.float32),
                    )
                writer.write(example_proto(features))
    return pattern


def _overrides(role: str, long: bool = False, **values: Any) -> str:
    """The `--params_override` of a run of the `role` model on this tool's records (written on first use)."""
    s = _sizes()
    seq, preds = (s.long_seq, s.long_preds) if long else (s.seq, s.preds)
    entries = {
        **s.models[role],
        "data.train_files": _records(os.path.join(FLAGS.work_dir, f"data/seq{seq}"), seq, preds, s.vocab),
        "data.seq_length": seq,
        "data.max_predictions": preds,
        "optimizer.type": "lamb",
        "schedule.peak_learning_rate": 2e-3,
        "schedule.warmup_steps": 2,
        "train.steps_per_loop": 1,
        **{k.replace("__", "."): v for k, v in values.items()},
    }
    return ",".join(f"{k}={v}" for k, v in entries.items())


def _config(role: str, long: bool = False, **values: Any):
    from kbert.experiment import load_experiment

    return load_experiment([], _overrides(role, long, **values))


# -- devices -----------------------------------------------------------------------------------------------------


class Context:
    """What the phases of a child process share: the host's accelerators and, made on first use, the strategy the
    measurements run under (one GPU or the CPU, or every core of the TPU) and its device kind. The resume phase
    never makes it: its kbert-pretrain processes need the TPU, which one process holds at a time."""

    def __init__(self, phases: list[str]):
        from kbert.runtime import devices

        self.host = devices.find_accelerators()
        self.tpu = self.host.kind == "TPU" and not FLAGS.smoke
        if not self.tpu:
            _split_devices(phases)
        self._strategy = None
        self.strategy_seconds = 0.0

    @property
    def strategy(self):
        from kbert.runtime.strategy import make_strategy

        if self._strategy is None:
            self._strategy, self.strategy_seconds = _timed(
                lambda: make_strategy("tpu", FLAGS.tpu) if self.tpu else make_strategy("one_device")
            )
        return self._strategy

    @property
    def kind(self) -> str:
        from kbert.runtime import devices

        return devices.strategy_devices(self.strategy)[0]

    def pair(self) -> list[str]:
        """Two logical devices of the strategy's kind, or [] (a TPU, or a host without them)."""
        import tensorflow as tf

        logical = [] if self.tpu else tf.config.list_logical_devices(self.kind)
        return [d.name for d in logical[:2]] if len(logical) > 1 else []


def _split_devices(phases: list[str]) -> None:
    """Two logical devices for `replicas` (one GPU split in two, or the CPU in two), before TF starts its runtime."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if "replicas" not in phases or len(gpus) > 1:
        return
    device = gpus[0] if gpus else tf.config.list_physical_devices("CPU")[0]
    memory = {"memory_limit": 8 * 1024} if gpus else {}  # MiB per half: plenty for bert_mini, fits a 16 GB GPU
    tf.config.set_logical_device_configuration(device, [tf.config.LogicalDeviceConfiguration(**memory)] * 2)


# -- shared measurements -------------------------------------------------------------------------------------------


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def _is_out_of_memory(error: Exception) -> bool:
    import tensorflow as tf

    return isinstance(error, tf.errors.ResourceExhaustedError) or (
        isinstance(error, tf.errors.OpError) and re.search(r"RESOURCE_EXHAUSTED|out of memory", str(error)) is not None
    )


def _release() -> None:
    """Frees the last trainer's device memory before the next size is tried."""
    import keras

    keras.backend.clear_session()
    gc.collect()


def _largest_micro_batch(ctx: Context, role: str, long: bool, search: tuple[int, int], budget_s: float) -> int:
    """The largest power-of-two multiple of `search[0]` up to `search[1]` sequences per replica that trains two
    steps without running out of device memory (XLA off); 0 if even the first does not fit."""
    from kbert.bench.trainer_from_config import trainer_from_config
    from kbert.experiment import task_of

    replicas = ctx.strategy.num_replicas_in_sync
    best, micro, deadline = 0, search[0], time.monotonic() + budget_s
    while micro <= search[1] and time.monotonic() < deadline:
        try:
            config = _config(
                role, long, train__global_batch_size=micro * replicas, train__mixed_precision="mixed_bfloat16"
            )
            trainer_from_config(config, ctx.strategy, task_of(config)).train(2)
        except Exception as error:  # noqa: BLE001 - only running out of memory ends the search quietly
            if not _is_out_of_memory(error):
                raise
            break
        finally:
            _release()
        best, micro = micro, micro * 2
    return best


def accumulation_steps(global_batch: int, micro_batch: int, replicas: int) -> int:
    """The fewest micro-batches per step that keep each at most `micro_batch` and split `global_batch` evenly."""
    steps = max(math.ceil(global_batch / (micro_batch * replicas)), 1)
    while global_batch % (steps * replicas) and steps < global_batch:
        steps += 1
    return steps


# -- the phases ----------------------------------------------------------------------------------------------------


def phase_report(ctx: Context) -> dict[str, Any]:
    import tensorflow as tf

    from kbert.runtime import devices

    size = 512 if FLAGS.smoke else 8192
    device = ctx.strategy.extended.worker_devices[0]
    with tf.device(device):
        a = tf.random.normal((size, size), dtype=tf.bfloat16)
        _, first = _timed(lambda: tf.linalg.matmul(a, a).numpy())  # CUDA/TPU start-up and kernel loading
        _, second = _timed(lambda: tf.linalg.matmul(a, a).numpy())
    reason = devices.refusal(ctx.host, ctx.kind, "auto", devices.Software.of_this_process())
    return {
        "status": FAIL if reason else OK,
        "report_line": devices.report_line(ctx.host, ctx.strategy),
        "refusal": reason,
        "strategy_seconds": ctx.strategy_seconds,
        "first_matmul_seconds": first,
        "second_matmul_seconds": second,
        "matmul_bf16_tflops": 2 * size**3 / second / 1e12,
        "summary": f"{ctx.kind} x{len(ctx.strategy.extended.worker_devices)}, first matmul {first:.2f} s"
        + (f"; {reason}" if reason else ""),
    }


def _losses(ctx: Context, precision: str, jit: bool) -> list[float]:
    """Per-step losses of the mini model (LAMB, accumulation 2, global_clipnorm 1.0); NaN at the first non-finite
    step."""
    from kbert.bench.trainer_from_config import trainer_from_config
    from kbert.errors import NonFiniteLossError
    from kbert.experiment import task_of

    config = _config(
        "mini",
        train__global_batch_size=_sizes().numerics_batch,
        train__gradient_accumulation_steps=2,
        train__mixed_precision=precision,
        train__jit_compile=jit,
        optimizer__global_clipnorm=1.0,
    )
    trainer = trainer_from_config(config, ctx.strategy, task_of(config))
    losses = []
    try:
        for _ in range(_sizes().numerics_steps):
            losses.append(float(trainer.train(1)["loss"]))
    except NonFiniteLossError:
        losses.append(float("nan"))
    _release()
    return losses


def phase_numerics(ctx: Context) -> dict[str, Any]:
    runs = {"bf16": ("mixed_bfloat16", False), "bf16_xla": ("mixed_bfloat16", True)}
    if ctx.kind == "GPU":
        runs["fp16"] = ("mixed_float16", False)
    losses = {name: _losses(ctx, *run) for name, run in runs.items()}
    tail = {name: sum(run[-5:]) / 5 for name, run in losses.items()}
    checks = {f"{name}_finite": all(math.isfinite(x) for x in run) for name, run in losses.items()}
    checks.update({f"{name}_falling": tail[name] < sum(run[:5]) / 5 for name, run in losses.items()})
    gap = abs(tail["bf16_xla"] - tail["bf16"]) / tail["bf16"]
    checks["xla_agrees_2pct"] = gap < 0.02
    return {
        "status": OK if all(checks.values()) else FAIL,
        "losses": losses,
        "checks": checks,
        "xla_relative_gap": gap,
        "fp16": "run" if "fp16" in runs else "skipped (GPU only)",
        "summary": ", ".join(f"{n} {run[0]:.3f}->{tail[n]:.3f}" for n, run in losses.items()) + f"; XLA gap {gap:.2%}",
    }


def _weights_after(config, strategy, steps: int):
    from kbert.bench.trainer_from_config import trainer_from_config
    from kbert.experiment import task_of

    trainer = trainer_from_config(config, strategy, task_of(config))
    loss = float(trainer.train(steps)["loss"])
    weights = [w.numpy() for w in trainer.model.weights]
    _release()
    return loss, weights


def phase_replicas(ctx: Context) -> dict[str, Any]:
    import numpy as np
    import tensorflow as tf

    pair = ctx.pair()
    if not pair:
        return {"status": SKIPPED, "summary": f"needs two {ctx.kind} devices (on a TPU: not implemented)"}
    tf.config.experimental.enable_tensor_float_32_execution(False)
    config = _config(
        "mini",
        train__global_batch_size=_sizes().numerics_batch,
        model__overrides__hidden_dropout_prob=0.0,
        model__overrides__attention_probs_dropout_prob=0.0,
    )
    steps = _sizes().replica_steps
    one_loss, one = _weights_after(config, tf.distribute.OneDeviceStrategy(pair[0]), steps)
    two_loss, two = _weights_after(config, tf.distribute.MirroredStrategy(pair), steps)
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(one, two))
    moved = max(float(np.max(np.abs(w))) for w in one)
    return {
        "status": OK if diff < 1e-4 else FAIL,
        "devices": pair,
        "max_abs_weight_diff": diff,
        "loss_one_device": one_loss,
        "loss_two_devices": two_loss,
        "max_abs_weight": moved,
        "summary": f"{steps} steps on {', '.join(pair)}: max |w1 - w2| = {diff:.1e}",
    }


def _pretrain(ctx: Context, model_dir: str, steps: int) -> subprocess.Popen:
    """kbert-pretrain on this tool's records with deterministic ops and a checkpoint every few steps; its output
    goes to MODEL_DIR.log."""
    s = _sizes()
    overrides = _overrides(
        "mini",
        train__global_batch_size=s.numerics_batch,
        train__total_steps=steps,
        train__steps_per_loop=s.resume_interval,
        train__checkpoint_interval=s.resume_interval,
        train__summary_interval=s.resume_interval,
        train__deterministic=True,
    )
    strategy = ["--strategy=tpu", f"--tpu={FLAGS.tpu}"] if ctx.tpu else ["--strategy=one_device"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    os.makedirs(os.path.dirname(model_dir), exist_ok=True)
    with open(f"{model_dir}.log", "a") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kbert.run_pretraining",
                f"--params_override={overrides}",
                f"--model_dir={model_dir}",
                *strategy,
            ],
            env=env,
            stdout=log,
            stderr=log,
        )


def _signal_mid_run(process: subprocess.Popen, model_dir: str, signum: int) -> bool:
    """Sends `signum` once the run has trained a loop past its first checkpoint (its progress line is in the log),
    so a whole checkpoint exists and the kill lands in training or in the next save; False if the run ended first."""
    interval = _sizes().resume_interval
    while process.poll() is None:
        with open(f"{model_dir}.log") as log:
            steps = re.findall(r"^step (\d+)/", log.read(), re.M)
        if steps and int(steps[-1]) > interval:
            process.send_signal(signum)
            return True
        time.sleep(0.02)
    return False


def _exit_code(process: subprocess.Popen) -> int:
    return process.wait(timeout=300)


def _log_tail(model_dir: str) -> str:
    with open(f"{model_dir}.log") as f:
        return f.read()[-1500:]


def _differing_variables(a: str, b: str) -> list[str]:
    """The variables whose values differ between the newest checkpoints of two model dirs (the save counter aside)."""
    import numpy as np
    import tensorflow as tf

    from kbert.runtime.checkpointing import latest_checkpoint

    first, second = tf.train.load_checkpoint(latest_checkpoint(a)), tf.train.load_checkpoint(latest_checkpoint(b))
    names = set(first.get_variable_to_shape_map()) | set(second.get_variable_to_shape_map())
    return sorted(
        n
        for n in names
        if "save_counter" not in n
        and n != "_CHECKPOINTABLE_OBJECT_GRAPH"
        and not (
            second.has_tensor(n) and first.has_tensor(n) and np.array_equal(first.get_tensor(n), second.get_tensor(n))
        )
    )


def phase_resume(ctx: Context) -> dict[str, Any]:
    steps, runs = _sizes().resume_steps, os.path.join(FLAGS.work_dir, "resume")
    shutil.rmtree(runs, ignore_errors=True)  # a rerun in the same --work_dir would resume the last one's runs
    whole, killed_dir, term_dir = f"{runs}/uninterrupted", f"{runs}/killed", f"{runs}/sigterm"
    # Two processes at a time (most of a short run is TensorFlow starting up, on one core), but one on a TPU,
    # which a single process holds.
    uninterrupted = _pretrain(ctx, whole, steps)
    if ctx.tpu:
        uninterrupted.wait()
    victim = _pretrain(ctx, killed_dir, steps)
    killed = _signal_mid_run(victim, killed_dir, signal.SIGKILL)
    codes = {"uninterrupted": _exit_code(uninterrupted), "killed": _exit_code(victim)}
    resumed = _pretrain(ctx, killed_dir, steps)
    if ctx.tpu:
        resumed.wait()
    victim = _pretrain(ctx, term_dir, 100 * steps)  # long enough to be running when the signal comes
    terminated = _signal_mid_run(victim, term_dir, signal.SIGTERM)
    codes.update(resumed=_exit_code(resumed), sigterm=_exit_code(victim))
    term_code = codes["sigterm"]
    differing = _differing_variables(whole, killed_dir) if codes["uninterrupted"] == codes["resumed"] == 0 else ["?"]
    ok = killed and not differing and terminated and term_code == 42
    return {
        "status": OK if ok else FAIL,
        "killed_mid_run": killed,
        "bit_identical": not differing,
        "differing_variables": differing[:20],
        "sigterm_exit_code": term_code,
        "exit_codes": codes,
        "log_tail": "" if ok else "\n".join(_log_tail(d) for d in (whole, killed_dir, term_dir)),
        "summary": f"kill -9 + resume {'bit-identical' if not differing else 'DIFFERS'} "
        f"({len(differing)} variables differ); SIGTERM exit {term_code}",
    }


def _step_rate(trainer, micro_batch: int, replicas: int, steps: int) -> float:

    trainer.train(2)  # trace, compile, warm up
    _, seconds = _timed(lambda: trainer.train(steps))
    return micro_batch * replicas * steps / seconds


def _update_seconds(trainer, repeats: int) -> float:
    """Seconds of one optimizer update (LAMB on every trainable variable) alone, in a tf.function per replica."""
    import tensorflow as tf

    variables = trainer.train_variables
    grads = [tf.fill(v.shape, tf.constant(1e-3, v.dtype)) for v in variables]

    @tf.function
    def update():
        trainer.strategy.run(lambda: trainer.optimizer.apply_gradients(zip(grads, variables)))

    def updates():
        for _ in range(repeats):
            update()
        return variables[0].numpy()  # waits for the queued updates

    update()
    return _timed(updates)[1] / repeats


def _input_rate(dynamic: bool, batch: int, batches: int) -> float:
    """Sequences/s of the input pipeline alone (kbert.data.pretraining_dataset): masked records, or unmasked ones
    masked on the fly."""
    from kbert.data import pretraining_dataset

    s = _sizes()
    files = _records(
        os.path.join(FLAGS.work_dir, f"data/seq{s.seq}{'_unmasked' if dynamic else ''}"),
        s.seq,
        s.preds,
        s.vocab,
        masked=not dynamic,
    )
    iterator = iter(
        pretraining_dataset(files, s.seq, s.preds, batch, dynamic_masking=dynamic, vocab_size=s.vocab, seed=0)
    )
    next(iterator)
    _, seconds = _timed(lambda: [next(iterator) for _ in range(batches)])
    return batch * batches / seconds


def phase_throughput(ctx: Context) -> dict[str, Any]:
    from kbert.bench.trainer_from_config import trainer_from_config
    from kbert.experiment import task_of
    from kbert.runtime.flops import model_flops_utilisation, peak_bf16_flops, training_flops_per_sequence

    s, replicas = _sizes(), ctx.strategy.num_replicas_in_sync
    micro = _largest_micro_batch(ctx, "base", False, s.base_search, budget_s=s.limits["throughput"] / 3)
    if not micro:
        return {"status": FAIL, "summary": f"no micro-batch of {s.base_search[0]} fits"}
    rates, lamb_share = {}, 0.0
    for jit in (False, True):
        config = _config(
            "base",
            train__global_batch_size=micro * replicas,
            train__mixed_precision="mixed_bfloat16",
            train__jit_compile=jit,
        )
        trainer = trainer_from_config(config, ctx.strategy, task_of(config))
        rates["xla" if jit else "no_xla"] = rate = _step_rate(trainer, micro, replicas, s.timed_steps)
        if not jit:  # the update is not compiled either way (train.jit_compile covers forward and backward)
            lamb_share = _update_seconds(trainer, s.timed_steps) * rate / (micro * replicas)
        _release()
    flops = training_flops_per_sequence(config.model.bert_config(), s.seq, s.preds)
    peak = peak_bf16_flops(ctx.host.model) if ctx.kind == ctx.host.kind else None
    mfu = {k: model_flops_utilisation(r, flops, peak * replicas) for k, r in rates.items()} if peak else None
    inputs = {
        kind: _input_rate(kind == "dynamic", micro * replicas, 4 * s.timed_steps) for kind in ("static", "dynamic")
    }
    best = max(rates.values())
    return {
        "status": OK,
        "micro_batch": micro,
        "replicas": replicas,
        "sequences_per_second": rates,
        "flops_per_sequence": flops,
        "peak_bf16_flops_per_device": peak,
        "mfu": mfu,
        "lamb_update_share": lamb_share,
        "input_sequences_per_second": inputs,
        "summary": f"micro-batch {micro}: {rates['no_xla']:.0f} / {rates['xla']:.0f} seq/s (XLA off/on), MFU "
        f"{'n/a' if not mfu else format(max(mfu.values()), '.1%')}, LAMB {lamb_share:.0%} of a step, "
        f"input {inputs['static']:.0f} / {inputs['dynamic']:.0f} seq/s (static/dynamic)"
        + ("" if min(inputs.values()) > best else "; INPUT-BOUND"),
    }


def phase_memory(ctx: Context) -> dict[str, Any]:
    import glob

    from kbert.config import read_yaml

    s, replicas = _sizes(), ctx.strategy.num_replicas_in_sync
    micro = _largest_micro_batch(ctx, "large", True, s.large_search, budget_s=s.limits["memory"] * 0.8)
    if not micro:
        return {"status": FAIL, "summary": f"no bert_large micro-batch of {s.large_search[0]} at seq {s.long_seq} fits"}
    needed = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "configs/experiments/*phase2*.yaml"))):
        recipe = read_yaml(path)
        train = recipe["train"]
        if recipe["model"]["bert"] == "bert_large":
            needed[os.path.basename(path)] = {
                "gradient_accumulation_steps": accumulation_steps(train["global_batch_size"], micro, replicas),
                "in_the_file": train["gradient_accumulation_steps"],
            }
    return {
        "status": OK,
        "micro_batch": micro,
        "seq_length": s.long_seq,
        "replicas": replicas,
        "accumulation": needed,
        "summary": f"micro-batch {micro} at seq {s.long_seq}: "
        + ", ".join(
            f"{name} needs gradient_accumulation_steps={v['gradient_accumulation_steps']} (file: {v['in_the_file']})"
            for name, v in needed.items()
        ),
    }


PHASE_FUNCTIONS = {
    "report": phase_report,
    "numerics": phase_numerics,
    "replicas": phase_replicas,
    "resume": phase_resume,
    "throughput": phase_throughput,
    "memory": phase_memory,
}


# -- running phases: the child process and the parent --------------------------------------------------------------


def _result_path(phase: str) -> str:
    return os.path.join(FLAGS.work_dir, "results", f"{phase}.json")


def _run_child(phases: list[str]) -> None:
    """Runs `phases` here, each result (or its error) written to its own file as soon as it is known."""
    import tensorflow as tf
    from absl import logging

    logging.set_verbosity(logging.WARNING)  # strategies log every all-reduce they plan at INFO
    tf.get_logger().setLevel("ERROR")  # a new trainer per measured size is a new tf.function: retracing warnings
    os.makedirs(os.path.dirname(_result_path(phases[0])), exist_ok=True)
    ctx = Context(phases)
    for phase in phases:
        print(f"accelerator_check: {phase} ...", flush=True)
        start = time.perf_counter()
        try:
            result = PHASE_FUNCTIONS[phase](ctx)
        except Exception as error:  # noqa: BLE001 - a phase's failure is its result; the next phase still runs
            result = {"status": FAIL, "summary": f"{type(error).__name__}: {str(error).strip()[:300]}"}
        result["seconds"] = time.perf_counter() - start
        with open(_result_path(phase), "w") as f:
            json.dump(result, f, indent=1, default=float)


def _spawn(group: list[str]) -> dict[str, dict[str, Any]]:
    """Runs `group` in a child process under the sum of their time limits; a phase without a result failed."""
    limit = sum(_sizes().limits[p] for p in group)
    for phase in group:  # a rerun in the same --work_dir must not report the last one's results
        if os.path.exists(_result_path(phase)):
            os.remove(_result_path(phase))
    command = [
        sys.executable,
        os.path.abspath(__file__),
        f"--child={','.join(group)}",
        f"--work_dir={FLAGS.work_dir}",
        f"--tpu={FLAGS.tpu}",
    ] + (["--smoke"] if FLAGS.smoke else [])
    process = subprocess.Popen(command, start_new_session=True)  # a group of its own: kill its kbert-pretrains too
    try:
        process.wait(timeout=limit)
        ended = f"the process exited with status {process.returncode} first"
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        ended = f"time limit of {limit} s reached"
    return {phase: _read_result(phase, ended) for phase in group}


def _read_result(phase: str, ended: str) -> dict[str, Any]:
    if not os.path.exists(_result_path(phase)):
        return {"status": FAIL, "summary": f"no result: {ended}"}
    with open(_result_path(phase)) as f:
        return json.load(f)


def _table(results: dict[str, dict[str, Any]]) -> str:
    rows = [f"{'phase':11s} {'status':8s} {'seconds':>8s}  result"]
    rows += [f"{p:11s} {r['status']:8s} {r.get('seconds', 0):8.1f}  {r['summary']}" for p, r in results.items()]
    return "\n".join(rows)


def main(argv: list[str]) -> None:
    del argv
    FLAGS.work_dir = FLAGS.work_dir or tempfile.mkdtemp(prefix="accelerator_check-")
    if FLAGS.child:
        _run_child(FLAGS.child)
        return
    phases = FLAGS.phases or PHASES
    unknown = sorted(set(phases) - set(PHASES))
    if unknown:
        raise app.UsageError(f"--phases: unknown {', '.join(unknown)}; choose from {', '.join(PHASES)}")
    results = {}
    for group in [phases] if FLAGS.smoke else [[p] for p in phases]:
        if results.get("report", {}).get("refusal"):  # the rest would measure the CPU at full sizes
            results.update({p: {"status": SKIPPED, "summary": "the report phase refused this host"} for p in group})
            continue
        results.update(_spawn(group))
    report = {
        "smoke": FLAGS.smoke,
        "work_dir": FLAGS.work_dir,
        "ok": all(r["status"] != FAIL for r in results.values()),
        "phases": results,
    }
    path = FLAGS.json or os.path.join(FLAGS.work_dir, "accelerator_check.json")
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
    print(f"\n{_table(results)}\n\nresults: {path}")
    sys.exit(0 if report["ok"] else 1)


if __name__ == "__main__":
    app.run(main)
