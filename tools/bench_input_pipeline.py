"""Input-pipeline throughput vs the BERT-base training step rate on this machine, measured in one run.

    python tools/bench_input_pipeline.py --seq_length=128 --batch_size=32 --max_predictions=20

Writes synthetic pretraining TFRecords (masked, and unmasked for dynamic masking) to a temporary folder, times
`kbert.data.pretraining_dataset` in training mode (shuffle, repeat, parse, prefetch) with static masking (with
every record's ids checked, as `kbert-pretrain` reads them, and without), dynamic masking and (with
`--vocab_file`) dynamic whole-word masking, then times BERT-base training steps (kbert's
`BertPretrainer`, Adam) on one of the pipeline's batches. Prints examples/s, the checked static pipeline's rate
over the unchecked one's and, last, the ratio of the slowest pipeline to the training rate: above 20x, the input
pipeline is never the bottleneck.
"""

from __future__ import annotations

import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import bench_flags  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from absl import app, flags  # noqa: E402
from model_garden_peer import kbert_train_step  # noqa: E402

from kbert.data import pretraining_dataset  # noqa: E402
from kbert.data.tfrecord_writer import example_proto  # noqa: E402
from kbert.data.wordpiece.vocab_file import BERT_SPECIAL_IDS  # noqa: E402
from kbert.modeling import BertConfig  # noqa: E402

bench_flags.define(
    "seq_length",
    "max_predictions",
    "batch_size",
    "vocab_file",
    model="bert_base",
    notes={
        "vocab_file": "Given, it adds a whole-word dynamic masking row; the records' ids "
        "need bert-base-uncased's (30,522 tokens)."
    },
)
flags.DEFINE_integer("num_files", 8, "TFRecord files per set.")
flags.DEFINE_integer("records_per_file", 2048, "Records per file.")
flags.DEFINE_integer("pipeline_batches", 400, "Batches timed per pipeline (after warm-up).")
flags.DEFINE_integer("train_steps", 3, "Training steps timed (after one warm-up step).")
flags.DEFINE_string("policy", "mixed_bfloat16", "Keras dtype policy of the training step (the faster one on CPU).")
FLAGS = flags.FLAGS

# bert-base-uncased's vocabulary size and special ids; word ids are drawn from FIRST_WORD up.
VOCAB_SIZE, FIRST_WORD = 30522, 1000
CLS, SEP, MASK = (BERT_SPECIAL_IDS[t] for t in ("[CLS]", "[SEP]", "[MASK]"))


def write_files(folder: str, masked: bool, rng: np.random.Generator) -> str:
    """`num_files` files of BERT-like records: 90% full length, 10% short (short_seq_prob)."""
    seq, pred = FLAGS.seq_length, FLAGS.max_predictions
    for index in range(FLAGS.num_files):
        with tf.io.TFRecordWriter(os.path.join(folder, f"{'masked' if masked else 'unmasked'}-{index:03d}")) as w:
            for _ in range(FLAGS.records_per_file):
                length = seq if rng.random() < 0.9 else int(rng.integers(8, seq))
                split = int(rng.integers(2, length - 2))
                ids = np.zeros(seq, np.int64)
                ids[:length] = rng.integers(FIRST_WORD, VOCAB_SIZE, length)
                ids[[0, split, length - 1]] = [CLS, SEP, SEP]
                segments = np.zeros(seq, np.int64)
                segments[split + 1 : length] = 1
                mask = (np.arange(seq) < length).astype(np.int64)
                record = dict(
                    input_ids=ids, input_mask=mask, segment_ids=segments, next_sentence_labels=[int(rng.integers(0, 2))]
                )
                if not masked:
                    w.write(example_proto(record))
                    continue
                candidates = np.setdiff1d(np.arange(1, length - 1), [split])
                n = min(pred, max(1, round(0.15 * len(candidates))))
                positions = np.sort(rng.choice(candidates, n, replace=False))
                labels = ids[positions].copy()
                ids[positions] = MASK
                padding = [0] * (pred - n)
                w.write(
                    example_proto(
                        dict(
                            record,
                            input_ids=ids,
                            masked_lm_positions=positions.tolist() + padding,
                            masked_lm_ids=labels.tolist() + padding,
                            masked_lm_weights=[1.0] * n + [0.0] * (pred - n),
                        )
                    )
                )
    return os.path.join(folder, f"{'masked' if masked else 'unmasked'}-*")


def pipeline_rate(dataset: tf.data.Dataset) -> float:
    """Examples/s over `pipeline_batches` batches, after a warm-up that fills the shuffle buffer."""
    iterator = iter(dataset)
    for _ in range(20):
        next(iterator)
    start = time.perf_counter()
    for _ in range(FLAGS.pipeline_batches):
        batch = next(iterator)
    float(batch["masked_lm_weights"][0, 0])
    return FLAGS.pipeline_batches * FLAGS.batch_size / (time.perf_counter() - start)


def training_rate(batch: dict) -> float:
    """Sequences/s of BERT training steps (forward, backward, Adam) on one batch."""
    step = kbert_train_step(BertConfig.load(FLAGS.model), policy=FLAGS.policy)
    float(step(batch))
    start = time.perf_counter()
    for _ in range(FLAGS.train_steps):
        loss = step(batch)
    float(loss)
    return FLAGS.train_steps * FLAGS.batch_size / (time.perf_counter() - start)


def main(argv):
    del argv
    rng = np.random.default_rng(0)
    seq, pred, batch_size = FLAGS.seq_length, FLAGS.max_predictions, FLAGS.batch_size
    with tempfile.TemporaryDirectory() as folder:
        masked, unmasked = write_files(folder, True, rng), write_files(folder, False, rng)
        records = FLAGS.num_files * FLAGS.records_per_file
        print(
            f"seq {seq}, max_predictions {pred}, batch {batch_size}; {FLAGS.num_files} files x "
            f"{FLAGS.records_per_file} records per set; {os.cpu_count()} CPU cores"
        )
        # Every record's ids checked against the tables as it is read, as kbert-pretrain does.
        common = dict(vocab_size=VOCAB_SIZE, type_vocab_size=2, max_position_embeddings=seq, seed=0)
        pipelines = {
            "static masking": pretraining_dataset(masked, seq, pred, batch_size, **common),
            "static masking, ids unchecked": pretraining_dataset(masked, seq, pred, batch_size, seed=0),
            "dynamic masking": pretraining_dataset(unmasked, seq, pred, batch_size, dynamic_masking=True, **common),
        }
        if FLAGS.vocab_file:
            pipelines["dynamic whole-word masking"] = pretraining_dataset(
                unmasked,
                seq,
                pred,
                batch_size,
                dynamic_masking=True,
                vocab_file=FLAGS.vocab_file,
                whole_word_masking=True,
                seed=0,
            )
        rates = {}
        for name, dataset in pipelines.items():
            rates[name] = pipeline_rate(dataset)
            print(f"pipeline, {name:28s} {rates[name]:10,.0f} examples/s ({records:,} records on disk)")
        train = training_rate(next(iter(pipelines["static masking"])))
    print(f"training step, {FLAGS.model} ({FLAGS.policy}){'':9s} {train:10,.2f} sequences/s")
    for name, rate in rates.items():
        print(f"ratio pipeline ({name}) / training: {rate / train:,.0f}x")
    checked = rates["static masking"] / rates["static masking, ids unchecked"]
    print(f"ratio static masking, ids checked / unchecked: {checked:.2f}x")
    slowest = min(rates, key=rates.get)
    print(f"ratio slowest pipeline ({slowest}) / training step rate: {rates[slowest] / train:,.0f}x (goal >= 20x)")


if __name__ == "__main__":
    app.run(main)
