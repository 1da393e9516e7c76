"""kbert's token ids for held-out sentences against transformers' `AutoTokenizer` and `tokenizers`' own
`encode_batch`, for one Hugging Face tokenizer directory; transformers lives in a virtual environment of its own
(`--transformers_python`), never in kbert's dependencies. CI holds kbert to `tokenizers`' ids instead
(tests/test_tokenizer_records.py).

kbert's ids are those `kbert-create-pretraining-data --tokenizer` writes (`HfTokenizer.tokenize_marked`, the
continuation marks undone); transformers' are `AutoTokenizer.from_pretrained(DIR)(lines, add_special_tokens=False)`.
Every line must give the same ids on all three; the first that differs is printed and the exit status is 1.

    python -m venv /tmp/hf && /tmp/hf/bin/pip install transformers tokenizers
    python tools/tokenizer_against_transformers.py --tokenizer=bpe --text=heldout.txt \
        --transformers_python=/tmp/hf/bin/python
"""

import json
import subprocess
import sys

import numpy as np
from absl import app, flags
from tokenizers import Tokenizer

from kbert.data.hf_tokenizer import HfTokenizer, tokenizer_file

FLAGS = flags.FLAGS
flags.DEFINE_string("tokenizer", None, "A directory holding tokenizer.json (and its config files).", required=True)
flags.DEFINE_string("text", None, "Text, one sentence a line; blank lines are skipped.", required=True)
flags.DEFINE_integer("lines", 2000, "Lines of --text to compare (the first ones).")
flags.DEFINE_string("transformers_python", None, "A Python with transformers.", required=True)

THEIRS = """
import json, sys
from transformers import AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
lines = json.load(sys.stdin)
print(json.dumps(tokenizer(lines, add_special_tokens=False)["input_ids"]))
"""


def main(argv: list[str]) -> None:
    del argv
    with open(FLAGS.text, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f if line.strip()][: FLAGS.lines]
    ids, splits = HfTokenizer(FLAGS.tokenizer).tokenize_marked(lines)
    ids = np.where(ids < 0, ~ids, ids)
    ours = [ids[a:b].tolist() for a, b in zip(splits[:-1], splits[1:])]
    library = [
        e.ids
        for e in Tokenizer.from_file(tokenizer_file(FLAGS.tokenizer)).encode_batch(lines, add_special_tokens=False)
    ]
    run = subprocess.run(
        [FLAGS.transformers_python, "-c", THEIRS, FLAGS.tokenizer],
        input=json.dumps(lines),
        capture_output=True,
        text=True,
        check=True,
    )
    theirs = json.loads(run.stdout)
    pieces = sum(len(x) for x in ours)
    for i, (a, b, c) in enumerate(zip(ours, library, theirs)):
        if not a == b == c:
            print(f"line {i + 1} differs: {lines[i]!r}\n  kbert        {a}\n  tokenizers   {b}\n  transformers {c}")
            sys.exit(1)
    print(
        f"{len(lines)} lines, {pieces} pieces: kbert's ids equal tokenizers' encode_batch and transformers' "
        "AutoTokenizer"
    )


if __name__ == "__main__":
    app.run(main)
