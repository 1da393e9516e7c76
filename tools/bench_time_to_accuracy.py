"""Time to accuracy, as MLPerf measures training: wall time (and samples) until held-out masked-LM accuracy reaches a
target, evaluated on a fixed sample schedule, for Model Garden's recipe and kbert's, side by side in one run.

    python tools/bench_time_to_accuracy.py --corpus=/path/to/text.txt --work_dir=/tmp/kbert_tta

One model (`--model` with `--num_layers`), one corpus split by document into training and held-out text, one
vocabulary (`--vocab_file`, else `--vocab_size` pieces learned from the training text), one held-out sample
(`--eval_sequences` of the held-out records, the same ones at every evaluation) evaluated every `--eval_interval`
training samples for every contestant. Contestants, one after the other:

- `model_garden`: Model Garden's recipe, its `MaskedLMTask` and its LAMB with its warmup and decay, float32,
  unpacked sentence-pair records (tools/model_garden_peer.py), in a process of its own;
- `kbert`: kbert-pretrain with the same recipe (model size, records, batch, steps, schedule, seed);
- each of `--levers` alone on that recipe (none with `--levers=`): `bf16` (train.mixed_precision=mixed_bfloat16),
  `xla` (train.jit_compile=step), `packed` (the same records packed by kbert-pack-pretraining-data, as many rows a
  step as hold `--batch_size` sequences), `mlm_only` (full-sentence MLM-only records of the same text,
  kbert-create-pretraining-data --objective=mlm), `mask30` to `mask60` (MASKS: dynamic masking of 30%, 40%, 50%
  or 60% of the tokens, anew each pass, on the same sentence pairs written unmasked, data.max_predictions 38, 51, 63
  or 76 at seq 128; the held-out records keep their 15% masks), `seq64` (BERT's two phases: SHORT_SHARE of the
  steps at seq 64 on sentence pairs written at that length, twice the batch, then the rest at `--seq_length`,
  each phase with its own warmup, both evaluated on the same held-out records), `no_dropout` (Cramming's dropout
  off), `wsd` and `one_cycle` (schedule.shape: warmup-stable-decay, the triangle, with the recipe's warmup),
  `batch_ramp` (the batch grows from a quarter, one of RAMP_MICRO_BATCHES micro-batches of gradient accumulation,
  to the full batch over the first RAMP_SHARE of the steps, the rate scaled by the batch's square root) and
  `modern` (ModernBERT's block at the model's widths, matched in parameters and FLOPs: MODERN_BLOCK) and `mslt_N`
  (MSLT in `--stages`, its all-layer stage N% of the steps, for each of `--final_shares`);
- `fastest`: kbert with every lever that beat `kbert` alone by `--min_gain` on time to target (or, where a run ended
  below it, to the highest accuracy all of them reached), the fastest of each kind (one of RECORDS: packed, MLM-only,
  dynamically masked and seq-64 records; one schedule shape of SHAPES; one MSLT plan), or `--fastest_levers` (refused
  where two of one kind are named). It may train `--fastest_steps_scale` times the steps, its schedule stretched to
  match, and it stops at the target: as in MLPerf, a submission picks its own schedule and only its time to target
  counts. `--fastest=false` leaves it out (e.g. `--levers= --fastest=false`: Model Garden and kbert alone);
- `modern` (with `--modern`): the fastest's levers and `modern`, on every seed: the same recipe with ModernBERT's
  block in place of BERT's, compared with Model Garden and with the fastest seed by seed.

MLPerf's mode: `--start_checkpoint` (a google-research/bert checkpoint of `--model` at `--num_layers` with the
bench's vocabulary, e.g. an exported phase 1) or `--start_steps` (kbert's recipe trained that many steps with `--seed`
on the bench's records, exported to Google's format as WORK_DIR/start/bert_model.ckpt and reused by later runs with
the same flags) is the one shared start of every contestant, Model Garden's included (train.init_checkpoint;
tools/model_garden_peer.py loads it into its pretrainer), as MLPerf starts every submission from its phase-1
checkpoint: the race then runs past the unigram plateau from its first step. MSLT levers, which grow the model from
a shallower one, are refused there.

Model Garden, kbert and the fastest run once per seed of `--seeds` (default 12345 and 1; its `train.seed`: the
weights, dropout and the data order, Model Garden's as kbert's), each lever alone once with the first seed, and
every contestant once with `--seed` when `--seeds` is empty; the records and the vocabulary are made once, with
`--seed`. With more than one seed a run is named by its contestant and seed (`kbert seed=1`; its files
`kbert_seed1*`), a lever is compared with kbert by their median times over the seeds the lever ran, and the
default target is judged by Model Garden's median final accuracy.

The target is `--target_mlm_accuracy`, which every run stops at; by default it is the real regime's floor, the
higher of REAL_REGIME_FLOOR (0.25) and twice the unigram plateau, where Model Garden's median final accuracy
reaches it, and otherwise (said in one line) the lowest of its seeds' final accuracies less `--target_margin`,
read in this run, so that every seed of Model Garden reaches it; and then
every run trains to its end and its time to target is read from its evaluations
(kbert.training.evaluation_history). Seconds count from each run's start of training (after its model is built),
evaluations included. The unigram plateau is the held-out accuracy of always
predicting the training records' most frequent masked-LM label, the level a model sits at before it uses the
context; a run leaves it at its first evaluation at `PLATEAU_EXIT` times that accuracy or above.

Prints the unigram plateau and a table of every run: samples and seconds to target, final held-out accuracy and
the samples it was reached at, the run's process seconds and its samples to leave the plateau. Then the ratios
against Model Garden (its time to target over the contestant's, with the same seed): with one seed, that ratio
and the samples' one; with more, their medians over the seeds where both runs reached the target, the time ratio's
min and max, and the seeds the contestant reached it on. The last line is kbert's fastest against Model Garden.
Writes results.json (the target, the plateau, every run's summary, the flags) and time_to_accuracy.png (held-out
accuracy against wall time and against samples, a colour per contestant) into --work_dir; each kbert run's log,
config and model_dir are there too.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import bench_flags  # noqa: E402
import numpy as np  # noqa: E402
import yaml  # noqa: E402
from absl import app, flags  # noqa: E402

from kbert.data import text_corpus  # noqa: E402
from kbert.data.create_pretraining_data import create_pretraining_data  # noqa: E402
from kbert.data.instances import InstanceConfig  # noqa: E402
from kbert.data.masking import predictions_needed  # noqa: E402
from kbert.data.pipeline import pretraining_dataset  # noqa: E402
from kbert.data.wordpiece.vocab_file import load_vocabulary  # noqa: E402
from kbert.data.wordpiece.vocab_learning import learn_vocabulary, write_vocabulary  # noqa: E402
from kbert.errors import KbertError  # noqa: E402
from kbert.experiment import load_experiment, stages_of  # noqa: E402
from kbert.modeling import BertConfig, BertEncoder  # noqa: E402
from kbert.training.evaluation_history import final_accuracy, first_reaching, read_summary, time_to_target  # noqa: E402
from kbert.training.stage import with_layouts  # noqa: E402

# Dynamic masking of 30% to 60% of the tokens (`maskNN`).
MASKS = tuple(f"mask{percent}" for percent in (30, 40, 50, 60))
LEVERS = (
    "bf16",
    "xla",
    "packed",
    "mlm_only",
    *MASKS,
    "seq64",
    "no_dropout",
    "wsd",
    "one_cycle",
    "batch_ramp",
    "modern",
)  # and mslt_N
# Levers that exclude each other, at most one of a kind in a run: each of these trains on its own records (the
# dynamic-masking levers on unmasked pairs, seq64 on seq-64 pairs), and a run has one schedule shape.
RECORDS, SHAPES = ("packed", "mlm_only", *MASKS, "seq64"), ("wsd", "one_cycle")
# modern: ModernBERT's block (arXiv 2412.13663) at --model's widths and depth: rotary positions (theta 160,000 in
# global layers, 10,000 in local ones), a GeGLU feed-forward, pre-LayerNorm with a final norm and no attention norm
# in block 0, no biases, 128-token local windows and a global layer every third. The GeGLU's width is two thirds of
# the model's intermediate size, so a block has BERT's feed-forward parameters and FLOPs less its biases. The
# segment table and next-sentence head stay: the lever trains and is scored on the same sentence-pair records as
# every contestant, so it changes the block alone.
MODERN_BLOCK = dict(
    norm_placement="pre",
    first_block_attention_norm=False,
    feed_forward="gated",
    use_bias=False,
    head_use_bias=False,
    layer_norm_eps=1e-5,
    position_embedding="rotary",
    rope_theta=160000.0,
    local_attention=128,
    local_rope_theta=10000.0,
    global_attn_every_n_layers=3,
)
# The batch ramp: 4 micro-batches a full step, from one micro-batch over the first quarter of the steps.
RAMP_MICRO_BATCHES, RAMP_SHARE = 4, 0.25
# seq64: BERT's two phases at CPU sizes, phase 1 (this share of the steps) at seq SHORT_SEQ, the rest at
# --seq_length. Phase 1 takes --seq_length / SHORT_SEQ times the batch: the same tokens (and masked predictions)
# a step as the recipe, so the lever changes what a step sees, not how much text; its samples count short
# sequences.
SHORT_SEQ, SHORT_SHARE = 64, 0.9

bench_flags.define(
    "vocab_file",
    required=("corpus",),
    work_dir="/tmp/kbert_bench_tta",
    model="bert_tiny",
    seq_length=128,
    max_predictions=20,
    batch_size=32,
    notes={
        "vocab_file": "Not given: one of --vocab_size pieces is learned from the training text.",
        "model": "Its depth is --num_layers.",
    },
)
flags.DEFINE_integer("vocab_size", 8000, "Size of the vocabulary learned when --vocab_file is not given.")
flags.DEFINE_integer("num_layers", 4, "Depth of the model (the last of --stages).")
flags.DEFINE_integer("total_steps", 1000, "Optimizer steps of every run (Model Garden's recipe and kbert's).")
flags.DEFINE_integer("steps_per_loop", 10, "Steps between progress lines; evaluations happen at loop ends.")
flags.DEFINE_float(
    "peak_learning_rate",
    1.5e-2,
    "LAMB peak rate of every contestant: the best of 5e-3, 1e-2, 1.5e-2 "
    "and 2e-2 for Model Garden's recipe at the defaults (docs/results/time_to_accuracy.md).",
)
flags.DEFINE_float("warmup_share", 0.1, "Warmup steps as a share of the steps.")
flags.DEFINE_integer(
    "eval_interval",
    0,
    "Training samples (sequences) between held-out evaluations; 0: a twenty-fourth of the run, rounded to whole loops.",
)
flags.DEFINE_integer(
    "eval_sequences",
    1024,
    "Held-out sequences per evaluation (the same ones every time; all of them where the held-out records hold fewer).",
)
flags.DEFINE_float(
    "target_mlm_accuracy",
    None,
    "Held-out masked-LM accuracy to reach (every run stops there); "
    "default: max(0.25, twice the plateau) where Model Garden's recipe reaches it, else its lowest "
    "final accuracy over the seeds less --target_margin, read in this run.",
)
flags.DEFINE_float(
    "target_margin", 0.0, "Subtracted from Model Garden's lowest final accuracy where that is the default target."
)
flags.DEFINE_list(
    "levers",
    ["bf16", "mask40", "no_dropout", "wsd", "mslt"],
    "kbert's levers to run alone (of " + ", ".join(LEVERS) + " and mslt; mslt: "
    "one run per --final_shares), before the fastest combination. The default is the lever of each "
    "kind that was fastest at 1,200 steps (docs/results/time_to_accuracy.md); the others run when named.",
)
flags.DEFINE_list("stages", ["2", "4"], "MSLT growth stages' depths.")
flags.DEFINE_list(
    "final_shares", ["0.2"], "MSLT all-layer stage's shares of the steps, one run each (the paper's is about 20%)."
)
flags.DEFINE_float(
    "final_rate_scale",
    1.0,
    "MSLT all-layer stage's peak rate as a multiple of the growth stages' "
    "(docs/mslt.md: 1.0 beats the library's 0.1 at these stage lengths).",
)
flags.DEFINE_float(
    "later_learning_rate",
    0.0,
    "Peak rate of the MSLT stages after the first, the all-layer stage's before --final_rate_scale "
    "(configs/experiments/bert_tiny_fast_cpu.yaml: 1e-2); 0: --peak_learning_rate.",
)
flags.DEFINE_list(
    "fastest_levers", None, "The fastest contestant's levers; default: those that beat kbert alone by --min_gain."
)
flags.DEFINE_float(
    "min_gain",
    1.05,
    "A lever beats kbert alone where kbert's median time to the level over the "
    "lever's is at least this: a smaller gain on one seed is within a run's noise "
    "(docs/results/time_to_accuracy.md).",
)
flags.DEFINE_bool("fastest", True, "Run the fastest contestant; false: only Model Garden, kbert and --levers.")
flags.DEFINE_bool(
    "modern",
    False,
    "After the fastest contestant, run `modern`: the fastest's levers and the modern lever (ModernBERT's block), "
    "on every seed, with the fastest's steps.",
)
flags.DEFINE_float(
    "fastest_steps_scale",
    1.5,
    "The fastest contestant's step budget as a multiple of --total_steps; "
    "it stops at the target, so levers that trade accuracy per step for speed can still reach it.",
)
flags.DEFINE_integer("dupe_factor", 5, "Masked copies of the training text in the records.")
flags.DEFINE_integer("max_sequences_per_pack", 3, "Sequences a packed row holds at most.")
flags.DEFINE_integer("seed", 12345, "Seed of the records, and of the runs when --seeds is empty.")
flags.DEFINE_list(
    "seeds",
    ["12345", "1"],
    "Seeds of the runs (train.seed: weights, dropout, data order): Model "
    "Garden, kbert and the fastest run once per seed, each lever alone with the first; empty: --seed "
    "alone. The records are made with --seed either way.",
)
flags.DEFINE_string("plot", "", "PNG path; default WORK_DIR/time_to_accuracy.png.")
flags.DEFINE_string(
    "start_checkpoint",
    "",
    "MLPerf's mode: a google-research/bert checkpoint (prefix) of --model at "
    "--num_layers and the bench's vocabulary that every contestant starts from "
    "(train.init_checkpoint).",
)
flags.DEFINE_integer(
    "start_steps",
    0,
    "MLPerf's mode, with a start made here: kbert's recipe trained this many steps "
    "with --seed, exported as WORK_DIR/start/bert_model.ckpt (reused with the same flags), every "
    "contestant's start. 0: each run starts from its own draw.",
)
flags.DEFINE_bool(
    "report_only",
    False,
    "Train nothing: print the table and ratios of WORK_DIR/results.json again, at "
    "--target_mlm_accuracy or else at the default target of its runs (e.g. with another "
    "--target_margin).",
)
FLAGS = flags.FLAGS
HELDOUT_EVERY = 20  # every 20th document is held out
RECORDED_FLAGS = (
    "corpus",
    "vocab_file",
    "model",
    "num_layers",
    "seq_length",
    "max_predictions",
    "batch_size",
    "total_steps",
    "fastest_steps_scale",
    "fastest_levers",
    "min_gain",
    "peak_learning_rate",
    "warmup_share",
    "eval_sequences",
    "target_mlm_accuracy",
    "target_margin",
    "stages",
    "final_rate_scale",
    "later_learning_rate",
    "dupe_factor",
    "seed",
    "seeds",
    "fastest",
    "modern",
    "start_checkpoint",
    "start_steps",
)
EVAL_BATCH = 64
REAL_REGIME_FLOOR = 0.25  # the default target: at least this held-out accuracy, and at least twice the plateau
PLATEAU_EXIT = 1.25  # a run leaves the unigram plateau at its first evaluation at this multiple of it or above


@dataclasses.dataclass
class Data:
    """The bench's records: unpacked sentence pairs (train, held out), packed, MLM-only, unmasked, at seq 64, and
    the vocabulary."""

    train: str
    heldout: str
    packed: str  # "" when kbert's packer is not installed
    mlm_only: str
    unmasked: str  # the training sentence pairs without masks, for dynamic masking
    short: str  # the training sentence pairs at SHORT_SEQ, for seq64's phase 1
    vocab_file: str
    vocab_size: int
    sequences_per_row: float  # packed: the mean sequences a row
    settings: dict  # the flags the records were made with


def data_settings() -> dict:
    return {
        name: FLAGS[name].value
        for name in (
            "corpus",
            "vocab_file",
            "vocab_size",
            "seq_length",
            "max_predictions",
            "dupe_factor",
            "max_sequences_per_pack",
            "seed",
        )
    }


def make_data(work_dir: str) -> Data:
    """Split, vocabulary and records under work_dir/data, reused when an earlier run made them with the same flags
    (data.json says which)."""
    directory = os.path.join(work_dir, "data")
    described = os.path.join(directory, "data.json")
    if os.path.exists(described):
        with open(described) as f:
            made = json.load(f)
        if made["settings"] != data_settings() or set(made) != {f.name for f in dataclasses.fields(Data)}:
            raise app.UsageError(
                f"{directory} holds records made with {made['settings']} by another version of "
                "this bench or other flags; give another --work_dir."
            )
        return Data(**made)
    os.makedirs(directory, exist_ok=True)
    text = {name: os.path.join(directory, f"{name}.txt") for name in ("train", "heldout")}
    split = text_corpus.write_split(
        text_corpus.read_documents([FLAGS.corpus]), text["train"], text["heldout"], HELDOUT_EVERY
    )
    print(f"corpus: {split.train_documents:,} training documents, {split.heldout_documents:,} held out", flush=True)
    vocab_file = FLAGS.vocab_file or os.path.join(directory, f"vocab_{FLAGS.vocab_size}.txt")
    if not FLAGS.vocab_file:
        write_vocabulary(learn_vocabulary([text["train"]], FLAGS.vocab_size)[0], vocab_file)
    kinds = {
        "train": ("train", "nsp", FLAGS.dupe_factor, {}),
        "heldout": ("heldout", "nsp", 1, {}),
        "mlm_only": ("train", "mlm", FLAGS.dupe_factor, {}),
        "unmasked": ("train", "nsp", FLAGS.dupe_factor, {"no_masking": True}),
        f"seq{SHORT_SEQ}": (
            "train",
            "nsp",
            FLAGS.dupe_factor,
            {"max_seq_length": SHORT_SEQ, "max_predictions_per_seq": short_predictions()},
        ),
    }
    records = {name: os.path.join(directory, f"{name}.tfrecord") for name in kinds}
    for name, (source, objective, dupe_factor, settings) in kinds.items():
        settings = {"max_seq_length": FLAGS.seq_length, "max_predictions_per_seq": FLAGS.max_predictions, **settings}
        summary = create_pretraining_data(
            [text[source]],
            [records[name]],
            vocab_file,
            True,
            InstanceConfig(dupe_factor=dupe_factor, objective=objective, **settings),
            random_seed=FLAGS.seed,
            num_workers=2,
        )
        print(f"{name}: {summary.instances:,} records", flush=True)
    packed, per_row = pack(records["train"], os.path.join(directory, "packed.tfrecord"))
    data = Data(
        records["train"],
        records["heldout"],
        packed,
        records["mlm_only"],
        records["unmasked"],
        records[f"seq{SHORT_SEQ}"],
        vocab_file,
        len(load_vocabulary(vocab_file)),
        per_row,
        data_settings(),
    )
    with open(described, "w") as f:
        json.dump(dataclasses.asdict(data), f, indent=2)
    return data


def short_predictions() -> int:
    """seq64's phase-1 records' masked positions: --max_predictions in proportion to SHORT_SEQ (10 of 64 for 20 of
    128, about BERT's 15% of the tokens)."""
    return max(1, round(FLAGS.max_predictions * SHORT_SEQ / FLAGS.seq_length))


def pack(unpacked: str, output: str) -> tuple[str, float]:
    """kbert-pack-pretraining-data's packing of `unpacked` into `output`; ("", 1.0) where the packer is missing."""
    try:
        from kbert.data.packing.pack_pretraining_data import pack_pretraining_data
    except ImportError:
        print("packed: kbert's packer is not installed; the packed contestant is left out", flush=True)
        return "", 1.0
    summary = pack_pretraining_data([unpacked], [output], FLAGS.max_sequences_per_pack, FLAGS.seed)
    print(f"packed: {summary.sequences:,} sequences in {summary.rows:,} rows", flush=True)
    return output, summary.sequences / summary.rows


def seeds() -> list[int]:
    """The runs' seeds: --seeds, or --seed alone."""
    return [int(seed) for seed in FLAGS.seeds] or [FLAGS.seed]


def seeded(name: str, seed: int, joint: str = " seed=") -> str:
    """The name of `name`'s run with `seed` (`joint="_seed"` for its files): `name` itself when one seed is run."""
    return name if len(seeds()) == 1 else f"{name}{joint}{seed}"


def eval_steps() -> int:
    """Batches of EVAL_BATCH held-out sequences an evaluation reads."""
    return max(1, FLAGS.eval_sequences // EVAL_BATCH)


def label_counts(files: str, vocab_size: int, batch_size: int, batches: int = -1) -> np.ndarray:
    """Every masked-LM label's count (weighted by masked_lm_weights: 1 at a prediction, 0 at padding) over the first
    `batches` batches (-1: all) of `files` read in file order by kbert's input pipeline, as its evaluator reads."""
    counts = np.zeros(vocab_size)
    dataset = pretraining_dataset(files, FLAGS.seq_length, FLAGS.max_predictions, batch_size, is_training=False)
    for batch in dataset.take(batches).as_numpy_iterator():
        counts += np.bincount(batch["masked_lm_ids"].ravel(), batch["masked_lm_weights"].ravel(), vocab_size)
    return counts


def unigram_plateau(data: Data) -> float:
    """Held-out masked-LM accuracy of always predicting the training records' most frequent masked-LM label. Held
    out, it counts what every evaluation scores: the first eval.steps batches of EVAL_BATCH of data.heldout through
    the same pipeline, each label weighted as kbert's masked-LM accuracy weighs it."""
    train = label_counts(data.train, data.vocab_size, 1024)
    heldout = label_counts(data.heldout, data.vocab_size, EVAL_BATCH, eval_steps())
    return float(heldout[np.argmax(train)] / heldout.sum())


def eval_interval() -> int:
    """Samples between evaluations: --eval_interval, or a twenty-fourth of the run in whole loops."""
    per_loop = FLAGS.batch_size * FLAGS.steps_per_loop
    return FLAGS.eval_interval or per_loop * max(1, round(FLAGS.total_steps / FLAGS.steps_per_loop / 24))


def shared_start() -> str:
    """The checkpoint every contestant starts from in MLPerf's mode ("" otherwise)."""
    if FLAGS.start_steps:
        return os.path.join(FLAGS.work_dir, "start", "bert_model.ckpt")
    return FLAGS.start_checkpoint


def recipe(data: Data, target: float | None, steps: int, seed: int, start: str | None = None) -> dict:
    """Model Garden's recipe as a kbert experiment over `steps` with train.seed `seed`, from `start` (default: the
    shared start, if any): the `kbert` contestant's config, the others' starting point."""
    loop = FLAGS.steps_per_loop
    start = shared_start() if start is None else start
    return {
        "model": {
            "bert": FLAGS.model,
            "overrides": {"num_hidden_layers": FLAGS.num_layers, "vocab_size": data.vocab_size},
        },
        "data": {
            "train_files": data.train,
            "eval_files": data.heldout,
            "seq_length": FLAGS.seq_length,
            "max_predictions": FLAGS.max_predictions,
        },
        "optimizer": {"type": "lamb", "weight_decay": 0.01, "lamb": {"epsilon": 1e-6}},
        "schedule": {
            "peak_learning_rate": FLAGS.peak_learning_rate,
            "warmup_steps": round(FLAGS.warmup_share * steps),
            "power": 0.5,
        },
        # One checkpoint, at the end (or at the target): saves are no part of the race.
        "train": {
            "global_batch_size": FLAGS.batch_size,
            "total_steps": steps,
            "steps_per_loop": loop,
            "summary_interval": loop,
            "checkpoint_interval": loop * math.ceil(steps / loop),
            "max_checkpoints": 1,
            "seed": seed,
            **({"init_checkpoint": start} if start else {}),
        },
        "eval": {
            "global_batch_size": EVAL_BATCH,
            "steps": eval_steps(),
            "interval_samples": eval_interval(),
            "target_mlm_accuracy": target,
        },
    }


def mslt_share(lever: str) -> float:
    """The all-layer stage's share of the steps an `mslt_N` lever names (N percent)."""
    return int(lever.split("_")[1]) / 100


def first_steps(config: dict) -> int:
    """The steps of the run's first phase (all of them without phases): what MSLT plans over and the ramp fits in."""
    return config["phases"][0]["steps"] if config.get("phases") else config["train"]["total_steps"]


def in_order(levers: list[str]) -> list[str]:
    """`levers` in the order `with_lever` applies them: seq64's phases first (MSLT plans over phase 1), the batch
    ramp last (it fits phase 1's batch and the first MSLT stage's steps)."""

    def rank(lever: str) -> int:
        return 0 if lever == "seq64" else 3 if lever == "batch_ramp" else 2 if lever.startswith("mslt_") else 1

    return sorted(levers, key=rank)


def with_lever(config: dict, lever: str, data: Data) -> None:
    """Turns one of kbert's levers on in `config` (several: in `in_order`'s order)."""
    if lever == "bf16":
        config["train"]["mixed_precision"] = "mixed_bfloat16"
    elif lever == "xla":
        config["train"]["jit_compile"] = "step"
    elif lever == "packed":
        # As many rows as hold the recipe's batch of sequences: the same samples a step, fewer rows to compute.
        config["data"]["train_files"] = data.packed
        config["train"]["global_batch_size"] = max(1, round(FLAGS.batch_size / data.sequences_per_row))
    elif lever == "mlm_only":
        config["data"]["train_files"] = data.mlm_only
    elif lever in MASKS:
        # Training masks anew at the rate; the held-out records keep their static 15% masks and their own
        # max_predictions (kbert scores masked eval records on their own masks under dynamic masking).
        rate = int(lever[4:]) / 100  # data.max_predictions: the least kbert accepts (38, 51, 63, 76 at seq 128)
        config["data"].update(
            train_files=data.unmasked,
            dynamic_masking=True,
            masked_lm_prob=rate,
            vocab_file=data.vocab_file,
            max_predictions=predictions_needed(rate, FLAGS.seq_length),
        )
    elif lever == "seq64":
        steps = config["train"]["total_steps"]
        short = min(steps - 1, round(SHORT_SHARE * steps))

        def warmup(phase_steps: int) -> int:  # each phase warms up anew, the recipe's share of its own steps
            return min(phase_steps - 1, round(FLAGS.warmup_share * phase_steps))

        # Both phases are scored on the same seq-128 held-out records as every other run.
        config["phases"] = [
            {
                "steps": short,
                "train_files": data.short,
                "eval_files": data.heldout,
                "seq_length": SHORT_SEQ,
                "max_predictions": short_predictions(),
                "warmup_steps": warmup(short),
                "global_batch_size": config["train"]["global_batch_size"] * FLAGS.seq_length // SHORT_SEQ,
            },
            {
                "steps": steps - short,
                "train_files": data.train,
                "eval_files": data.heldout,
                "seq_length": FLAGS.seq_length,
                "max_predictions": FLAGS.max_predictions,
                "warmup_steps": warmup(steps - short),
            },
        ]
    elif lever == "modern":
        config["model"]["overrides"].update(modern_overrides())
    elif lever == "no_dropout":  # Cramming's
        config["model"]["overrides"].update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    elif lever in ("wsd", "one_cycle"):  # the recipe's warmup; wsd decays over its default last 10%
        config["schedule"]["shape"] = lever
    elif lever == "batch_ramp":
        t, phases = config["train"], config.get("phases")
        # The ramp is phase 1's (kbert ramps the first phase or MSLT stage only): its batch, in whole micro-batches
        # (a packed batch, sequences / sequences a row, rounds down to them), within its first stage's steps.
        where = phases[0] if phases else t
        micro = max(1, where.get("global_batch_size", t["global_batch_size"]) // RAMP_MICRO_BATCHES)
        where["global_batch_size"] = micro * RAMP_MICRO_BATCHES
        stage = config["mslt"]["stages"][0]["steps"] if config.get("mslt") else first_steps(config)
        t.update(
            gradient_accumulation_steps=RAMP_MICRO_BATCHES,
            batch_ramp_start=micro,
            batch_ramp_steps=min(stage, max(1, round(RAMP_SHARE * t["total_steps"]))),
            batch_ramp_rate_scaling="sqrt",
        )
    else:  # mslt_N, over phase 1 when seq64 set phases (the plan's steps replace phase 1's)
        steps, depths = first_steps(config), [int(d) for d in FLAGS.stages]
        final = round(mslt_share(lever) * steps)
        growth = [(steps - final) // len(depths)] * len(depths)
        growth[-1] += steps - final - sum(growth)
        later = FLAGS.later_learning_rate or FLAGS.peak_learning_rate
        stages = [{"num_layers": d, "steps": n} for d, n in zip(depths, growth)]
        for stage in stages[1:] if FLAGS.later_learning_rate else []:
            stage["learning_rate"] = later
        config["mslt"] = {
            "stages": stages,
            "final_stage": {"steps": final, "learning_rate": later * FLAGS.final_rate_scale},
        }


def modern_overrides() -> dict:
    """The modern lever's model overrides: MODERN_BLOCK, its GeGLU two thirds of --model's intermediate size."""
    return dict(MODERN_BLOCK, intermediate_size=round(2 * BertConfig.preset(FLAGS.model).intermediate_size / 3))


def alone(data: Data) -> list[str]:
    """The levers run alone, in order (an `mslt` lever per final share; `packed` only with packed records)."""
    names = []
    for lever in FLAGS.levers:
        if lever == "mslt":
            names += [f"mslt_{round(100 * float(share))}" for share in FLAGS.final_shares]
        elif lever != "packed" or data.packed:
            names.append(lever)
    return names


def kbert_config(
    levers: list[str], data: Data, target: float | None, seed: int, steps: int, start: str | None = None
) -> dict:
    """The recipe over `steps` with `levers` and `seed` from `start` (see `recipe`), as a kbert experiment config."""
    config = recipe(data, target, steps, seed, start)
    for lever in in_order(levers):
        with_lever(config, lever, data)
    return config


def check_configs(runs: list[tuple[str, list[str], int]], data: Data) -> None:
    """kbert's load-time checks (the config, its phases and MSLT plan, each stage's records and held-out records)
    on every (name, levers, steps) run before anything trains: a lever kbert refuses stops the bench now, not
    after the runs before it. A start made here is checked from scratch (it is not there yet)."""
    start = "" if FLAGS.start_steps else None
    for name, levers, steps in runs:
        try:
            config = load_experiment(
                params_override=json.dumps(kbert_config(levers, data, None, seeds()[0], steps, start))
            )
            with_layouts(stages_of(config), evaluates=True)
        except KbertError as error:
            raise app.UsageError(
                f"{name}: kbert-pretrain refuses its config ({'+'.join(levers) or 'the recipe'}): {error}"
            ) from None


def run_kbert(
    name: str, levers: list[str], data: Data, target: float | None, seed: int, steps: int | None = None
) -> dict:
    """kbert-pretrain of the recipe with `levers` and `seed` over `steps` (default --total_steps), in its own process,
    its files named by `name` and `seed`; returns its summary.json and wall seconds."""
    config = kbert_config(levers, data, target, seed, steps or FLAGS.total_steps)
    return pretrain(os.path.join(FLAGS.work_dir, seeded(name, seed, "_seed")), seeded(name, seed), config, levers)


def pretrain(stem: str, label: str, config: dict, levers: list[str]) -> dict:
    """kbert-pretrain of `config` in its own process, into STEM (model_dir), STEM.log and STEM.yaml; returns its
    summary.json and wall seconds."""
    model_dir, log, config_file = (stem + suffix for suffix in ("", ".log", ".yaml"))
    with open(config_file, "w") as f:
        yaml.safe_dump(config, f)
    subprocess.run(["rm", "-rf", model_dir], check=True)
    seconds = call_logged(
        label,
        f"kbert-pretrain{' with ' + '+'.join(levers) if levers else ''}",
        log,
        [
            "-m",
            "kbert.run_pretraining",
            f"--config_file={config_file}",
            f"--model_dir={model_dir}",
            "--strategy=one_device",
            "--mode=train",
            "--device=cpu",
        ],
    )
    return {**read_summary(model_dir), "process_seconds": seconds, "levers": levers}


def call_logged(label: str, what: str, log: str, args: list[str]) -> float:
    """Runs this Python with `args`, its output in `log`, announced as `label: what (log LOG)`; returns its wall
    seconds, or raises naming the log where it fails."""
    print(f"{label}: {what} (log {log})", flush=True)
    started = time.time()
    with open(log, "w") as out:
        code = subprocess.call([sys.executable, *args], stdout=out, stderr=subprocess.STDOUT)
    if code:
        raise RuntimeError(f"{label} failed (exit {code}); see {log}.")
    return time.time() - started


def make_start(data: Data) -> None:
    """--start_steps' shared start: kbert's recipe over that many steps with --seed, its pretrainer (heads included)
    exported in Google's format to `shared_start()`; reused when an earlier run made it with the same flags."""
    from kbert.finetuning.exporting import checkpoint_pretrainer
    from kbert.modeling import export_google_checkpoint

    directory = os.path.dirname(shared_start())
    settings = {
        **data.settings,
        **{
            name: FLAGS[name].value
            for name in ("model", "num_layers", "batch_size", "peak_learning_rate", "warmup_share", "start_steps")
        },
    }
    described = os.path.join(directory, "start.json")
    if os.path.exists(described):
        with open(described) as f:
            made = json.load(f)
        if made["settings"] == settings:
            print(
                f"shared start: {shared_start()} (made earlier: {made['steps']:,} steps of kbert's recipe, held-out "
                f"accuracy {made['accuracy']:.4f})",
                flush=True,
            )
            return
        subprocess.run(["rm", "-rf", directory], check=True)  # made with other flags: make it anew
    os.makedirs(directory, exist_ok=True)
    config = recipe(data, None, FLAGS.start_steps, FLAGS.seed, start="")
    config["eval"]["interval_samples"] = FLAGS.start_steps * FLAGS.batch_size  # one evaluation, at its end
    summary = pretrain(os.path.join(directory, "run"), "shared start", config, [])
    pretrainer, _ = checkpoint_pretrainer(os.path.join(directory, "run"), "", data.vocab_file)
    export_google_checkpoint(pretrainer, shared_start())
    accuracy = final_accuracy(summary["evaluations"])
    with open(described, "w") as f:
        json.dump({"settings": settings, "steps": FLAGS.start_steps, "accuracy": accuracy}, f, indent=2)
    print(
        f"shared start: {shared_start()} ({FLAGS.start_steps:,} steps of kbert's recipe, held-out accuracy "
        f"{accuracy:.4f})",
        flush=True,
    )


def run_model_garden(data: Data, target: float | None, seed: int) -> dict:
    """Model Garden's recipe (float32, one device) on the `kbert` contestant's config with `seed` (its weights,
    dropout and data order follow train.seed), in its own process as kbert's runs are: MODEL_GARDEN_SEED.yaml,
    .log and .json under --work_dir."""
    stem = os.path.join(FLAGS.work_dir, seeded("model_garden", seed, "_seed"))
    config_file, log, summary = (stem + suffix for suffix in (".yaml", ".log", ".json"))
    with open(config_file, "w") as f:
        yaml.safe_dump(recipe(data, target, FLAGS.total_steps, seed), f)
    seconds = call_logged(
        seeded("model_garden", seed),
        "Model Garden's MaskedLMTask and LAMB, float32",
        log,
        [os.path.join(os.path.dirname(os.path.abspath(__file__)), "model_garden_peer.py"), config_file, summary],
    )
    with open(summary) as f:
        return {**json.load(f), "process_seconds": seconds, "levers": []}


def default_target(results: dict[str, dict], plateau: float) -> float:
    """The real regime's floor, max(REAL_REGIME_FLOOR, 2 x the plateau), where Model Garden's median final accuracy
    reaches it; else the lowest of its seeds' final accuracies (so that every seed has a ratio) less
    --target_margin, said in one line."""
    floor = max(REAL_REGIME_FLOOR, 2 * plateau)
    finals = [final_accuracy(run["evaluations"]) for run in by_contestant(results)["model_garden"]]
    if statistics.median(finals) >= floor:
        return floor
    print(
        f"Model Garden's recipe ended at {statistics.median(finals):.4f} held-out accuracy (median over its "
        f"seeds), below the real regime's floor {floor:.4f} (the higher of {REAL_REGIME_FLOOR} and twice the "
        f"plateau): the target is its lowest final accuracy, {min(finals):.4f}, less --target_margin; give more "
        "--total_steps, a larger --model or a larger corpus to measure past it.",
        flush=True,
    )
    return min(finals) - FLAGS.target_margin


def run_seeds(results: dict[str, dict], contestant: str, run, every_seed: bool = True) -> None:
    """`run(seed)` for every seed (or the first alone), into `results` under the run's name, marked with its
    contestant and seed."""
    for seed in seeds() if every_seed else seeds()[:1]:
        results[seeded(contestant, seed)] = {**run(seed), "contestant": contestant, "seed": seed}


def by_contestant(results: dict[str, dict]) -> dict[str, list[dict]]:
    """Each contestant's runs (one a seed), in the order they ran."""
    runs = {}
    for result in results.values():
        runs.setdefault(result["contestant"], []).append(result)
    return runs


def seconds_to(result: dict, level: float) -> float:
    """Seconds to `level` (infinite when not reached): the key the fastest levers are chosen by."""
    reached = time_to_target(result, level)
    return reached["seconds"] if reached else math.inf


def selection_level(results: dict[str, dict], target: float) -> float:
    """The accuracy the levers are compared at: the target, or the highest level that `kbert` and every lever alone
    reached when one ended below it (MSLT ends lower at equal steps but may still be faster to a given level)."""
    runs = [result for result in results.values() if result["contestant"] != "model_garden"]
    return min([target] + [final_accuracy(result["evaluations"]) for result in runs])


def kinds(mslt: list[str]) -> list[tuple[str, ...]]:
    """The levers by kind, a run taking at most one of each: precision, XLA, records (RECORDS), dropout, schedule
    shape (SHAPES), batch ramp, block (modern), and `mslt`'s MSLT plans."""
    return [("bf16",), ("xla",), RECORDS, ("no_dropout",), SHAPES, ("batch_ramp",), ("modern",), tuple(mslt)]


def fastest_levers(results: dict[str, dict], level: float) -> list[str]:
    """The levers that beat `kbert` alone (by `--min_gain`) on median time to `level` over the seeds the lever ran: of
    each kind (precision, XLA, records, dropout, schedule shape, batch ramp, MSLT plan) the fastest one that did."""
    runs = by_contestant(results)

    def median(name: str) -> float:
        return statistics.median(seconds_to(run, level) for run in runs[name])

    def recipe_median(name: str) -> float:  # kbert's on the seeds `name` ran
        ran = {run["seed"] for run in runs[name]}
        return statistics.median(seconds_to(run, level) for run in runs["kbert"] if run["seed"] in ran)

    chosen = []
    for kind in kinds([name for name in runs if name.startswith("mslt_")]):
        best = min((name for name in kind if name in runs), key=median, default=None)
        if best is None:
            continue
        seconds = median(best)
        if math.isfinite(seconds) and seconds * FLAGS.min_gain <= recipe_median(best):
            chosen.append(best)
    return chosen


def block_costs() -> str:
    """One line: the non-embedding parameters and forward matmul FLOPs per token of --model's blocks at
    --num_layers, with BERT's block and with the modern lever's (from the parts' own counts)."""
    bert = BertConfig.preset(FLAGS.model).replace(num_hidden_layers=FLAGS.num_layers)
    modern = bert.replace(**modern_overrides())

    def counts(config: BertConfig) -> str:
        blocks = BertEncoder.cost(config, FLAGS.seq_length)["blocks"]
        parameters = sum(cost.parameters for cost in blocks)
        flops = sum(cost.flops for cost in blocks) / FLAGS.seq_length
        return f"{parameters:,} parameters, {flops:,.0f} FLOPs a token"

    return (
        f"{FLAGS.num_layers} blocks at seq {FLAGS.seq_length}: BERT's {counts(bert)}; "
        f"modern (GeGLU width {modern.intermediate_size}) {counts(modern)}"
    )


def plot(results: dict[str, dict], target: float, path: str) -> None:
    """Held-out accuracy against wall time (left) and against samples (right), every run (a colour per contestant),
    the target dotted."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, (by_time, by_samples) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=90)
    for index, (name, runs) in enumerate(by_contestant(results).items()):
        style = {
            "marker": "o",
            "markersize": 2.5,
            "color": f"C{index}",
            "linewidth": 2.2 if "fastest" in name or name in ("kbert", "model_garden") else 1.0,
        }
        for number, result in enumerate(runs):
            history = result["evaluations"]
            accuracy = [e["masked_lm_accuracy"] for e in history]
            label = {} if number else {"label": name}
            by_time.plot([e["seconds"] for e in history], accuracy, **style, **label)
            by_samples.plot([e["samples"] for e in history], accuracy, **style, **label)
    for axis, label in ((by_time, "wall time (s), evaluations included"), (by_samples, "training samples")):
        axis.axhline(target, color="k", linewidth=0.8, linestyle=":")
        axis.set_xlabel(label)
        axis.set_ylabel("held-out masked-LM accuracy")
        axis.grid(alpha=0.3)
    by_samples.legend(fontsize=7)
    by_time.set_title(
        f"{FLAGS.num_layers}-layer {FLAGS.model}, seq {FLAGS.seq_length}, batch {FLAGS.batch_size}, "
        f"{FLAGS.total_steps} steps; dotted: target {target:.4f}",
        fontsize=8,
    )
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def ratio_line(
    label: str, runs: list[dict], peers: dict[int, dict], target: float, with_samples: bool, peer: str = "model_garden"
) -> str:
    """`label`'s time to target against `peer`'s (`peers`: its run by seed) with the same seed (its seconds over the
    run's; the samples' ratio too `with_samples`): with one seed, the ratio; with more, the median, min and max over
    the seeds both reached the target on, and how many seeds the contestant reached it on."""
    hits = [(time_to_target(run, target), time_to_target(peers[run["seed"]], target)) for run in runs]
    pairs = [(hit, peer) for hit, peer in hits if hit and peer]
    times = [peer["seconds"] / hit["seconds"] for hit, peer in pairs]
    samples = [peer["samples"] / hit["samples"] for hit, peer in pairs]
    line = f"{label} / {peer}, time to target: "
    if len(runs) == 1:
        return line + (
            f"{times[0]:.2f}x" + (f" (samples {samples[0]:.2f}x)" if with_samples else "")
            if pairs
            else "- (not reached)"
        )
    reached = sum(1 for hit, _ in hits if hit)
    spread = (
        f"median {statistics.median(times):.2f}x, min {min(times):.2f}x, max {max(times):.2f}x"
        + (f", samples median {statistics.median(samples):.2f}x" if with_samples else "")
        if pairs
        else "-"
    )
    both = f"; ratios over the {len(pairs)} {peer} reached it on too" if len(pairs) < reached else ""
    return line + f"{spread} ({reached}/{len(runs)} seeds reached it{both})"


def report(results: dict[str, dict], target: float, plateau: float) -> None:
    """The table (a row a run), then each contestant's ratios against Model Garden, the fastest's last (none
    without a `fastest` contestant), and with a `modern` one its ratios against Model Garden and the fastest."""
    runs = by_contestant(results)
    fastest = next((name for name in runs if name.startswith("fastest")), None)
    modern = next((name for name in runs if name.startswith("modern (")), None)
    held_out = int(runs["model_garden"][0]["evaluations"][-1]["sequences"])  # --eval_sequences, or all there are
    print(
        f"\ntarget held-out masked-LM accuracy {target:.4f}; {held_out:,} held-out sequences every "
        f"{runs['kbert'][0]['interval_samples']:,} training samples"
    )
    print(
        f"unigram plateau: {plateau:.4f} held-out masked-LM accuracy; a run leaves it at its first evaluation at "
        f"{PLATEAU_EXIT}x, {PLATEAU_EXIT * plateau:.4f}"
    )
    width = max([34] + [len(name) + 2 for name in results])
    print(
        f"{'contestant':<{width}}{'samples to target':>18}{'s to target':>13}{'final accuracy':>16}"
        f"{'at samples':>12}{'run (s)':>9}{'samples to leave plateau':>26}"
    )
    for name, result in results.items():
        hit, left = time_to_target(result, target), first_reaching(result["evaluations"], PLATEAU_EXIT * plateau)
        samples, seconds = (f"{hit['samples']:,}", f"{hit['seconds']:.1f}") if hit else ("-", "-")
        last = result["evaluations"][-1]["samples"] if result["evaluations"] else 0
        off_plateau = f"{left['samples']:,}" if left else "-"
        print(
            f"{name:<{width}}{samples:>18}{seconds:>13}{final_accuracy(result['evaluations']):>16.4f}"
            f"{last:>12,}{result['process_seconds']:>9.0f}{off_plateau:>26}"
        )
    peers = {run["seed"]: run for run in runs["model_garden"]}
    for name in [n for n in runs if n not in ("model_garden", fastest, modern)]:
        print(ratio_line(name, runs[name], peers, target, True))
    if modern:
        print(ratio_line(modern, runs[modern], peers, target, True))
        bert = {run["seed"]: run for run in runs[fastest]} if fastest else {}
        if all(run["seed"] in bert for run in runs[modern]):
            print(ratio_line(modern, runs[modern], bert, target, True, peer="fastest"))
    if fastest:
        print(ratio_line(f"kbert {fastest}", runs[fastest], peers, target, False))


def main(argv: list[str]) -> None:
    del argv
    if int(FLAGS.stages[-1]) != FLAGS.num_layers:
        raise app.UsageError(f"--stages={','.join(FLAGS.stages)} must end at --num_layers={FLAGS.num_layers}.")
    unknown = [
        lever for lever in FLAGS.fastest_levers or [] if lever not in LEVERS and not re.fullmatch(r"mslt_\d+", lever)
    ]
    if unknown:
        raise app.UsageError(
            f"--fastest_levers: unknown {', '.join(unknown)}; give some of "
            f"{', '.join(LEVERS)} or mslt_N (N: the all-layer stage's percent of the steps)."
        )
    named = FLAGS.fastest_levers or []
    for kind in kinds([lever for lever in named if lever.startswith("mslt_")]):
        clash = [lever for lever in named if lever in kind]
        if len(clash) > 1:
            raise app.UsageError(
                f"--fastest_levers: {', '.join(clash)} exclude each other (one of "
                f"{', '.join(kind) if kind[0] in LEVERS else 'mslt_N'} a run); keep one."
            )
    unknown = [lever for lever in FLAGS.levers if lever not in LEVERS + ("mslt",)]
    if unknown:
        raise app.UsageError(f"--levers: unknown {', '.join(unknown)}; give some of {', '.join(LEVERS)} or mslt.")
    if "batch_ramp" in FLAGS.levers + named and FLAGS.batch_size % RAMP_MICRO_BATCHES:
        raise app.UsageError(
            f"--batch_size={FLAGS.batch_size}: the batch_ramp lever splits the batch into "
            f"{RAMP_MICRO_BATCHES} micro-batches of gradient accumulation; give a multiple of "
            f"{RAMP_MICRO_BATCHES}."
        )
    if "seq64" in FLAGS.levers + named and FLAGS.seq_length <= SHORT_SEQ:
        raise app.UsageError(
            f"--seq_length={FLAGS.seq_length}: the seq64 lever's phase 1 trains at seq {SHORT_SEQ}, "
            "shorter than the recipe's; give a longer --seq_length or leave seq64 out."
        )
    if FLAGS.modern and not FLAGS.fastest:
        raise app.UsageError("--modern adds ModernBERT's block to the fastest's levers; drop --fastest=false.")
    if FLAGS.start_checkpoint and FLAGS.start_steps:
        raise app.UsageError("--start_checkpoint and --start_steps both name the shared start; give one.")
    if (FLAGS.start_checkpoint or FLAGS.start_steps) and not FLAGS["levers"].present:
        FLAGS.levers = [lever for lever in FLAGS.levers if lever != "mslt"]  # the defaults, but those that grow
    grows = [lever for lever in FLAGS.levers + named if lever.startswith("mslt")]
    if (FLAGS.start_checkpoint or FLAGS.start_steps) and grows:
        raise app.UsageError(
            f"{', '.join(grows)}: MSLT grows the model from {FLAGS.stages[0]} layers, and the shared "
            f"start (--start_checkpoint, --start_steps) has --num_layers={FLAGS.num_layers}; leave "
            "MSLT out of --levers and --fastest_levers in MLPerf's mode."
        )
    if not all(re.fullmatch(r"-?\d+", seed) for seed in FLAGS.seeds) or len(set(seeds())) < len(FLAGS.seeds):
        raise app.UsageError(f"--seeds={','.join(FLAGS.seeds)}: give distinct integers.")
    if FLAGS.report_only:
        with open(os.path.join(FLAGS.work_dir, "results.json")) as f:
            saved = json.load(f)
        given, plateau = FLAGS.target_mlm_accuracy, saved["unigram_plateau"]
        report(saved["results"], given if given is not None else default_target(saved["results"], plateau), plateau)
        return
    os.makedirs(FLAGS.work_dir, exist_ok=True)
    print(f"load average at the start: {', '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    data = make_data(FLAGS.work_dir)
    contestants = [("kbert", [])] + [(lever, [lever]) for lever in alone(data)]
    fastest_steps = round(FLAGS.fastest_steps_scale * FLAGS.total_steps)
    checked = [(name, levers, FLAGS.total_steps) for name, levers in contestants]
    if FLAGS.fastest and FLAGS.fastest_levers:
        checked.append(("fastest", FLAGS.fastest_levers, fastest_steps))
        if FLAGS.modern:
            checked.append(("modern", [*FLAGS.fastest_levers, "modern"], fastest_steps))
    check_configs(checked, data)
    plateau = unigram_plateau(data)
    print(f"unigram plateau: {plateau:.4f} held-out masked-LM accuracy", flush=True)
    if FLAGS.start_steps:
        make_start(data)
    given = FLAGS.target_mlm_accuracy
    results = {}
    run_seeds(results, "model_garden", lambda seed: run_model_garden(data, given, seed))
    target = given if given is not None else default_target(results, plateau)
    for name, levers in contestants:  # kbert's recipe on every seed, each lever alone on the first
        run_seeds(
            results,
            name,
            lambda seed, name=name, levers=levers: run_kbert(name, levers, data, given, seed),
            every_seed=not levers,
        )
    if FLAGS.fastest:
        levers = FLAGS.fastest_levers or fastest_levers(results, selection_level(results, target))
        fastest = f"fastest ({'+'.join(levers) or 'no lever beat kbert alone'})"
        run_seeds(results, fastest, lambda seed: run_kbert("fastest", levers, data, target, seed, fastest_steps))
        if FLAGS.modern and "modern" not in levers:
            modern = [*levers, "modern"]
            print(block_costs(), flush=True)
            run_seeds(
                results,
                f"modern ({'+'.join(modern)})",
                lambda seed: run_kbert("modern", modern, data, target, seed, fastest_steps),
            )
    with open(os.path.join(FLAGS.work_dir, "results.json"), "w") as f:
        json.dump(
            {
                "target": target,
                "unigram_plateau": plateau,
                "plateau_exit": PLATEAU_EXIT,
                "results": results,
                "flags": {name: FLAGS[name].value for name in RECORDED_FLAGS},
            },
            f,
            indent=2,
        )
    plot(results, target, FLAGS.plot or os.path.join(FLAGS.work_dir, "time_to_accuracy.png"))
    print(f"load average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    report(results, target, plateau)


if __name__ == "__main__":
    app.run(main)
