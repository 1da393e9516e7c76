"""Serving latency: a classifier's SavedModel (kbert-export --format=saved_model) against kbert's own predict path.

    python tools/bench_serving.py --model=bert_small --seq_length=128 --batch_size=32

Fine-tunes a classifier of `--model`'s size for a few steps on synthetic short texts (a real kbert-finetune run:
random init, one epoch), exports it, then times one batch of `--batch_size` short texts, strings in, predictions out:

- served: the SavedModel loaded with `tf.saved_model.load`, its `serving_default` signature (tokenization inside);
- kbert: the run's `PairEncoder.encode` then `BertClassifier.predict_on_batch`, what kbert-predict runs on a run.

Rounds of `--steps` calls alternate between the two so machine noise hits both; the median call of each counts, after
one untimed warm-up round. Prints milliseconds per batch and the served / kbert ratio last (goal: at most 1.10).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import bench_flags  # noqa: E402
from absl import app, flags, logging  # noqa: E402

bench_flags.define("model", "seq_length", "batch_size", "steps", "rounds", "work_dir", steps=10, rounds=5)
flags.DEFINE_integer("vocab_size", 30522, "Size of the synthetic WordPiece vocabulary.")
FLAGS = flags.FLAGS

WORDS_PER_TEXT = (4, 16)


def short_texts(vocab: list[str], count: int, seed: int) -> list[str]:
    import numpy as np

    rng = np.random.default_rng(seed)
    words = [w for w in vocab if not w.startswith("[")]
    return [" ".join(rng.choice(words, int(rng.integers(*WORDS_PER_TEXT)))) for _ in range(count)]


def finetuned_run(work_dir: str) -> str:
    """A one-epoch kbert-finetune run of `--model`'s size on the synthetic task; its model_dir."""
    import tensorflow as tf

    from kbert.data.wordpiece.vocab_file import reserved_tokens
    from kbert.finetuning import load_finetune_config, run_finetuning

    vocab = reserved_tokens("bert") + [f"w{i}" for i in range(FLAGS.vocab_size - len(reserved_tokens("bert")))]
    vocab_file = os.path.join(work_dir, "vocab.txt")
    with open(vocab_file, "w") as f:
        f.write("\n".join(vocab) + "\n")
    rows = "".join(f"{text}\t{i % 2}\n" for i, text in enumerate(short_texts(vocab, 2 * FLAGS.batch_size, seed=0)))
    for name in ("train", "dev"):
        with open(os.path.join(work_dir, f"{name}.tsv"), "w") as f:
            f.write("text\tlabel\n" + rows)
    override = (
        f"task.name=tsv,task.train_file={work_dir}/train.tsv,task.eval_file={work_dir}/dev.tsv,"
        f"task.text_a_column=text,task.label_column=label,data.vocab_file={vocab_file},"
        f"data.seq_length={FLAGS.seq_length},model.bert={FLAGS.model},train.epochs=1,"
        f"train.global_batch_size={FLAGS.batch_size}"
    )
    model_dir = os.path.join(work_dir, "run")
    run_finetuning(
        load_finetune_config([], override), model_dir, tf.distribute.get_strategy(), print_fn=lambda *a, **k: None
    )
    return model_dir


def timed_calls(call, batch) -> list[float]:
    seconds = []
    for _ in range(FLAGS.steps):
        start = time.perf_counter()
        call(batch)
        seconds.append(time.perf_counter() - start)
    return seconds


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)  # no line per file the export writes
    import tensorflow as tf

    from kbert.finetuning.serving.classifier_export import export_classifier
    from kbert.finetuning.serving.finetuned_run import load_run

    work_dir = FLAGS.work_dir or tempfile.mkdtemp(prefix="bench_serving_")
    run = load_run(finetuned_run(work_dir))
    export_classifier(run, os.path.join(work_dir, "saved_model"))
    served = tf.saved_model.load(os.path.join(work_dir, "saved_model")).signatures["serving_default"]
    batch = tf.constant(short_texts(run.encoder.vocab, FLAGS.batch_size, seed=1))
    contestants = {
        "served (SavedModel serving_default)": lambda texts: served(text_a=texts)["label"].numpy(),
        "kbert (PairEncoder + predict_on_batch)": lambda texts: run.model.predict_on_batch(run.encoder.encode(texts)),
    }
    for call in contestants.values():  # trace and warm up
        timed_calls(call, batch)
    times = {name: [] for name in contestants}
    for _ in range(FLAGS.rounds):
        for name, call in contestants.items():
            times[name] += timed_calls(call, batch)
    print(
        f"\n{FLAGS.model}, seq {FLAGS.seq_length}, a batch of {FLAGS.batch_size} texts of {WORDS_PER_TEXT[0]}-"
        f"{WORDS_PER_TEXT[1] - 1} words, float32; {FLAGS.rounds} rounds of {FLAGS.steps} calls each"
    )
    median = {name: statistics.median(ts) for name, ts in times.items()}
    for name, value in median.items():
        print(
            f"{name:40s} {1000 * value:8.1f} ms per batch (median; range {1000 * min(times[name]):.1f}-"
            f"{1000 * max(times[name]):.1f})"
        )
    served_time, kbert_time = median.values()
    print(f"served / kbert: {served_time / kbert_time:.2f}x")


if __name__ == "__main__":
    app.run(main)
