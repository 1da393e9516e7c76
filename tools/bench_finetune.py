"""Fine-tuning throughput: kbert-finetune's model.fit vs keras-hub's BertTextClassifier.fit, side by side in one run.

    python tools/bench_finetune.py --model=bert_small --seq_length=128 --batch_size=32

Both fine-tune the same BERT size (tanh GELU, the one function both compute) for sentence-pair classification on
the same synthetic pairs, with Keras AdamW, dropout 0.1, tokenizing inside tf.data: kbert with its PairEncoder,
`BertClassifier` and `make_optimizer`; keras-hub with its BertTokenizer, BertTextClassifierPreprocessor and
BertTextClassifier. Each round is one `fit` call of `--steps` steps; rounds alternate between the two so machine
noise hits both, and a round's time runs from its first step's end to its last's (no iterator start-up, no
tracing). Prints sequences/s and the kbert / keras-hub ratio last.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import bench_flags  # noqa: E402
import keras  # noqa: E402
from absl import app, flags  # noqa: E402

bench_flags.define("model", "seq_length", "batch_size", "steps", "work_dir", steps=6, rounds=3)
flags.DEFINE_bool("jit_compile", False, "XLA-compile both training steps.")
flags.DEFINE_enum("precision", "float32", ["float32", "mixed_bfloat16"], "Keras precision policy of both.")
flags.DEFINE_integer("vocab_size", 30522, "Size of the synthetic WordPiece vocabulary.")
FLAGS = flags.FLAGS

LEARNING_RATE = 2e-5
WEIGHT_DECAY = 0.01


class StepTimer(keras.callbacks.Callback):
    """Times the steps of one `fit` call from the end of its first step to the end of its last."""

    def on_train_begin(self, logs=None):
        self.ends: list[float] = []

    def on_train_batch_end(self, batch, logs=None):
        self.ends.append(time.perf_counter())

    def seconds_per_step(self) -> float:
        return (self.ends[-1] - self.ends[0]) / (len(self.ends) - 1)


def write_vocab(path: str, size: int) -> list[str]:
    """BERT's layout ([PAD], [unused*], [UNK], [CLS], [SEP], [MASK]) then words w0, w1, ... up to `size` tokens."""
    vocab = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab += [f"w{i}" for i in range(size - len(vocab))]
    with open(path, "w") as f:
        f.write("\n".join(vocab) + "\n")
    return vocab


def synthetic_pairs(vocab: list[str], count: int, seq_length: int, seed: int = 0):
    """Sentence pairs long enough to fill `seq_length` (so both truncate) and random 0/1 labels."""
    import numpy as np

    rng = np.random.default_rng(seed)
    words = [w for w in vocab if w.startswith("w")]

    def text():
        return " ".join(words[i] for i in rng.integers(0, len(words), int(rng.integers(seq_length // 3, seq_length))))

    return [text() for _ in range(count)], [text() for _ in range(count)], rng.integers(0, 2, count).astype("int32")


def kbert_contestant(config, vocab_file, pairs):
    from kbert.finetuning import BertClassifier, FinetuneConfig
    from kbert.finetuning.encoding import PairEncoder
    from kbert.finetuning.examples import Examples
    from kbert.modeling import BertEncoder
    from kbert.runtime.optimizer_factory import make_optimizer

    encoder = PairEncoder(vocab_file, FLAGS.seq_length)
    dataset = encoder.dataset(Examples("synthetic", *pairs), FLAGS.batch_size, training=True).repeat()
    model = BertClassifier(BertEncoder(config), num_outputs=2)
    section = FinetuneConfig().optimizer
    section.override({"weight_decay": WEIGHT_DECAY})
    optimizer = make_optimizer(section, LEARNING_RATE, mixed_precision=FLAGS.precision,
                               variables=model.trainable_variables)
    model.compile(optimizer=optimizer,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=FLAGS.jit_compile)
    return model, dataset


def keras_hub_contestant(config, vocab_file, pairs):
    import keras_hub
    import tensorflow as tf

    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=config.vocab_size, num_layers=config.num_hidden_layers, num_heads=config.num_attention_heads,
        hidden_dim=config.hidden_size, intermediate_dim=config.intermediate_size, dropout=config.hidden_dropout_prob,
        max_sequence_length=config.max_position_embeddings)
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor(
        keras_hub.models.BertTokenizer(vocabulary=vocab_file, lowercase=True), sequence_length=FLAGS.seq_length)
    model = keras_hub.models.BertTextClassifier(backbone, num_classes=2, preprocessor=preprocessor)
    optimizer = keras.optimizers.AdamW(LEARNING_RATE, weight_decay=WEIGHT_DECAY, epsilon=1e-6)
    optimizer.exclude_from_weight_decay(var_names=["gamma", "beta", "bias"])  # kbert's LayerNorm and bias rule
    model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=FLAGS.jit_compile)
    first, second, labels = pairs
    dataset = tf.data.Dataset.from_tensor_slices(((first, second), labels)).shuffle(len(labels))
    return model, dataset.batch(FLAGS.batch_size, drop_remainder=True).repeat()


def timed_round(model, dataset) -> float:
    timer = StepTimer()
    model.fit(dataset, steps_per_epoch=FLAGS.steps, epochs=1, callbacks=[timer], shuffle=False, verbose=0)
    return timer.seconds_per_step()


def main(argv):
    del argv
    from kbert.modeling import BertConfig

    keras.mixed_precision.set_global_policy(FLAGS.precision)
    work_dir = FLAGS.work_dir or tempfile.mkdtemp(prefix="bench_finetune_")
    vocab_file = os.path.join(work_dir, "vocab.txt")
    vocab = write_vocab(vocab_file, FLAGS.vocab_size)
    config = BertConfig.load(FLAGS.model).replace(vocab_size=len(vocab), hidden_act="gelu_approximate")
    pairs = synthetic_pairs(vocab, FLAGS.batch_size * (FLAGS.steps + 1) * 2, FLAGS.seq_length)
    contestants = {"kbert (BertClassifier.fit)": kbert_contestant(config, vocab_file, pairs),
                   "keras-hub (BertTextClassifier.fit)": keras_hub_contestant(config, vocab_file, pairs)}
    for model, dataset in contestants.values():  # trace and warm up
        timed_round(model, dataset)
    times = {name: [] for name in contestants}
    for _ in range(FLAGS.rounds):
        for name, (model, dataset) in contestants.items():
            times[name].append(timed_round(model, dataset))
    print(f"\n{FLAGS.model}, seq {FLAGS.seq_length}, batch {FLAGS.batch_size}, {FLAGS.precision}, "
          f"jit_compile={FLAGS.jit_compile}; {FLAGS.rounds} rounds of {FLAGS.steps} steps")
    rate = {name: FLAGS.batch_size / statistics.median(ts) for name, ts in times.items()}
    for name, value in rate.items():
        spread = f"{FLAGS.batch_size / max(times[name]):.1f}-{FLAGS.batch_size / min(times[name]):.1f}"
        print(f"{name:38s} {value:8.1f} seq/s (median of rounds; range {spread})")
    kbert, hub = rate.values()
    print(f"kbert / keras-hub: {kbert / hub:.2f}x")


if __name__ == "__main__":
    app.run(main)
