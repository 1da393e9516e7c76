"""README's data section, run as written on a tiny corpus: what each command writes, the next one reads, and the
files section 3's pretraining command names are the ones written.

Only sizes are changed, by flags appended to a command that sets them (absl takes the last value): 2 output shards
instead of 64, which a tiny corpus cannot fill, and 1 worker instead of 8.
"""

import itertools
import os
import pathlib
import re
import shlex
import sys
from importlib.metadata import entry_points

import numpy as np
import pytest
import tensorflow as tf
from cli_batch import run_batch

from kbert.data import pretraining_dataset

ROOT = pathlib.Path(__file__).resolve().parents[1]
BIN = pathlib.Path(sys.executable).parent
SIZES = ("--num_output_shards=2", "--num_workers=1")
WORDS = (
    "model layer token batch step rate weight update vocabulary corpus record shard device replica gradient "
    "moment trust ratio sequence mask piece word sentence document reader writer"
).split()


def section(title: str) -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index(f"## {title}")
    return text[start : text.index("\n## ", start + 1)]


def commands(block: str) -> list[list[str]]:
    script = re.search(r"```bash\n(.*?)```", block, re.S).group(1).replace("\\\n", " ")
    lines = [line.split(" #")[0].strip() for line in script.splitlines()]
    return [shlex.split(line) for line in lines if line and not line.startswith(("#", "export"))]


def _tool(program: str) -> str:
    """The kbert.cli module that the installed console script `program` runs (its `run`), e.g. "build_vocab"."""
    assert (BIN / program).exists(), f"{program} is not installed in {BIN}"
    [script] = entry_points(group="console_scripts", name=program)
    module, function = script.value.split(":")
    assert module.startswith("kbert.cli.") and function == "run", script.value
    return module[len("kbert.cli.") :]


def write_corpus(directory: pathlib.Path) -> None:
    rng = np.random.default_rng(0)
    directory.mkdir()
    for name, docs in (("train-0.txt", 40), ("train-1.txt", 40), ("heldout.txt", 10)):
        text = "\n\n".join(
            "\n".join(
                " ".join(rng.choice(WORDS, int(rng.integers(4, 12)))) + "." for _ in range(int(rng.integers(3, 8)))
            )
            for _ in range(docs)
        )
        (directory / name).write_text(text + "\n")


@pytest.mark.spawns
def test_readme_data_commands_chain(tmp_path):
    write_corpus(tmp_path / "corpus")
    # Consecutive commands of one program run in one process of it (tests/cli_batch.py: one TensorFlow start for
    # both kbert-create-pretraining-data commands), each as a fresh process would run it, in order.
    for program, group in itertools.groupby(commands(section("2. From raw text to TFRecords")), lambda a: a[0]):
        runs = [
            argv[1:] + [s for s in SIZES if any(a.startswith(s.split("=")[0] + "=") for a in argv)] for argv in group
        ]
        for args, result in zip(runs, run_batch(_tool(program), runs, cwd=tmp_path), strict=True):
            assert result.returncode == 0, f"{program} {' '.join(args)}\n{result.stdout}\n{result.stderr}"
    pretrain = commands(section("3. Pretraining and MSLT runs"))[0]
    override = dict(
        item.split("=", 1)
        for item in next(a for a in pretrain if a.startswith("--params_override=")).split("=", 1)[1].split(",")
    )
    train = sorted(tf.io.gfile.glob(str(tmp_path / override["data.train_files"])))
    assert [os.path.basename(p) for p in train] == [f"train.tfrecord-0000{i}-of-00002" for i in range(2)]
    assert tf.io.gfile.glob(str(tmp_path / override["data.eval_files"])) == [str(tmp_path / "data/eval.tfrecord")]
    vocab_size = len((tmp_path / "vocab.txt").read_text().splitlines())
    batch = next(
        iter(pretraining_dataset(str(tmp_path / override["data.train_files"]), 128, 20, 4, vocab_size=vocab_size))
    )
    assert batch["input_ids"].shape == (4, 128)
