"""Continued pretraining of a ModernBERT-class model through kbert's Hugging Face export: a `modernbert_tiny` that
kbert pretrained on one text, exported with `kbert-export --format=hf`, is re-imported (`train.init_checkpoint` =
the export) and continued on another text; prints held-out masked-LM loss on that text before and after, and that
transformers computes the same loss on the continued model's export.

    python -m venv /tmp/hf && /tmp/hf/bin/pip install torch transformers safetensors
    python tools/continued_pretraining_modern.py --corpus=text.txt --work_dir=/tmp/kbert_continued \\
        --transformers_python=/tmp/hf/bin/python

In `--work_dir`, each step a process of its own (logs, configs and model_dirs under runs/):

1. The corpus (BERT's format: one sentence a line, a blank line between documents) is split by document into two
   texts, A (the first half of the documents) and B (the second half), and each into training text and held-out
   text (every `--heldout_every`-th document). One WordPiece vocabulary of `--vocab_size` pieces is learned from
   A's training text (or `--vocab_file`); the four texts become masked-LM-only records (`kbert-create-pretraining-data
   --objective=mlm`: ModernBERT has no sentence head), the training ones with `--dupe_factor` maskings, the held-out
   ones with one.
2. `pretrain_A`: kbert-pretrain (LAMB) of `modernbert_tiny` (the vocabulary's size, `--num_layers` layers) on A for
   `--steps` steps, then its held-out loss on A; `kbert-export --format=hf` writes it to export_A/.
3. `before_B`: `kbert-pretrain --mode=eval` of export_A (`train.init_checkpoint`) on B's held-out records.
4. `continue_B`: kbert-pretrain from export_A on B's training records for `--continue_steps` steps (LAMB, its own
   warmup and decay), then its held-out loss on B; exported to export_B/.
5. transformers' `AutoModelForMaskedLM` (float32, eager attention; torch in `--transformers_python`, never in
   kbert's dependencies) loads export_B and computes its masked-LM loss on every one of B's held-out records, the
   same ones step 4 scored: labels at the masked positions, the mean over them. kbert's loss is the mean weighted by
   `masked_lm_weights` (sum(w * ce) / (sum(w) + 1e-5)); the records' weights are 1 at a prediction and 0 at a
   padding slot (checked), so both are the mean cross-entropy over the same masked tokens.

Prints a table of the held-out losses (A after pretraining, B before and after continuing, transformers' on B after,
and the relative difference) and writes results.json (the losses and accuracies, the records, each step's seconds,
the flags, the CPU and its load). Exits non-zero where transformers' loss differs from kbert's by more than
`--tolerance` relative.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import bench_flags  # noqa: E402
import modernbert_against_transformers as against  # noqa: E402  (defines --transformers_python)
import numpy as np  # noqa: E402
import yaml  # noqa: E402
from absl import app, flags  # noqa: E402

from kbert.data import text_corpus  # noqa: E402
from kbert.data.create_pretraining_data import create_pretraining_data  # noqa: E402
from kbert.data.instances import InstanceConfig  # noqa: E402
from kbert.data.wordpiece.vocab_file import load_vocabulary  # noqa: E402
from kbert.data.wordpiece.vocab_learning import learn_vocabulary, write_vocabulary  # noqa: E402

bench_flags.define(
    "vocab_file",
    required=("corpus",),
    work_dir="/tmp/kbert_continued_modern",
    seq_length=128,
    max_predictions=20,
    batch_size=32,
    notes={"vocab_file": "Not given: one of --vocab_size pieces is learned from A's training text."},
)
flags.DEFINE_integer("vocab_size", 8000, "Size of the vocabulary learned when --vocab_file is not given.")
flags.DEFINE_integer("num_layers", 6, "Layers of the modernbert_tiny pretrained on A (the preset has 6).")
flags.DEFINE_integer("steps", 300, "Pretraining steps on A.")
flags.DEFINE_integer("continue_steps", 100, "Continued pretraining steps on B, from A's export.")
flags.DEFINE_float("learning_rate", 1e-2, "LAMB's peak rate pretraining on A.")
flags.DEFINE_float("continue_learning_rate", 5e-3, "LAMB's peak rate continuing on B.")
flags.DEFINE_float("warmup_share", 0.1, "Each run's warmup, as a share of its steps (then a linear decay to 0).")
flags.DEFINE_integer("heldout_every", 10, "Every this-many-th document of A and of B is held out.")
flags.DEFINE_integer("dupe_factor", 5, "Maskings of the training text (the held-out text is masked once).")
flags.DEFINE_integer("seed", 12345, "Seed of the records and of both runs.")
flags.DEFINE_float("tolerance", 1e-4, "Largest relative difference of transformers' loss from kbert's.")
FLAGS = flags.FLAGS
RECORDED_FLAGS = (
    "corpus",
    "vocab_file",
    "vocab_size",
    "num_layers",
    "seq_length",
    "max_predictions",
    "batch_size",
    "steps",
    "continue_steps",
    "learning_rate",
    "continue_learning_rate",
    "warmup_share",
    "heldout_every",
    "dupe_factor",
    "seed",
    "tolerance",
)
EVAL_BATCH = 64


def split_halves(documents: list[list[str]]) -> dict[str, list[list[str]]]:
    """Texts A and B: the first half of the (non-empty) documents and the rest."""
    documents = [document for document in documents if document]
    half = len(documents) // 2
    return {"A": documents[:half], "B": documents[half:]}


def make_data(directory: str) -> dict:
    """Split, vocabulary and MLM-only records under `directory`; returns their paths and counts."""
    halves = split_halves(list(text_corpus.read_documents([FLAGS.corpus])))
    data: dict = {"records": {}, "documents": {}}
    for name, documents in halves.items():
        text = {part: os.path.join(directory, f"{name}_{part}.txt") for part in ("train", "heldout")}
        split = text_corpus.write_split(documents, text["train"], text["heldout"], FLAGS.heldout_every)
        data["documents"][name] = {"train": split.train_documents, "heldout": split.heldout_documents}
        data[name] = text
    print(f"corpus: {json.dumps(data['documents'])} documents", flush=True)
    vocab_file = FLAGS.vocab_file or os.path.join(directory, f"vocab_{FLAGS.vocab_size}.txt")
    if not FLAGS.vocab_file:
        write_vocabulary(learn_vocabulary([data["A"]["train"]], FLAGS.vocab_size)[0], vocab_file)
    data["vocab_file"], data["vocab_size"] = vocab_file, len(load_vocabulary(vocab_file))
    for name in ("A", "B"):
        for part, dupe_factor in (("train", FLAGS.dupe_factor), ("heldout", 1)):
            records = os.path.join(directory, f"{name}_{part}.tfrecord")
            summary = create_pretraining_data(
                [data[name][part]],
                [records],
                vocab_file,
                True,
                InstanceConfig(
                    max_seq_length=FLAGS.seq_length,
                    max_predictions_per_seq=FLAGS.max_predictions,
                    dupe_factor=dupe_factor,
                    objective="mlm",
                ),
                random_seed=FLAGS.seed,
            )
            data["records"][f"{name}_{part}"] = {"path": records, "records": summary.instances}
    print(
        f"vocabulary: {data['vocab_size']:,} pieces; records: "
        + ", ".join(f"{name} {made['records']:,}" for name, made in data["records"].items()),
        flush=True,
    )
    return data


def run_logged(name: str, log: str, args: list[str]) -> float:
    """Runs this Python with `args`, its output in `log`; returns its wall seconds, or exits naming the log."""
    print(f"{name}: python {' '.join(args[:2])} ... (log {log})", flush=True)
    started = time.time()
    with open(log, "w") as out:
        code = subprocess.call([sys.executable, *args], stdout=out, stderr=subprocess.STDOUT)
    if code:
        with open(log) as f:
            tail = f.read()[-2000:]
        sys.exit(f"{name} failed (exit {code}); the end of {log}:\n{tail}")
    return time.time() - started


def schedule(steps: int, rate: float) -> dict:
    return {
        "peak_learning_rate": rate,
        "warmup_steps": max(1, round(FLAGS.warmup_share * steps)),
        "power": 1.0,
        "end_learning_rate": 0.0,
    }


def recipe(train_files: str, eval_files: str, steps: int, rate: float) -> dict:
    """kbert-pretrain's config of a run on MLM-only records: LAMB, float32, one checkpoint at the end."""
    return {
        "data": {
            "train_files": train_files,
            "eval_files": eval_files,
            "seq_length": FLAGS.seq_length,
            "max_predictions": FLAGS.max_predictions,
        },
        "optimizer": {"type": "lamb", "weight_decay": 0.01, "lamb": {"epsilon": 1e-6}},
        "schedule": schedule(steps, rate),
        "train": {
            "global_batch_size": FLAGS.batch_size,
            "total_steps": steps,
            "steps_per_loop": min(steps, 20),
            "checkpoint_interval": steps,
            "summary_interval": min(steps, 20),
            "max_checkpoints": 1,
            "mixed_precision": "float32",
            "seed": FLAGS.seed,
        },
        "eval": {"global_batch_size": EVAL_BATCH, "steps": -1},
    }


def pretrain(runs: str, name: str, config: dict, mode: str) -> tuple[dict, float]:
    """kbert-pretrain of `config` with `mode` into runs/NAME (anew); its summary.json (eval_summary.json for
    --mode=eval) and wall seconds."""
    model_dir, config_file = os.path.join(runs, name), os.path.join(runs, f"{name}.yaml")
    shutil.rmtree(model_dir, ignore_errors=True)
    with open(config_file, "w") as f:
        yaml.safe_dump(config, f)
    args = ["-m", "kbert.run_pretraining", f"--config_file={config_file}", f"--model_dir={model_dir}"]
    args += [f"--mode={mode}", "--strategy=one_device", "--device=cpu"]
    seconds = run_logged(name, os.path.join(runs, f"{name}.log"), args)
    with open(os.path.join(model_dir, "eval_summary.json" if mode == "eval" else "summary.json")) as f:
        return json.load(f), seconds


def export(runs: str, name: str, checkpoint: str, vocab_file: str) -> tuple[str, float]:
    """kbert-export --format=hf of `checkpoint` into runs/NAME (anew)."""
    output_dir = os.path.join(runs, name)
    shutil.rmtree(output_dir, ignore_errors=True)
    args = ["-m", "kbert.cli.export", f"--checkpoint={checkpoint}", "--format=hf", f"--vocab_file={vocab_file}"]
    seconds = run_logged(name, os.path.join(runs, f"{name}.log"), [*args, f"--output_dir={output_dir}"])
    return output_dir, seconds


def records_npz(records: str, path: str) -> dict:
    """Every record of `records` (MLM-only, in file order) as the .npz transformers' side reads; checks that the
    masked-LM weights are 1 at a prediction and 0 at a padding slot, so that kbert's weighted mean is the plain mean
    over the labelled positions."""
    import tensorflow as tf

    from kbert.data.schema import feature_spec

    spec = feature_spec(FLAGS.seq_length, FLAGS.max_predictions, with_sentence_labels=False)
    dataset = tf.data.TFRecordDataset(records).batch(1024).map(lambda rows: tf.io.parse_example(rows, spec))
    parts = [{name: value.numpy() for name, value in batch.items()} for batch in dataset]
    rows = {name: np.concatenate([part[name] for part in parts]) for name in spec}
    weights = rows["masked_lm_weights"]
    if not np.all((weights == 0) | (weights == 1)):
        sys.exit(f"{records}: masked_lm_weights other than 0 and 1; transformers' loss would be another mean.")
    arrays = {
        "input_ids": rows["input_ids"],
        "input_mask": rows["input_mask"],
        "positions": rows["masked_lm_positions"],
        "ids": rows["masked_lm_ids"],
        "weights": weights,
    }
    np.savez(path, **arrays)
    return {"rows": len(weights), "masked_tokens": int(weights.sum())}


def transformers_loss(directory: str, records: str, work: str) -> tuple[float, dict, float]:
    """transformers' masked-LM loss of the Hugging Face `directory` on every record of `records`; the rows and
    masked tokens it scored, and its wall seconds."""
    started = time.time()
    npz, out = os.path.join(work, "B_heldout.npz"), os.path.join(work, "transformers_loss.npy")
    counted = records_npz(records, npz)
    print(f"transformers: AutoModelForMaskedLM of {directory} on {counted['rows']:,} held-out rows", flush=True)
    try:
        against.torch_side("loss", directory, npz, out)
    except subprocess.CalledProcessError as e:
        sys.exit(f"transformers' side failed (exit {e.returncode}):\n{e.stderr.decode()[-2000:]}")
    return float(np.load(out)), counted, time.time() - started


def table(results: dict) -> str:
    losses = results["losses"]
    rows = [
        ("A held-out, after pretraining on A (kbert)", losses["A_after_pretraining"]),
        ("B held-out, before continuing (kbert, from export_A)", losses["B_before"]),
        ("B held-out, after continuing on B (kbert)", losses["B_after"]),
        ("B held-out, after continuing (transformers, export_B)", losses["B_after_transformers"]),
    ]
    width = max(len(label) for label, _ in rows)
    lines = [f"{'held-out masked-LM loss':<{width}}  {'loss':>9}  {'accuracy':>8}"]
    for label, value in rows:
        accuracy = f"{value['accuracy']:.4f}" if value.get("accuracy") is not None else "-"
        lines.append(f"{label:<{width}}  {value['loss']:>9.6f}  {accuracy:>8}")
    label = "relative difference, transformers against kbert"
    lines.append(f"{label:<{width}}  {results['relative_difference']:>9.2e}")
    return "\n".join(lines)


def eval_of(summary: dict) -> dict:
    return {
        "loss": summary["eval"]["masked_lm_loss"],
        "accuracy": summary["eval"]["masked_lm_accuracy"],
        "sequences": int(summary["eval"]["sequences"]),
    }


def main(argv):
    del argv
    work = FLAGS.work_dir
    directories = {name: os.path.join(work, name) for name in ("data", "runs")}
    for directory in directories.values():
        shutil.rmtree(directory, ignore_errors=True)
        os.makedirs(directory)
    runs, started = directories["runs"], time.time()
    seconds: dict[str, float] = {}
    data = make_data(directories["data"])
    seconds["data"] = time.time() - started
    records = {name: made["path"] for name, made in data["records"].items()}

    config = recipe(records["A_train"], records["A_heldout"], FLAGS.steps, FLAGS.learning_rate)
    overrides = {"vocab_size": data["vocab_size"], "num_hidden_layers": FLAGS.num_layers}
    config["model"] = {"bert": "modernbert_tiny", "overrides": overrides}
    pretrained, seconds["pretrain_A"] = pretrain(runs, "pretrain_A", config, "train_and_eval")
    export_a, seconds["export_A"] = export(runs, "export_A", os.path.join(runs, "pretrain_A"), data["vocab_file"])

    config = recipe(records["B_train"], records["B_heldout"], FLAGS.continue_steps, FLAGS.continue_learning_rate)
    config["train"]["init_checkpoint"] = export_a
    before, seconds["before_B"] = pretrain(runs, "before_B", config, "eval")
    after, seconds["continue_B"] = pretrain(runs, "continue_B", config, "train_and_eval")
    export_b, seconds["export_B"] = export(runs, "export_B", os.path.join(runs, "continue_B"), data["vocab_file"])
    theirs, counted, seconds["transformers"] = transformers_loss(export_b, records["B_heldout"], directories["data"])

    ours = eval_of(after)
    if ours["sequences"] != counted["rows"]:
        sys.exit(f"kbert scored {ours['sequences']:,} held-out rows of B, transformers {counted['rows']:,}.")
    gap = abs(theirs - ours["loss"]) / ours["loss"]
    results = {
        "losses": {
            "A_after_pretraining": eval_of(pretrained),
            "B_before": eval_of(before),
            "B_after": ours,
            "B_after_transformers": {"loss": theirs, "accuracy": None, **counted},
        },
        "relative_difference": gap,
        "within_tolerance": gap <= FLAGS.tolerance,
        "data": data,
        "seconds": seconds,
        "flags": {name: FLAGS[name].value for name in RECORDED_FLAGS},
        "machine": {"cpu": bench_flags.cpu_isa(), "load_average": os.getloadavg(), "cores": os.cpu_count()},
    }
    with open(os.path.join(work, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    print(f"\n{bench_flags.cpu_isa()}; load average {os.getloadavg()[0]:.2f} at the end;")
    shape = f"batch {FLAGS.batch_size}, seq {FLAGS.seq_length}"
    print(f"{FLAGS.steps:,} steps on A, {FLAGS.continue_steps:,} on B, {shape}, {FLAGS.num_layers} layers:")
    print(table(results))
    print(f"wrote {os.path.join(work, 'results.json')}")
    if gap > FLAGS.tolerance:
        sys.exit(f"transformers' loss differs from kbert's by {gap:.2e} relative, above --tolerance={FLAGS.tolerance}.")


if __name__ == "__main__":
    app.run(main)
