"""Trains the same tiny runs with kbert at two commits and compares their weights, variable by variable; and
resumes, at the newer commit, a run directory that the older one wrote and was killed in.

Each case is a `kbert-pretrain` run on the same records (random, `kbert.data.synthetic`), in a
process of its own run from that commit's tree: TF on one device in float32 and mixed_bfloat16, on two logical
CPUs (mirrored), a two-phase run and an MSLT run; and `fit_jax`, `kbert.fit.fit_pretraining` under JAX (its
`model.keras` checkpoints compared by variable path). The final checkpoint's model variables are compared through
`PATH_MAP` (old variable path -> new; a variable under another name on either side is a mismatch), so a rename has
to be declared to pass. The old commit's run is also killed with SIGKILL once it saved step 5 (inside phase 2, or
MSLT stage 2), and the new commit resumes it in the same model_dir: its final weights must equal the new commit's
uninterrupted run. Prints one line per case and exits 1 if anything differs.

    python tools/compare_commits.py --base=00ccd6e            # against this working tree
    python tools/compare_commits.py --base=00ccd6e --cases=f32,mslt
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import tensorflow as tf
import yaml
from absl import app, flags

from kbert.data.synthetic import random_instance
from kbert.data.tfrecord_writer import example_proto

FLAGS = flags.FLAGS
flags.DEFINE_string("base", None, "The commit to compare against (a git revision).", required=True)
flags.DEFINE_string("head", ".", "The tree to compare (default: this working tree).")
flags.DEFINE_list("cases", ["f32", "bf16", "mirrored2", "phases", "mslt", "fit_jax"], "Which runs to compare.")
flags.DEFINE_string("work_dir", "", "Where the runs go (default: a new temporary folder).")

# Old checkpoint key -> new, for every variable that a change renamed (none yet).
PATH_MAP: dict[str, str] = {}

SEQ, PREDICTIONS, VOCAB = 16, 4, 64
# kbert-pretrain on N logical CPU devices, as tests/training_fixtures.py launches it; written out here, since the
# older commit's tree may hold no module to import it from.
LAUNCHER = """
import os, sys
import kbert
assert os.path.dirname(os.path.dirname(kbert.__file__)) == os.environ["KBERT_TREE"], kbert.__file__
import tensorflow as tf
cpus = int(sys.argv[1])
if cpus > 1:
    tf.config.set_logical_device_configuration(
        tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * cpus)
sys.argv = ["kbert-pretrain"] + sys.argv[2:]
from kbert.run_pretraining import run
run()
"""


# kbert.fit's recipe under JAX on the records, a checkpoint every step; resumes from the newest one in its folder.
FIT_SCRIPT = """
import os, sys
import kbert
assert os.path.dirname(os.path.dirname(kbert.__file__)) == os.environ["KBERT_TREE"], kbert.__file__
import keras
import numpy as np
from kbert.fit import fit_pretraining
from kbert.modeling import BertConfig, BertPretrainer
from kbert.optimizers import LAMB
records, checkpoints, out = sys.argv[1:]
config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                    max_position_embeddings=32)
def build():
    model = BertPretrainer(config)
    model.compile(optimizer=LAMB(1e-2, weight_decay=0.01))
    return model
one_device = keras.distribution.DataParallel(devices=keras.distribution.list_devices()[:1])
model, _ = fit_pretraining(build, records, 16, 4, 8, 8, checkpoints, distribution=one_device, checkpoint_every=1,
                           keep_checkpoints=100, verbose=0, shuffle_buffer=32)
np.savez(out, **{w.path: keras.ops.convert_to_numpy(w) for w in model.weights})
"""


def write_records(path: str, count: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    with tf.io.TFRecordWriter(path) as writer:
        for _ in range(count):
            writer.write(example_proto(random_instance(rng, SEQ, PREDICTIONS, VOCAB)))
    return path


def case_config(case: str, train: str) -> tuple[dict, int, str]:
    """The experiment of `case` on `train`, the logical CPUs it runs on and its strategy."""
    model = {"vocab_size": VOCAB, "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64}
    config = {
        "model": {"bert": "bert_tiny", "overrides": {**model, "num_hidden_layers": 2, "max_position_embeddings": 32}},
        "data": {"train_files": train, "seq_length": SEQ, "max_predictions": PREDICTIONS},
        "optimizer": {"type": "lamb", "weight_decay": 0.01},
        "schedule": {"peak_learning_rate": 1e-2, "warmup_steps": 2, "power": 0.5},
        "train": {
            "global_batch_size": 8,
            "total_steps": 8,
            "steps_per_loop": 1,
            "checkpoint_interval": 1,
            "max_checkpoints": 100,
        },
    }
    cpus, strategy = 1, "one_device"
    if case == "bf16":
        config["train"]["mixed_precision"] = "mixed_bfloat16"
    elif case == "mirrored2":
        cpus, strategy = 2, "mirrored"
    elif case == "phases":
        config["phases"] = [{"steps": 4}, {"steps": 4, "global_batch_size": 4, "warmup_steps": 1}]
    elif case == "mslt":
        config["model"]["overrides"]["num_hidden_layers"] = 3
        config["mslt"] = {"stages": [{"num_layers": 1, "steps": 3}, {"num_layers": 3, "steps": 3}]}
        config["mslt"]["final_stage"] = {"steps": 2}
    elif case not in ("f32", "fit_jax"):
        raise app.UsageError(f"--cases: no case {case!r}")
    return config, cpus, strategy


def _command(tree: str, config_file: str, model_dir: str, cpus: int, strategy: str) -> dict:
    """How to run kbert-pretrain of `tree`: from the tree, since `python -c` puts the working folder first on
    sys.path, before PYTHONPATH (the launcher asserts which kbert it imported)."""
    tree = os.path.abspath(tree)
    env = dict(os.environ, PYTHONPATH=tree, KBERT_TREE=tree, TF_CPP_MIN_LOG_LEVEL="2")
    if strategy == "fit_jax":  # config_file: the records
        out = os.path.join(model_dir, "weights.npz")
        command = [sys.executable, "-c", FIT_SCRIPT, config_file, os.path.join(model_dir, "checkpoints"), out]
        return dict(args=command, env=dict(env, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu"), cwd=tree)
    command = [sys.executable, "-c", LAUNCHER, str(cpus), f"--config_file={config_file}", f"--model_dir={model_dir}"]
    return dict(args=command + [f"--strategy={strategy}", "--device=cpu"], env=env, cwd=tree)


def final_weights(model_dir: str) -> dict[str, np.ndarray]:
    if os.path.exists(os.path.join(model_dir, "weights.npz")):  # fit_jax's
        with np.load(os.path.join(model_dir, "weights.npz")) as weights:
            return dict(weights)
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints")))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map() if k.startswith("model/")}


def train(tree: str, config_file: str, model_dir: str, cpus: int, strategy: str) -> dict[str, np.ndarray]:
    subprocess.run(**_command(tree, config_file, model_dir, cpus, strategy), check=True, capture_output=True)
    return final_weights(model_dir)


def kill_after(tree: str, config_file: str, model_dir: str, cpus: int, strategy: str, step: int) -> None:
    """Runs kbert-pretrain of `tree` and kills it with SIGKILL as soon as it has saved `step`."""
    index = os.path.join(model_dir, "checkpoints", f"ckpt-{step}" + ("" if strategy == "fit_jax" else ".index"))
    process = subprocess.Popen(
        **_command(tree, config_file, model_dir, cpus, strategy), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    while not os.path.exists(index):
        if process.poll() is not None:
            raise RuntimeError(f"{tree}: kbert-pretrain ended before it saved step {step}")
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()


def compare(old: dict[str, np.ndarray], new: dict[str, np.ndarray], renamed: dict[str, str]) -> tuple[int, list[str]]:
    """How many variables are in both (`old`'s under their `renamed` names), and those that differ or are missing."""
    mapped = {renamed.get(k, k): v for k, v in old.items()}
    differing = sorted(set(mapped) ^ set(new))
    differing += [k for k in sorted(set(mapped) & set(new)) if not np.array_equal(mapped[k], new[k])]
    return len(set(mapped) & set(new)), differing


def main(argv):
    del argv
    work = FLAGS.work_dir or tempfile.mkdtemp(prefix="kbert-compare-")
    base_tree = os.path.join(work, "base")
    subprocess.run(["git", "worktree", "add", "--detach", base_tree, FLAGS.base], check=True, capture_output=True)
    try:
        records = write_records(os.path.join(work, "train.tfrecord"), 64, seed=0)
        failed = False
        for case in FLAGS.cases:
            config, cpus, strategy = case_config(case, records)
            config_file = os.path.join(work, f"{case}.yaml")
            with open(config_file, "w") as f:
                yaml.safe_dump(config, f)
            if case == "fit_jax":  # its script takes the records, not a config
                config_file, strategy = records, "fit_jax"
            base = train(base_tree, config_file, os.path.join(work, f"{case}-base"), cpus, strategy)
            head = train(FLAGS.head, config_file, os.path.join(work, f"{case}-head"), cpus, strategy)
            killed = os.path.join(work, f"{case}-killed")
            kill_after(base_tree, config_file, killed, cpus, strategy, step=5)
            resumed = train(FLAGS.head, config_file, killed, cpus, strategy)
            line = {"case": case}
            pairs = {"trained": (base, head, PATH_MAP), "old run resumed": (head, resumed, {})}
            for name, (old, new, renamed) in pairs.items():
                same, differing = compare(old, new, renamed)
                failed |= bool(differing)
                line[name] = f"{same} variables bit-identical" if not differing else f"DIFFER: {differing[:5]}"
            print(json.dumps(line), flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", base_tree], check=False, capture_output=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    app.run(main)
