"""Fine-tuning throughput: kbert-finetune's model.fit vs keras-hub's BertTextClassifier.fit, side by side in one run.

    python tools/bench_finetune.py --model=bert_small --seq_length=128 --batch_size=32
    python tools/bench_finetune.py --model=bert_small --seq_length=128 --batch_size=32 --short_texts

Both fine-tune the same BERT size (tanh GELU, the one function both compute) for classification on the same
synthetic task, with Keras AdamW, dropout 0.1, tokenizing inside tf.data: kbert with kbert-finetune's
length-bucketed batches (`kbert.finetuning.batches`), `BertClassifier` and `make_optimizer`; keras-hub with its
BertTokenizer, BertTextClassifierPreprocessor (fixed length `--seq_length`) and BertTextClassifier. The task is
sentence pairs long enough that both truncate, or with `--short_texts` single texts of median 20 word pieces (what
padding-free batches are for). Each round is one `fit` call of `--steps` steps; rounds alternate between the two
so machine noise hits both, and a round's time runs from its first step's end to its last's (no iterator
start-up, no tracing). After the rounds each model is scored on held-out examples of the task. Prints
sequences/s, the accuracies and the kbert / keras-hub ratio last.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from typing import TYPE_CHECKING

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import bench_flags  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

bench_flags.define("model", "seq_length", "batch_size", "steps", "work_dir", steps=6, rounds=3)
flags.DEFINE_bool("jit_compile", False, "XLA-compile both training steps.")
flags.DEFINE_enum("precision", "float32", ["float32", "mixed_bfloat16"], "Keras precision policy of both.")
flags.DEFINE_integer("vocab_size", 30522, "Size of the synthetic WordPiece vocabulary.")
flags.DEFINE_bool("short_texts", False, "Single texts of median 20 word pieces instead of long sentence pairs.")
flags.DEFINE_float("learning_rate", 2e-5, "AdamW's (constant) learning rate, both.")
flags.DEFINE_integer("eval_examples", 512, "Held-out examples each model is scored on after the timed rounds.")
FLAGS = flags.FLAGS

if TYPE_CHECKING:
    from kbert.finetuning.encoding import PairEncoder
    from kbert.finetuning.examples import Examples
    from kbert.modeling import BertConfig

WEIGHT_DECAY = 0.01
# Words w0 and w1 mark class 0, w2 and w3 class 1; the rest is filler.
MARKERS_PER_CLASS = 2
SHORT_MEDIAN_WORDS = 18  # + [CLS] and [SEP]: a median of 20 word pieces
EVAL_BATCH = 128


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


def synthetic_task(vocab: list[str], count: int, seed: int) -> Examples:
    """`Examples` of a two-class task: one marker word of its class at a random place in the first text, among
    filler words. Long sentence pairs fill `--seq_length` (both contestants truncate); `--short_texts` are single
    texts of log-normal length, median `SHORT_MEDIAN_WORDS` words."""
    from kbert.finetuning.examples import Examples

    rng = np.random.default_rng(seed)
    words = [w for w in vocab if w.startswith("w")]
    filler = words[2 * MARKERS_PER_CLASS :]
    labels = rng.integers(0, 2, count).astype("int32")

    def length() -> int:
        if FLAGS.short_texts:
            return max(1, round(rng.lognormal(np.log(SHORT_MEDIAN_WORDS), 0.5)))
        return int(rng.integers(FLAGS.seq_length // 3, FLAGS.seq_length))

    def text(label=None) -> str:
        chosen = [filler[i] for i in rng.integers(0, len(filler), length())]
        if label is not None:
            marker = words[label * MARKERS_PER_CLASS + int(rng.integers(0, MARKERS_PER_CLASS))]
            chosen.insert(int(rng.integers(0, len(chosen) + 1)), marker)
        return " ".join(chosen)

    text_a = [text(int(y)) for y in labels]
    return Examples("synthetic", text_a, None if FLAGS.short_texts else [text() for _ in labels], labels)


def kbert_contestant(config: BertConfig, encoder: PairEncoder, examples: Examples, held_out: Examples):
    """The model, its training batches and its held-out inputs."""
    from kbert.finetuning import BertClassifier, FinetuneConfig
    from kbert.finetuning.batches import eval_batches, training_batches
    from kbert.modeling import BertEncoder
    from kbert.runtime.optimizer_factory import make_optimizer

    dataset = training_batches(encoder, examples, FLAGS.batch_size, seed=0)  # what kbert-finetune trains on
    model = BertClassifier(BertEncoder(config), num_outputs=2)
    section = FinetuneConfig().optimizer
    section.override({"weight_decay": WEIGHT_DECAY})
    optimizer = make_optimizer(
        section, FLAGS.learning_rate, mixed_precision=FLAGS.precision, variables=model.trainable_variables
    )
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=FLAGS.jit_compile,
    )
    return model, dataset, eval_batches(encoder, held_out, EVAL_BATCH, with_labels=False)


def keras_hub_inputs(examples: Examples):
    """keras-hub's `x`: the text tensor, or the pair of them."""
    from kbert.finetuning.encoding import text_columns

    columns = text_columns(examples)
    return columns[0] if len(columns) == 1 else columns


def keras_hub_contestant(config: BertConfig, vocab_file: str, examples: Examples, held_out: Examples):
    """The model, its training batches and its held-out inputs (texts: the model preprocesses them)."""
    import keras_hub
    import tensorflow as tf

    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=config.vocab_size,
        num_layers=config.num_hidden_layers,
        num_heads=config.num_attention_heads,
        hidden_dim=config.hidden_size,
        intermediate_dim=config.intermediate_size,
        dropout=config.hidden_dropout_prob,
        max_sequence_length=config.max_position_embeddings,
    )
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor(
        keras_hub.models.BertTokenizer(vocabulary=vocab_file, lowercase=True), sequence_length=FLAGS.seq_length
    )
    model = keras_hub.models.BertTextClassifier(backbone, num_classes=2, preprocessor=preprocessor)
    optimizer = keras.optimizers.AdamW(FLAGS.learning_rate, weight_decay=WEIGHT_DECAY, epsilon=1e-6)
    optimizer.exclude_from_weight_decay(var_names=["gamma", "beta", "bias"])  # kbert's LayerNorm and bias rule
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=FLAGS.jit_compile,
    )
    dataset = tf.data.Dataset.from_tensor_slices((keras_hub_inputs(examples), examples.labels))
    dataset = dataset.shuffle(len(examples)).batch(FLAGS.batch_size, drop_remainder=True).repeat()
    return model, dataset, tf.data.Dataset.from_tensor_slices(keras_hub_inputs(held_out)).batch(EVAL_BATCH)


def timed_round(model, dataset) -> float:
    timer = StepTimer()
    model.fit(dataset, steps_per_epoch=FLAGS.steps, epochs=1, callbacks=[timer], shuffle=False, verbose=0)
    return timer.seconds_per_step()


def padding_report(encoder: PairEncoder, examples: Examples) -> str:
    """The task's packed lengths and the widths of kbert's first training batches, against keras-hub's fixed one."""
    from kbert.finetuning.batches import eval_batches, training_batches

    lengths = np.concatenate(
        [f["input_mask"].numpy().sum(axis=1) for f in eval_batches(encoder, examples, EVAL_BATCH, with_labels=False)]
    )
    widths = [f["input_ids"].shape[1] for f, _ in training_batches(encoder, examples, FLAGS.batch_size, 0).take(50)]
    return (
        f"packed lengths: median {np.median(lengths):.0f}, mean {lengths.mean():.1f} tokens; batch widths: kbert "
        f"mean {np.mean(widths):.1f} (first 50 batches), keras-hub {FLAGS.seq_length}"
    )


def accuracy(model: keras.Model, inputs, labels: np.ndarray) -> float:
    return float(np.mean(np.argmax(model.predict(inputs, verbose=0), axis=-1) == labels))


def main(argv):
    del argv
    from kbert.finetuning.encoding import PairEncoder
    from kbert.modeling import BertConfig

    keras.mixed_precision.set_global_policy(FLAGS.precision)
    keras.utils.set_random_seed(0)
    work_dir = FLAGS.work_dir or tempfile.mkdtemp(prefix="bench_finetune_")
    vocab_file = os.path.join(work_dir, "vocab.txt")
    vocab = write_vocab(vocab_file, FLAGS.vocab_size)
    config = BertConfig.load(FLAGS.model).replace(vocab_size=len(vocab), hidden_act="gelu_approximate")
    examples = synthetic_task(vocab, FLAGS.batch_size * FLAGS.steps * (FLAGS.rounds + 1), seed=0)
    held_out = synthetic_task(vocab, FLAGS.eval_examples, seed=1)
    encoder = PairEncoder(vocab_file, FLAGS.seq_length)
    contestants = {
        "kbert (fit, length-bucketed batches)": kbert_contestant(config, encoder, examples, held_out),
        f"keras-hub (BertTextClassifier.fit, {FLAGS.seq_length})": keras_hub_contestant(
            config, vocab_file, examples, held_out
        ),
    }
    for model, dataset, _ in contestants.values():  # trace and warm up
        timed_round(model, dataset)
    times = {name: [] for name in contestants}
    for _ in range(FLAGS.rounds):
        for name, (model, dataset, _) in contestants.items():
            times[name].append(timed_round(model, dataset))
    scores = {name: accuracy(model, inputs, held_out.labels) for name, (model, _, inputs) in contestants.items()}
    task = "short single texts" if FLAGS.short_texts else "long sentence pairs"
    print(
        f"\n{FLAGS.model}, seq {FLAGS.seq_length}, batch {FLAGS.batch_size}, {FLAGS.precision}, "
        f"jit_compile={FLAGS.jit_compile}; {FLAGS.rounds} rounds of {FLAGS.steps} steps"
    )
    print(f"{task}: {padding_report(encoder, examples)}")
    rate = {name: FLAGS.batch_size / statistics.median(ts) for name, ts in times.items()}
    for name, value in rate.items():
        spread = f"{FLAGS.batch_size / max(times[name]):.1f}-{FLAGS.batch_size / min(times[name]):.1f}"
        print(f"{name:42s} {value:8.1f} seq/s (median of rounds; range {spread})")
    # One binomial standard error at the worse of the two accuracies: the noise the comparison is within.
    error = max((p * (1 - p) / FLAGS.eval_examples) ** 0.5 for p in scores.values())
    print(
        f"held-out accuracy after {(FLAGS.rounds + 1) * FLAGS.steps} steps, {FLAGS.eval_examples} examples: "
        + ", ".join(f"{name.split()[0]} {value:.3f}" for name, value in scores.items())
        + f" (± {error:.3f})"
    )
    kbert, hub = rate.values()
    print(f"kbert / keras-hub: {kbert / hub:.2f}x")


if __name__ == "__main__":
    app.run(main)
