"""Time of one optimizer step over BERT-base parameter shapes: kbert LAMB/LARS vs Keras Lamb/AdamW and Model
Garden's LAMB, with and without XLA, in one run; or, with `--backend=jax`, kbert LAMB/LARS vs Keras AdamW/Lamb
under JAX (`stateless_apply` in `jax.jit`, buffers donated, as `model.fit` steps).

    python tools/bench_optimizers.py                 # BERT-base, ~110M parameters, TensorFlow
    python tools/bench_optimizers.py --num_layers=4  # smaller, for a busy machine
    python tools/bench_optimizers.py --backend=jax   # the same shapes under JAX (re-runs itself with KERAS_BACKEND)

Every contestant updates its own copy of the same variables with the same fixed gradients (the backward pass is
not timed). Rounds alternate between contestants so machine noise hits all of them; the median round is kept.
Prints ms per step and the ratio to Keras AdamW under the same jit_compile setting.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import bench_flags  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from kbert.optimizers import LAMB, LARS  # noqa: E402
from kbert.optimizers.layerwise import DEFAULT_EXCLUDE  # noqa: E402

flags.DEFINE_integer("num_layers", 12, "Transformer layers (BERT-base: 12).")
flags.DEFINE_integer("hidden_size", 768, "Hidden size (BERT-base: 768).")
flags.DEFINE_integer("vocab_size", 30522, "Vocabulary size.")
bench_flags.define(steps=3, rounds=5)
flags.DEFINE_list(
    "jit_compile",
    ["false", "true"],
    "jit_compile settings to time (XLA on CPU compiles slowly); TensorFlow only: JAX always compiles.",
)
flags.DEFINE_enum(
    "backend",
    "tensorflow",
    ["tensorflow", "jax"],
    "Keras backend to time on; another than this process's re-runs the script with KERAS_BACKEND set.",
)
FLAGS = flags.FLAGS


def bert_parameter_shapes(num_layers: int, hidden: int, vocab: int) -> dict[str, tuple[int, ...]]:
    """Google BERT's variable names (slashes as underscores) and shapes."""
    shapes = {
        "word_embeddings": (vocab, hidden),
        "position_embeddings": (512, hidden),
        "token_type_embeddings": (2, hidden),
        "embeddings_LayerNorm_gamma": (hidden,),
        "embeddings_LayerNorm_beta": (hidden,),
    }
    dense = {
        "query": (hidden, hidden),
        "key": (hidden, hidden),
        "value": (hidden, hidden),
        "attention_output": (hidden, hidden),
        "intermediate": (hidden, 4 * hidden),
        "output": (4 * hidden, hidden),
    }
    for i in range(num_layers):
        for name, (fan_in, fan_out) in dense.items():
            shapes[f"layer_{i}_{name}_kernel"] = (fan_in, fan_out)
            shapes[f"layer_{i}_{name}_bias"] = (fan_out,)
        for norm in ("attention_LayerNorm", "output_LayerNorm"):
            shapes[f"layer_{i}_{norm}_gamma"] = (hidden,)
            shapes[f"layer_{i}_{norm}_beta"] = (hidden,)
    shapes["pooler_kernel"], shapes["pooler_bias"] = (hidden, hidden), (hidden,)
    return shapes


def keras_decayed(optimizer_class):
    """A factory of a Keras optimizer decaying weights as kbert's LAMB does: λ = 0.01, LayerNorm and biases excluded."""

    def make():
        optimizer = optimizer_class(1e-4, weight_decay=0.01)
        optimizer.exclude_from_weight_decay(var_names=list(DEFAULT_EXCLUDE))
        return optimizer

    return make


def contestants():
    """name -> (optimizer factory, variable factory); Model Garden's tf_keras LAMB under TensorFlow only."""
    keras_variable = lambda value, name: keras.Variable(value, name=name)  # noqa: E731
    keras_3 = {
        "Keras AdamW": (keras_decayed(keras.optimizers.AdamW), keras_variable),
        "kbert LAMB": (lambda: LAMB(1e-4), keras_variable),
        # LAMB less its trust ratio (every variable excluded from layer adaptation): what its two norms cost.
        "LAMB, no trust ratio": (lambda: LAMB(1e-4, exclude_from_layer_adaptation=[".*"]), keras_variable),
        "kbert LARS": (lambda: LARS(1e-4), keras_variable),
        "Keras Lamb": (keras_decayed(keras.optimizers.Lamb), keras_variable),
    }
    if keras.backend.backend() != "tensorflow":
        return keras_3
    import tensorflow as tf
    from official.modeling.optimization import lamb as model_garden_lamb

    model_garden = (
        lambda: model_garden_lamb.LAMB(1e-4, weight_decay_rate=0.01, exclude_from_weight_decay=list(DEFAULT_EXCLUDE)),
        lambda value, name: tf.Variable(value, name=name),
    )
    return {**keras_3, "Model Garden LAMB": model_garden}


def make_step(make_optimizer, make_variable, values, jit_compile):
    """A function grads -> a value to block on: one `apply_gradients` in a `tf.function`."""
    import tensorflow as tf

    variables = [make_variable(value, name) for name, value in values.items()]
    optimizer = make_optimizer()

    @tf.function(jit_compile=jit_compile)
    def step(grads):
        optimizer.apply_gradients(zip(grads, variables))
        return optimizer.iterations

    return step


def make_jax_step(make_optimizer, make_variable, values, jit_compile=True):
    """A function grads -> a value to block on: `stateless_apply` under `jax.jit`, state buffers donated."""
    import jax

    variables = [make_variable(value, name) for name, value in values.items()]
    optimizer = make_optimizer()
    optimizer.build(variables)
    # State in and out in one order, as `model.fit`'s train step takes and returns it: jit aliases each output to the
    # first donated input of its shape and dtype, so (slots, grads, weights) -> (weights, slots) put the new weights
    # in slot buffers and XLA copied the variables around that, in every contestant's step.
    apply = jax.jit(
        lambda weights, slots, grads: optimizer.stateless_apply(slots, grads, weights), donate_argnums=(0, 1)
    )
    state = {"weights": [v.value for v in variables], "slots": [v.value for v in optimizer.variables]}
    del variables  # the donated buffers live in `state` only

    def step(grads):
        state["weights"], state["slots"] = apply(state["weights"], state["slots"], grads)
        return state["slots"][0]  # the iteration counter, ready when the whole step is

    return step


def timed_round(step, grads, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        result = step(grads)
    keras.ops.convert_to_numpy(result)  # waits for the last step
    return (time.perf_counter() - start) / steps


def _rerun_under(backend: str) -> None:
    """Runs this script again with KERAS_BACKEND=backend (Keras reads it once, at import)."""
    env = dict(os.environ, KERAS_BACKEND=backend)
    if backend == "jax":
        env.setdefault("JAX_PLATFORMS", "cpu")
    sys.exit(subprocess.run([sys.executable, *sys.argv], env=env).returncode)


def main(_):
    if FLAGS.backend != keras.backend.backend():
        _rerun_under(FLAGS.backend)
    on_jax = keras.backend.backend() == "jax"
    shapes = bert_parameter_shapes(FLAGS.num_layers, FLAGS.hidden_size, FLAGS.vocab_size)
    rng = np.random.default_rng(0)
    values = {name: rng.normal(0, 0.02, size=shape).astype("float32") for name, shape in shapes.items()}
    grads = [
        keras.ops.convert_to_tensor(rng.normal(0, 1e-3, size=shape).astype("float32")) for shape in shapes.values()
    ]
    print(
        f"{sum(v.size for v in values.values()) / 1e6:.1f}M parameters in {len(values)} variables; "
        f"{FLAGS.rounds} rounds x {FLAGS.steps} steps; {os.cpu_count()} CPUs; "
        f"Keras {keras.__version__} on {keras.backend.backend()}; load {os.getloadavg()[0]:.2f}"
    )
    print(bench_flags.cpu_isa())
    print(f"{'optimizer':<20}{'jit_compile':>12}{'ms/step':>10}{'vs AdamW':>10}")
    for jit_compile in [True] if on_jax else [value.lower() == "true" for value in FLAGS.jit_compile]:
        steps, times = {}, {}
        for name, (make_optimizer, make_variable) in contestants().items():
            try:
                steps[name] = (make_jax_step if on_jax else make_step)(
                    make_optimizer, make_variable, values, jit_compile
                )
                timed_round(steps[name], grads, 1)  # trace, compile, build slots
                times[name] = []
            except Exception as error:  # a peer that cannot run in this mode gets a row saying why
                steps.pop(name, None)
                print(f"{name:<20}{str(jit_compile):>12}  failed: {type(error).__name__}: {str(error)[:80]}")
        for _ in range(FLAGS.rounds):
            for name, step in steps.items():
                times[name].append(timed_round(step, grads, FLAGS.steps))
        baseline = statistics.median(times["Keras AdamW"])
        for name, measured in times.items():
            ms = statistics.median(measured)
            print(f"{name:<20}{str(jit_compile):>12}{1e3 * ms:>10.1f}{ms / baseline:>9.2f}x")
        del steps


if __name__ == "__main__":
    app.run(main)
