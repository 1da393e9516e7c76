"""Benchmarks of data preparation, in four sections (`--sections`; the first three by default):

* data: kbert's create_pretraining_data against Model Garden's, same corpus and settings, two corpus sizes.
* vocab: kbert-build-vocab's two learners (Hugging Face `tokenizers`, tensorflow-text) on the same text.
* beam: kbert-create-pretraining-data on Apache Beam's DirectRunner against the local tool, same corpus.
* tokenizer: kbert-create-pretraining-data with a byte-level BPE tokenizer.json (--tokenizer) against WordPiece
  (--vocab_file), same corpus, vocabularies of equal size.

Data section:

Runs each tool as a subprocess (end to end: interpreter and TensorFlow start-up included) and samples its process
tree every 0.2 s for peak memory: PSS summed over the tree (pages shared by forked workers counted once) and the
largest single-process RSS. Corpus "Nx" is the corpus N times over, documents shuffled (`--scales`). Both tools
spend about 5 s importing TensorFlow before any work, which dominates small corpora; so besides the end-to-end
ratios it prints each tool's steady rate, (instances of the larger corpus - of the smaller) / (difference of
their wall times), in which every fixed cost cancels. Prints the speed ratios last.

    python tools/bench_data.py --corpus=runs/demo-.../data/train.txt --vocab_file=vocab.txt --dupe_factor=3 \\
        --scales=1,8

Vocab section: every `--heldout_every`-th document of `--vocab_text` (default: `--corpus`) is held out, each
learner learns a `--vocab_size` vocabulary from the rest in its own subprocess (so peak memories do not mix), and
kbert's tokenizer splits the held-out text with each vocabulary. Also learns one with `tokenizers` at the size
tensorflow-text returned, to compare pieces per word at equal size. Prints, per run, the learning time (imports
excluded) and the subprocess's wall time, peak RSS and what learning added to it, the size returned against the
size asked, pieces per held-out word and the share of [UNK] pieces; then the speed and memory ratios.

    python tools/bench_data.py --sections=vocab --vocab_text='corpus/*.txt' --vocab_size=30522

Beam section: the local tool with `--num_workers` processes, and the Beam pipeline on DirectRunner in its
multi-processing mode with as many workers and in its single-process in-memory mode, on `--corpus` at the largest
of `--scales`; each end to end in a subprocess, its record set checked against the local tool's. Prints
instances per second and the ratio to the local tool.

    python tools/bench_data.py --sections=beam --corpus=corpus.txt --vocab_file=vocab.txt --scales=4

Tokenizer section: `--tokenizer`, or a byte-level BPE tokenizer.json that kbert-build-vocab --learner=bpe learns
from `--corpus` at its defaults (cased) at the size of `--vocab_file` (or of a WordPiece vocabulary of `--vocab_size`
learned from `--corpus`, as the vocab section learns one). Three paths: wordpiece (tensorflow-text's
FastBertTokenizer, on the calling thread), bpe (tokenizers' encode_batch as the data tool runs it: over its Rayon
pool of one thread per core, or on one thread in each worker where the workers are as many as the cores) and "bpe 1
thread" (TOKENIZERS_PARALLELISM=false everywhere). For each of
`--objectives` at each of `--scales`, runs kbert-create-pretraining-data end to end on each path in turn (same
flags, `--num_workers` workers), and prints instances and corpus MB per second, the process tree's CPU seconds,
the steady rates (as the data section's) and BPE's ratios to WordPiece, then a verdict: whether the BPE path is
slower end to end in instances per second, at any size or in steady state. Printed first, though measured last (in
this process, after every subprocess): tokenization alone, pieces per second of each path's `tokenize_marked` (BPE's
by a new tokenizer each pass, as a worker meets the corpus, and by one that kept the corpus's words; and of
WordPiece's `tokenize`, of tokenizers' `encode_batch` alone on whole lines) on the lines of each `--work_unit_mb`
work unit of `--corpus`, a call a unit as the workers make them, the median of `--repeats` passes. Then one worker
alone: a data-tool worker's whole work on each unit of `--corpus` in turn, in this process, BPE on one thread against
WordPiece, the CPU seconds of a new worker's first pass, of that pass's last third (where it still meets new words,
as every worker does all through a corpus of gigabytes; the verdict counts it) and of a second pass.

    python tools/bench_data.py --sections=tokenizer --corpus=corpus.txt --vocab_file=vocab.txt --scales=1,4
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import NamedTuple

import bench_flags
import psutil
from absl import app, flags

FLAGS = flags.FLAGS
bench_flags.define(
    "corpus",
    "vocab_file",
    "seq_length",
    "max_predictions",
    "work_dir",
    notes={
        "work_dir": "Default: a temporary one.",
        "corpus": "Required by the data section.",
        "vocab_file": "Required by the data section.",
    },
)
flags.DEFINE_list(
    "sections",
    ["data", "vocab", "beam"],
    "What to benchmark: data (create_pretraining_data, kbert "
    "against Model Garden), vocab (kbert-build-vocab's learners, tokenizers against tensorflow_text), "
    "beam (the Beam pipeline against the local tool), tokenizer (data creation with a BPE tokenizer.json against "
    "WordPiece; not by default).",
)
flags.DEFINE_integer("dupe_factor", 3, "Passes over the data (both tools).")
flags.DEFINE_integer("num_workers", 2, "kbert worker processes.")
flags.DEFINE_float("work_unit_mb", 1.0, "kbert work-unit size.")
flags.DEFINE_list(
    "scales", ["1", "8"], "Corpus sizes, in copies of --corpus: the smallest and the largest give the steady rates."
)
flags.DEFINE_string("vocab_text", None, "Vocab section: text files, comma-separated globs. Default: --corpus.")
flags.DEFINE_integer(
    "vocab_size",
    8000,
    "Vocab section: the vocabulary size asked of both learners. Tokenizer section: the size of the WordPiece "
    "vocabulary learned from --corpus when no --vocab_file is given.",
)
flags.DEFINE_integer("heldout_every", 20, "Vocab section: every N-th document is held out to count pieces per word.")
flags.DEFINE_string(
    "tokenizer",
    None,
    "Tokenizer section: the tokenizer.json (or its directory) to set against --vocab_file. Default: a byte-level "
    "BPE one learned from --corpus at the WordPiece vocabulary's size (kbert-build-vocab --learner=bpe).",
)
flags.DEFINE_list("objectives", ["nsp", "mlm"], "Tokenizer section: data creation's --objective values, each on both.")
flags.DEFINE_integer(
    "repeats", 5, "Tokenizer section: timed passes of tokenization alone over --corpus; the median is reported."
)
flags.DEFINE_string("vocab_job", None, "Internal: one learner's run (JSON), done in a subprocess of the vocab section.")

LEARNERS = ("tensorflow_text", "tokenizers")
SECTIONS = ("data", "vocab", "beam", "tokenizer")
# The tokenizer section's paths through data creation: name -> (the tokenizer's kind, environment on top).
# tokenizers' encode_batch spreads a batch over its Rayon pool (RAYON_NUM_THREADS threads, by default one per core)
# unless TOKENIZERS_PARALLELISM is false; tensorflow-text's FastBertTokenizer runs on the calling thread.
_ONE_THREAD = {"TOKENIZERS_PARALLELISM": "false"}
TOKENIZER_PATHS = {"wordpiece": ("wordpiece", {}), "bpe": ("bpe", {}), "bpe 1 thread": ("bpe", _ONE_THREAD)}


class VocabRun(NamedTuple):
    learner: str
    asked: int
    returned: int
    learn_seconds: float
    wall_seconds: float
    peak_rss_mb: float
    learning_mb: float
    pieces_per_word: float
    unk_percent: float


class TokenizeRun(NamedTuple):
    """One call of the tokenizer section's tokenization alone over every work unit of --corpus."""

    path: str
    call: str
    pieces: int
    seconds: list[float]  # one per timed pass
    cpu_seconds: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def threads_busy(self) -> float:
        """CPU seconds per wall second, over all timed passes: the threads the call kept busy."""
        return sum(self.cpu_seconds) / sum(self.seconds)


class WorkerRun(NamedTuple):
    """One data-tool worker's CPU seconds over the units of --corpus (`_worker_alone`)."""

    objective: str
    path: str
    first: float  # a new worker's pass
    last_third: float  # the units of the first pass's last third, scaled to the whole corpus
    second: float
    instances: int  # of one pass


# `_worker_alone`'s paths (BPE on one thread, as a worker a core runs it) and passes (WorkerRun field, name).
WORKER_PATHS = ("bpe 1 thread", "wordpiece")
WORKER_PASSES = (("first", "first pass"), ("last_third", "last third"), ("second", "second pass"))


class Run(NamedTuple):
    corpus: str
    size_mb: float
    tool: str
    instances: int
    seconds: float
    pss_mb: float
    rss_mb: float

    @property
    def rate(self) -> float:
        return self.instances / self.seconds


def _scaled_corpus(path: str, copies: int, out: str) -> None:
    with open(path, "rb") as f:
        documents = [d for d in f.read().split(b"\n\n") if d.strip()]
    documents = documents * copies
    random.Random(0).shuffle(documents)
    with open(out, "wb") as f:
        f.write(b"\n\n".join(d.strip(b"\n") for d in documents) + b"\n")


@functools.cache
def _corpus_at(copies: int, work: str) -> str:
    """`--corpus` `copies` times over (`_scaled_corpus`), written into `work` once a run; `--corpus` itself for 1."""
    if copies == 1:
        return FLAGS.corpus
    path = os.path.join(work, f"corpus_{copies}x.txt")
    _scaled_corpus(FLAGS.corpus, copies, path)
    return path


def _instance_flags(objective: str = "nsp") -> list[str]:
    """The instance settings every create_pretraining_data run of a section shares (--short_seq_prob is nsp's)."""
    return [
        f"--max_seq_length={FLAGS.seq_length}",
        f"--max_predictions_per_seq={FLAGS.max_predictions}",
        f"--dupe_factor={FLAGS.dupe_factor}",
        "--masked_lm_prob=0.15",
        *(["--short_seq_prob=0.1"] if objective == "nsp" else []),
        "--random_seed=12345",
    ]


def _steady_rate(first: Run, last: Run) -> float:
    """Instances per second between two corpus sizes: (instances of `last` - of `first`) / (difference of their
    wall times), in which every fixed cost (start-up, imports) cancels."""
    return (last.instances - first.instances) / max(last.seconds - first.seconds, 1e-3)


def _measure(command: list[str], env: dict[str, str] | None = None) -> tuple[float, float, float]:
    """Wall seconds, peak summed PSS (MB) and peak single-process RSS (MB) of a command's process tree, run with
    this process's environment and `env`'s variables on top."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
    start = time.time()
    process = psutil.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    peak_pss = peak_rss = 0.0
    while process.poll() is None:
        pss = 0.0
        try:
            tree = [process] + process.children(recursive=True)
        except psutil.NoSuchProcess:
            break
        for p in tree:
            try:
                info = p.memory_full_info()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            pss += info.pss
            peak_rss = max(peak_rss, info.rss)
        peak_pss = max(peak_pss, pss)
        time.sleep(0.2)
    seconds = time.time() - start
    stderr = process.stderr.read().decode(errors="replace")
    if process.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{stderr[-3000:]}")
    return seconds, peak_pss / 2**20, peak_rss / 2**20


def _count(path: str) -> int:
    import tensorflow as tf

    return sum(1 for _ in tf.data.TFRecordDataset(path))


def _data_section(work: str) -> None:
    """kbert's and Model Garden's create_pretraining_data on `--corpus` at each of `--scales`."""
    scales = sorted(int(k) for k in FLAGS.scales)
    corpora = {f"{copies}x": _corpus_at(copies, work) for copies in scales}
    common = [f"--vocab_file={FLAGS.vocab_file}", "--do_lower_case=true", *_instance_flags()]
    startup = {
        tool: _measure([sys.executable, "-c", f"import {module}"])[0]
        for tool, module in (
            ("kbert", "kbert.cli.create_pretraining_data"),
            ("model_garden", "official.nlp.data.create_pretraining_data"),
        )
    }
    rows = []
    for label, corpus in corpora.items():
        size_mb = os.path.getsize(corpus) / 1e6
        for tool, module, extra in (
            (
                "kbert",
                "kbert.cli.create_pretraining_data",
                [f"--num_workers={FLAGS.num_workers}", f"--work_unit_mb={FLAGS.work_unit_mb}"],
            ),
            ("model_garden", "official.nlp.data.create_pretraining_data", []),
        ):
            out = os.path.join(work, f"{tool}_{label}.tfrecord")
            command = [sys.executable, "-m", module, f"--input_file={corpus}", f"--output_file={out}", *common, *extra]
            seconds, pss, rss = _measure(command)
            instances = _count(out)
            rows.append(Run(label, size_mb, tool, instances, seconds, pss, rss))
            print(f"{label} {tool}: {instances:,} instances in {seconds:.1f} s", flush=True)
    print(
        f"\ncpu cores: {os.cpu_count()}, load average at end: {os.getloadavg()[0]:.1f}; "
        f"dupe_factor={FLAGS.dupe_factor}, seq_length={FLAGS.seq_length}, kbert workers={FLAGS.num_workers}"
    )
    print(f"start-up (import only): kbert {startup['kbert']:.1f} s, model_garden {startup['model_garden']:.1f} s")
    print(
        f"{'corpus':>8} {'MB':>6} {'tool':>13} {'instances':>10} {'wall s':>7} {'inst/s':>8} "
        f"{'peak PSS MB':>11} {'max RSS MB':>10}"
    )
    for r in rows:
        print(
            f"{r.corpus:>8} {r.size_mb:6.1f} {r.tool:>13} {r.instances:10,} {r.seconds:7.1f} {r.rate:8,.0f} "
            f"{r.pss_mb:11,.0f} {r.rss_mb:10,.0f}"
        )
    by = {(r.corpus, r.tool): r for r in rows}
    small, large = f"{scales[0]}x", f"{scales[-1]}x"
    steady = {tool: _steady_rate(by[(small, tool)], by[(large, tool)]) for tool in ("kbert", "model_garden")}
    print(
        f"steady rate ({small} to {large}): kbert {steady['kbert']:,.0f} inst/s, model_garden "
        f"{steady['model_garden']:,.0f} inst/s: {steady['kbert'] / steady['model_garden']:.1f}x"
    )
    for label in corpora:
        ratio = by[(label, "kbert")].rate / by[(label, "model_garden")].rate
        print(f"speed ratio kbert / model_garden, end to end ({label} corpus): {ratio:.1f}x")


def _vocab_section(work: str) -> None:
    """Both vocabulary learners on the same training text, then their vocabularies on the same held-out text."""
    from kbert.data import input_files, text_corpus

    inputs = input_files.expand_patterns(FLAGS.vocab_text or FLAGS.corpus, "--vocab_text")
    train, heldout = os.path.join(work, "vocab_train.txt"), os.path.join(work, "vocab_heldout.txt")
    split = text_corpus.write_split(text_corpus.read_documents(inputs), train, heldout, FLAGS.heldout_every)
    with open(heldout, encoding="utf-8") as f:
        heldout_lines = [line.strip() for line in f if line.strip()]
    words = _count_words(heldout_lines)
    runs = [_vocab_run(learner, FLAGS.vocab_size, train, heldout_lines, words, work) for learner in LEARNERS]
    if runs[0].returned != FLAGS.vocab_size:
        runs.append(_vocab_run("tokenizers", runs[0].returned, train, heldout_lines, words, work))
    print(f"\n{_machine()}")
    print(
        f"vocabulary: trained on {os.path.getsize(train) / 1e6:.1f} MB ({split.train_documents:,} documents), "
        f"held out {os.path.getsize(heldout) / 1e6:.1f} MB (every {FLAGS.heldout_every}th document, "
        f"{words:,} words); lower_case, bert layout (104 reserved)"
    )
    print(
        f"{'learner':>15} {'asked':>7} {'returned':>8} {'learn s':>8} {'wall s':>7} {'peak RSS MB':>11} "
        f"{'learning MB':>11} {'pieces/word':>11} {'[UNK] %':>7}"
    )
    for r in runs:
        print(
            f"{r.learner:>15} {r.asked:7,} {r.returned:8,} {r.learn_seconds:8.1f} {r.wall_seconds:7.1f} "
            f"{r.peak_rss_mb:11,.0f} {r.learning_mb:11,.0f} {r.pieces_per_word:11.3f} {r.unk_percent:7.2f}"
        )
    tf_text, hf = runs[0], runs[1]
    print(
        f"tokenizers against tensorflow_text at --vocab_size={FLAGS.vocab_size:,}: "
        f"{tf_text.learn_seconds / hf.learn_seconds:.1f}x faster learning "
        f"({tf_text.wall_seconds / hf.wall_seconds:.1f}x end to end); "
        f"peak RSS {hf.peak_rss_mb / tf_text.peak_rss_mb:.2f}x, "
        f"memory added by learning {hf.learning_mb / max(tf_text.learning_mb, 1):.2f}x"
    )
    equal = runs[-1]
    print(
        f"pieces per held-out word at {equal.returned:,} tokens (tensorflow_text's size): tensorflow_text "
        f"{tf_text.pieces_per_word:.3f}, tokenizers {equal.pieces_per_word:.3f}"
    )


def _vocab_run(learner: str, size: int, train: str, heldout_lines: list[str], words: int, work: str) -> VocabRun:
    """One learner in a subprocess (`_learn_vocab`), then its vocabulary on the held-out lines."""
    from kbert.data.wordpiece.tokenizer import WordpieceTokenizer

    vocab_path, result, wall = _learn_vocab(learner, size, train, work)
    tokenizer = WordpieceTokenizer(vocab_path, lower_case=True)
    ids, _ = tokenizer.tokenize(heldout_lines)
    unk = float((ids == tokenizer.vocab.index("[UNK]")).mean()) * 100
    print(f"vocab {learner} {size:,}: {result['returned']:,} tokens in {result['seconds']:.1f} s", flush=True)
    return VocabRun(
        learner,
        size,
        result["returned"],
        result["seconds"],
        wall,
        result["peak_rss_mb"],
        result["learning_mb"],
        len(ids) / words,
        unk,
    )


def _learn_vocab(learner: str, size: int, train: str, work: str) -> tuple[str, dict, float]:
    """A `size` vocabulary learned from `train` by `learner` in a subprocess (this script with --vocab_job): its
    path, the job's figures (`_vocab_job`) and the subprocess's wall seconds."""
    vocab_path = os.path.join(work, f"vocab_{learner}_{size}.txt")
    job = {"learner": learner, "size": size, "train": train, "vocab": vocab_path, "result": vocab_path + ".json"}
    wall, _, _ = _measure([sys.executable, os.path.abspath(__file__), f"--vocab_job={json.dumps(job)}"])
    with open(job["result"]) as f:
        return vocab_path, json.load(f), wall


def _vocab_job(spec: str) -> None:
    """Learns one vocabulary (`spec` from `_learn_vocab`) and writes its figures. The learner's imports come before
    the clock starts and before the RSS the learning is measured against."""
    from kbert.data.wordpiece import vocab_learning

    job = json.loads(spec)
    if job["learner"] == "tensorflow_text":
        importlib.import_module("tensorflow_text.tools.wordpiece_vocab.bert_vocab_from_dataset")
    process = psutil.Process()
    before = process.memory_info().rss
    peak = [before]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            peak[0] = max(peak[0], process.memory_info().rss)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.time()
    tokens, _ = vocab_learning.learn_vocabulary([job["train"]], job["size"], learner=job["learner"])
    seconds = time.time() - start
    done.set()
    sampler.join()
    vocab_learning.write_vocabulary(tokens, job["vocab"])
    with open(job["result"], "w") as f:
        json.dump(
            {
                "returned": len(tokens),
                "seconds": seconds,
                "learning_mb": (peak[0] - before) / 2**20,
                "peak_rss_mb": _peak_rss_mb(),
            },
            f,
        )


def _peak_rss_mb() -> float:
    """This process's peak RSS since it started. Not getrusage's ru_maxrss: that counts the RSS of the process
    it was forked from (this benchmark, TensorFlow imported) before the exec."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024  # kB


def _count_words(lines: list[str]) -> int:
    """Words as BERT's basic tokenizer splits them (punctuation marks are words), lower-cased."""
    from tokenizers import normalizers, pre_tokenizers

    normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True)
    pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return sum(len(pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(line))) for line in lines)


def _records(pattern: str) -> list[bytes]:
    import tensorflow as tf

    return sorted(bytes(r) for r in tf.data.TFRecordDataset(sorted(tf.io.gfile.glob(pattern))).as_numpy_iterator())


def _beam_section(work: str) -> None:
    """The local tool against the Beam pipeline on DirectRunner, on `--corpus` at the largest of `--scales`."""
    corpus = _corpus_at(max(int(k) for k in FLAGS.scales), work)
    common = [
        sys.executable,
        "-m",
        "kbert.cli.create_pretraining_data",
        f"--input_file={corpus}",
        f"--vocab_file={FLAGS.vocab_file}",
        f"--max_seq_length={FLAGS.seq_length}",
        f"--max_predictions_per_seq={FLAGS.max_predictions}",
        f"--dupe_factor={FLAGS.dupe_factor}",
        f"--work_unit_mb={FLAGS.work_unit_mb}",
        "--num_output_shards=4",
    ]
    workers = FLAGS.num_workers
    runs = {
        "local": [f"--num_workers={workers}"],
        f"beam DirectRunner, {workers} processes": [
            "--runner=DirectRunner",
            f"--beam_pipeline_args=--direct_num_workers={workers}",
            "--beam_pipeline_args=--direct_running_mode=multi_processing",
        ],
        "beam DirectRunner, in memory": ["--runner=DirectRunner"],
    }
    rows, local = [], None
    for name, extra in runs.items():
        out = os.path.join(work, f"beam_{len(rows)}", "train.tfrecord")
        seconds, pss, _ = _measure(common + [f"--output_file={out}"] + extra)
        records = _records(out + "-*")
        local = local if local is not None else records
        rows.append((name, len(records), seconds, pss, records == local))
        print(f"{name}: {len(records):,} instances in {seconds:.1f} s", flush=True)
    print(f"\n{_machine()}; corpus {os.path.getsize(corpus) / 1e6:.1f} MB, dupe_factor={FLAGS.dupe_factor}")
    print(f"{'run':>34} {'instances':>10} {'wall s':>7} {'inst/s':>8} {'peak PSS MB':>11} {'same records':>12}")
    for name, instances, seconds, pss, same in rows:
        print(f"{name:>34} {instances:10,} {seconds:7.1f} {instances / seconds:8,.0f} {pss:11,.0f} {str(same):>12}")
    for name, _, seconds, _, _ in rows[1:]:
        print(f"speed ratio {name} / local tool, end to end: {rows[0][2] / seconds:.2f}x")


def _tokenizer_section(work: str) -> None:
    """Data creation through a tokenizer.json (byte-level BPE) against WordPiece, on `--corpus` with vocabularies
    of equal size: end to end at each of `--scales` for each of `--objectives`, then tokenization alone."""
    load_at_start = os.getloadavg()[0]
    from kbert.data.hf_tokenizer import HfTokenizer
    from kbert.data.wordpiece.vocab_file import read_vocabulary

    vocab_file = FLAGS.vocab_file
    if not vocab_file:
        vocab_file, result, wall = _learn_vocab("tokenizers", FLAGS.vocab_size, FLAGS.corpus, work)
        print(f"wordpiece: {result['returned']:,} tokens learned from --corpus in {wall:.1f} s", flush=True)
    size = len(read_vocabulary(vocab_file))
    bpe = FLAGS.tokenizer or _learn_bpe(size, work)
    bpe_size = HfTokenizer(bpe).vocab_size
    if bpe_size != size:
        print(f"note: the tokenizer.json holds {bpe_size:,} tokens, the WordPiece vocabulary {size:,}", flush=True)
    scales = sorted(int(k) for k in FLAGS.scales)
    corpora = {f"{copies}x": _corpus_at(copies, work) for copies in scales}
    tokenizer_flags = {
        "wordpiece": [f"--vocab_file={vocab_file}", "--do_lower_case=true"],
        "bpe": [f"--tokenizer={bpe}"],
    }
    runs: dict[tuple[str, str, str], Run] = {}
    cpu: dict[tuple[str, str, str], float] = {}
    for objective in FLAGS.objectives:
        for label, corpus in corpora.items():
            for path, (kind, env) in TOKENIZER_PATHS.items():  # the paths side by side at each size: load drifts
                out = os.path.join(work, "tokenizer_section.tfrecord")
                command = [
                    sys.executable,
                    "-m",
                    "kbert.cli.create_pretraining_data",
                    f"--input_file={corpus}",
                    f"--output_file={out}",
                    *tokenizer_flags[kind],
                    *_instance_flags(objective),
                    f"--objective={objective}",
                    f"--num_workers={FLAGS.num_workers}",
                    f"--work_unit_mb={FLAGS.work_unit_mb}",
                ]
                before = _children_cpu_seconds()
                seconds, pss, rss = _measure(command, env)
                cpu[(objective, label, path)] = _children_cpu_seconds() - before
                instances = _count(out)
                os.remove(out)
                runs[(objective, label, path)] = Run(
                    label, os.path.getsize(corpus) / 1e6, path, instances, seconds, pss, rss
                )
                print(f"{objective} {label} {path}: {instances:,} instances in {seconds:.1f} s", flush=True)
    alone = _tokenize_alone(vocab_file, bpe)
    worker = _worker_alone(vocab_file, bpe)

    rayon = os.environ.get("RAYON_NUM_THREADS") or f"one per core: {len(os.sched_getaffinity(0))}"
    print(f"\n{_machine(load_at_start)}")
    print(
        f"wordpiece: {vocab_file}, {size:,} tokens, lower-cased (tensorflow-text's FastBertTokenizer, on the calling "
        f"thread); bpe: {bpe}, {bpe_size:,} tokens (tokenizers' encode_batch on its Rayon pool, {rayon} threads; "
        f"one thread a worker in the data tool where its {FLAGS.num_workers} workers are as many as the cores); "
        "bpe 1 thread: the same with TOKENIZERS_PARALLELISM=false"
    )
    units_mb = os.path.getsize(FLAGS.corpus) / 1e6
    print(
        f"\ntokenization alone: {FLAGS.corpus} ({units_mb:.1f} MB), one call a work unit of {FLAGS.work_unit_mb} MiB "
        f"as the data tool's workers make them, in this process; median of {FLAGS.repeats} timed passes (best after "
        "it) after an untimed one; busy = CPU s / wall s"
    )
    print(
        f"{'path':>12} {'call':>15} {'pieces':>10} {'median s':>8} {'best s':>6} {'pieces/s':>10} {'MB/s':>6} "
        f"{'busy':>5}"
    )
    for r in alone:
        print(
            f"{r.path:>12} {r.call:>15} {r.pieces:10,} {r.median:8.2f} {min(r.seconds):6.2f} "
            f"{r.pieces / r.median:10,.0f} {units_mb / r.median:6.2f} {r.threads_busy:5.2f}"
        )
    by_call = {(r.path, r.call): r for r in alone}
    wordpiece = by_call[("wordpiece", "tokenize_marked")]
    for path, call in (("bpe", "tokenize_marked"), ("bpe", "marked, kept"), ("bpe 1 thread", "tokenize_marked")):
        r = by_call[(path, call)]
        pieces = r.pieces / r.median / (wordpiece.pieces / wordpiece.median)
        print(f"{path} / wordpiece, {call}: pieces/s {pieces:.2f}x, text MB/s {wordpiece.median / r.median:.2f}x")

    print(
        f"\none worker alone: a data-tool worker's whole work on each unit of {FLAGS.corpus} in turn (read, tokenize, "
        "make and serialize the instances), in this process on one thread; CPU s of a new worker's pass (it meets "
        "the corpus), of the units of that pass's last third (it has met the common words, and meets new ones as in "
        "a large corpus) and of a second pass (it has met every word)"
    )
    print(f"{'objective':>9} {'path':>12} {'first pass':>10} {'last third':>10} {'second pass':>11} {'instances':>10}")
    print(f"{'':>9} {'':>12} {'':>10} {'(scaled)':>10}")
    for r in worker:
        print(f"{r.objective:>9} {r.path:>12} {r.first:10.2f} {r.last_third:10.2f} {r.second:11.2f} {r.instances:10,}")
    in_new_text = {}  # objective -> BPE / WordPiece instances per CPU s of one worker, last third
    for objective in FLAGS.objectives:
        bpe_run, wp_run = (next(r for r in worker if (r.objective, r.path) == (objective, p)) for p in WORKER_PATHS)
        instances = bpe_run.instances / wp_run.instances
        in_new_text[objective] = instances * wp_run.last_third / bpe_run.last_third
        print(
            f"{objective} bpe / wordpiece, one worker, text per CPU s: "
            + ", ".join(f"{getattr(wp_run, k) / getattr(bpe_run, k):.2f}x {n}" for k, n in WORKER_PASSES)
            + f"; instances per CPU s in the last third {in_new_text[objective]:.2f}x"
        )

    print(
        f"\nend to end: kbert-create-pretraining-data, {FLAGS.num_workers} workers, dupe_factor={FLAGS.dupe_factor}, "
        f"max_seq_length={FLAGS.seq_length}, work_unit_mb={FLAGS.work_unit_mb}; CPU s: the process tree's"
    )
    print(
        f"{'objective':>9} {'corpus':>6} {'MB':>5} {'path':>12} {'instances':>10} {'wall s':>6} {'CPU s':>6} "
        f"{'inst/s':>8} {'MB/s':>5} {'peak PSS MB':>11}"
    )
    for (objective, _, _), r in runs.items():
        print(
            f"{objective:>9} {r.corpus:>6} {r.size_mb:5.1f} {r.tool:>12} {r.instances:10,} {r.seconds:6.1f} "
            f"{cpu[(objective, r.corpus, r.tool)]:6.1f} {r.rate:8,.0f} {r.size_mb / r.seconds:5.2f} {r.pss_mb:11,.0f}"
        )
    small, large = f"{scales[0]}x", f"{scales[-1]}x"
    verdicts = []
    for objective in FLAGS.objectives:
        steady, steady_mb = {}, {}
        for path in TOKENIZER_PATHS:
            first, last = runs[(objective, small, path)], runs[(objective, large, path)]
            steady[path] = _steady_rate(first, last)
            steady_mb[path] = (last.size_mb - first.size_mb) / max(last.seconds - first.seconds, 1e-3)
        print(
            f"{objective} steady rate ({small} to {large}): "
            + ", ".join(f"{p} {steady[p]:,.0f} inst/s ({steady_mb[p]:.2f} MB/s)" for p in TOKENIZER_PATHS)
        )
        ratios = {}
        for path in ("bpe", "bpe 1 thread"):
            ratios[path] = {
                label: runs[(objective, label, path)].rate / runs[(objective, label, "wordpiece")].rate
                for label in corpora
            }
            ratios[path]["steady"] = steady[path] / steady["wordpiece"]
            print(
                f"{objective} {path} / wordpiece, inst/s: "
                + ", ".join(f"{ratio:.2f}x {label}" for label, ratio in ratios[path].items())
                + f"; steady MB/s {steady_mb[path] / steady_mb['wordpiece']:.2f}x"
            )
        verdicts.append((objective, ratios["bpe"]))
    slower = any(ratio < 1 for o, by_size in verdicts for ratio in [*by_size.values(), in_new_text[o]])
    print(
        f"verdict: the BPE path (tokenizers' default threads) is {'SLOWER' if slower else 'not slower'} end to end "
        "than the WordPiece path in instances/s ("
        + "; ".join(
            f"{o}: {r[large]:.2f}x at {large}, {r['steady']:.2f}x steady, {in_new_text[o]:.2f}x one worker on new text"
            for o, r in verdicts
        )
        + ")"
    )


def _learn_bpe(size: int, work: str) -> str:
    """A byte-level BPE tokenizer.json of `size` tokens learned from `--corpus` by kbert-build-vocab --learner=bpe
    at its defaults (cased, BERT's special tokens), in a subprocess: its path."""
    path = os.path.join(work, f"bpe_{size}", "tokenizer.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    command = [sys.executable, "-m", "kbert.cli.build_vocab", "--learner=bpe", f"--vocab_size={size}"]
    seconds, _, _ = _measure([*command, f"--input_file={FLAGS.corpus}", f"--output_file={path}"])
    print(f"bpe: {size:,} tokens learned from --corpus in {seconds:.1f} s", flush=True)
    return path


def _children_cpu_seconds() -> float:
    """User and system CPU seconds of every finished subprocess of this process, theirs included."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@contextlib.contextmanager
def _environment(variables: dict[str, str]) -> Iterator[None]:
    """This process's environment with `variables` on top, restored on exit."""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _tokenize_alone(vocab_file: str, bpe: str) -> list[TokenizeRun]:
    """Tokenization alone, in this process: each call on the lines of each work unit of `--corpus`, one call a
    unit, as unit_processing.py's workers make them. One untimed pass first (tensorflow-text builds its function),
    then `--repeats` timed passes, the calls taking turns within each so load drifts touch all alike. BPE's
    tokenize_marked keeps the pieces of the words it has encoded (hf_tokenizer.py): its "tokenize_marked" passes
    each use a new tokenizer, which meets every word for the first time as a worker does, and "marked, kept" one
    that has met them all (the untimed pass), as a worker that has met a corpus's words in earlier units.
    tokenizers reads TOKENIZERS_PARALLELISM at every encode_batch, so the "1 thread" calls set it around theirs."""
    from kbert.data import hf_tokenizer, work_units
    from kbert.data.wordpiece.tokenizer import WordpieceTokenizer

    units, _ = work_units.plan_work_units([FLAGS.corpus], int(FLAGS.work_unit_mb * (1 << 20)))
    unit_lines = [[line for doc in work_units.read_documents(unit)[0] for line in doc] for unit in units]
    wordpiece = WordpieceTokenizer(vocab_file, lower_case=True)
    kept = hf_tokenizer.HfTokenizer(bpe)

    def fresh() -> Callable[[list[str]], object]:
        """A new tokenizer's tokenize_marked, keeping no words yet: a worker's as it meets the corpus."""
        return hf_tokenizer.HfTokenizer(bpe).tokenize_marked

    def encode_batch(lines: list[str]) -> None:
        """The library's call alone on whole lines, in batches of _BATCH_LINES (tokenize_marked before it kept
        words): what tokenizers costs a line."""
        for start in range(0, len(lines), hf_tokenizer._BATCH_LINES):
            kept._tokenizer.encode_batch(lines[start : start + hf_tokenizer._BATCH_LINES], add_special_tokens=False)

    # (path, call, the function for one pass, made before the pass's clock starts)
    calls = [
        ("wordpiece", "tokenize_marked", lambda: wordpiece.tokenize_marked),
        ("wordpiece", "tokenize", lambda: wordpiece.tokenize),
        ("bpe", "tokenize_marked", fresh),
        ("bpe", "marked, kept", lambda: kept.tokenize_marked),
        ("bpe", "encode_batch", lambda: encode_batch),
        ("bpe 1 thread", "tokenize_marked", fresh),
        ("bpe 1 thread", "encode_batch", lambda: encode_batch),
    ]
    pieces = {}
    for path, call, make in calls:
        with _environment(TOKENIZER_PATHS[path][1]):
            function = make()
            counts = [function(lines) for lines in unit_lines]
            if call == "tokenize_marked":
                pieces[path] = sum(len(ids) for ids, _ in counts)
    seconds: list[list[float]] = [[] for _ in calls]
    cpu_seconds: list[list[float]] = [[] for _ in calls]
    for _ in range(FLAGS.repeats):
        for i, (path, _, make) in enumerate(calls):
            with _environment(TOKENIZER_PATHS[path][1]):
                function = make()
                start, start_cpu = time.perf_counter(), time.process_time()
                for lines in unit_lines:
                    function(lines)
                seconds[i].append(time.perf_counter() - start)
                cpu_seconds[i].append(time.process_time() - start_cpu)
    return [
        TokenizeRun(path, call, pieces[path], seconds[i], cpu_seconds[i]) for i, (path, call, _) in enumerate(calls)
    ]


def _worker_alone(vocab_file: str, bpe: str) -> list[WorkerRun]:
    """One data-tool worker's work (unit_processing.UnitProcessor: read, tokenize, make and serialize a unit's
    instances), in this process on one thread, over every work unit of `--corpus` in turn, for each of
    `--objectives` and `WORKER_PATHS`: CPU seconds of a new worker's pass, of its last third, and of a second pass.
    A BPE worker keeps the words it has met (hf_tokenizer.py), so its first pass pays for meeting them; in the
    last third it meets the new words of text it has not seen, at the rate a corpus of gigabytes keeps bringing
    them (for one worker); the second pass meets none. WordPiece costs the same each pass."""
    from kbert.data import work_units
    from kbert.data.instances import InstanceConfig
    from kbert.data.tokenizer_source import TokenizerSource
    from kbert.data.unit_processing import Job, UnitProcessor

    units, _ = work_units.plan_work_units([FLAGS.corpus], int(FLAGS.work_unit_mb * (1 << 20)))
    last_third = len(units) - max(1, len(units) // 3)  # its first unit
    last_share = sum(u.end - u.start for u in units[last_third:]) / sum(u.end - u.start for u in units)
    sources = {"wordpiece": TokenizerSource(vocab_file=vocab_file), "bpe 1 thread": TokenizerSource(tokenizer=bpe)}
    runs = []
    for objective in FLAGS.objectives:
        config = InstanceConfig(
            max_seq_length=FLAGS.seq_length,
            max_predictions_per_seq=FLAGS.max_predictions,
            dupe_factor=FLAGS.dupe_factor,
            objective=objective,
        )
        for path in WORKER_PATHS:
            with _environment(TOKENIZER_PATHS[path][1]):
                UnitProcessor(Job(sources[path], config, 12345, False))(units[0])  # the library's first-call costs
                process = UnitProcessor(Job(sources[path], config, 12345, False))
                passes, instances = [], 0
                for _ in range(2):
                    seconds = []
                    for unit in units:
                        start = time.process_time()
                        instances += len(process(unit).records)
                        seconds.append(time.process_time() - start)
                    passes.append(seconds)
            first, second = passes
            runs.append(
                WorkerRun(
                    objective, path, sum(first), sum(first[last_third:]) / last_share, sum(second), instances // 2
                )
            )
    return runs


def _machine(load_at_start: float | None = None) -> str:
    """CPU model, widest vector ISA, cores and load (at the start too, if given): what the figures depend on."""
    with open("/proc/cpuinfo") as f:
        info = f.read()
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    cpu_flags = set(next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), []))
    isa = "AVX-512" if "avx512f" in cpu_flags else "AVX2" if "avx2" in cpu_flags else "no AVX2"
    load = (
        f"load average at start: {load_at_start:.1f}, at end: "
        if load_at_start is not None
        else "load average at end: "
    )
    return f"cpu: {model}, {isa}, {os.cpu_count()} cores, {load}{os.getloadavg()[0]:.1f}"


def main(argv: list[str]) -> None:
    del argv
    if FLAGS.vocab_job:
        _vocab_job(FLAGS.vocab_job)
        return
    unknown = set(FLAGS.sections) - set(SECTIONS)
    if unknown:
        raise app.UsageError(f"--sections: unknown {sorted(unknown)}; use {', '.join(SECTIONS)}.")
    if {"data", "beam"} & set(FLAGS.sections) and not (FLAGS.corpus and FLAGS.vocab_file):
        raise app.UsageError("The data and beam sections need --corpus and --vocab_file (or use --sections=vocab).")
    if "vocab" in FLAGS.sections and not (FLAGS.vocab_text or FLAGS.corpus):
        raise app.UsageError("The vocab section needs --vocab_text or --corpus.")
    if "tokenizer" in FLAGS.sections and not FLAGS.corpus:
        raise app.UsageError("The tokenizer section needs --corpus (and --vocab_file, else it learns one).")
    if "tokenizer" in FLAGS.sections and (FLAGS.repeats < 1 or set(FLAGS.objectives) - {"nsp", "mlm"}):
        raise app.UsageError("The tokenizer section needs --repeats of at least 1 and --objectives among nsp, mlm.")
    work = FLAGS.work_dir or tempfile.mkdtemp(prefix="bench_data_")
    os.makedirs(work, exist_ok=True)
    if "data" in FLAGS.sections:
        _data_section(work)
    if "vocab" in FLAGS.sections:
        _vocab_section(work)
    if "beam" in FLAGS.sections:
        _beam_section(work)
    if "tokenizer" in FLAGS.sections:
        _tokenizer_section(work)


if __name__ == "__main__":
    app.run(main)
