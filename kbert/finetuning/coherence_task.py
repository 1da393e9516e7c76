"""A downstream task made offline from a benchmark's own text: do two sentences come from the same document?
(tools/bench_mslt.py's, without --downstream_sources.)

A positive pair is a sentence and one 2 to `WINDOW` sentences after it in the same document; a negative pair is a
sentence and one from another document. Positives skip the very next sentence so the task asks about topic, not
about continuation, which is what next-sentence prediction already trains. Learnable from the words alone (a
document's sentences share names and terms), so pretraining that learned word meaning scores above random init.

Invariants: `sentence_pairs(documents, count, seed)` returns exactly `count` pairs (an even number), half of label
1 and half of label 0, in an order and with contents fixed by `seed`; the first sentences of both halves are drawn
the same way, so `text_a` alone says nothing about the label. `write_task` draws training pairs from the training
documents and eval pairs from the held-out ones, after removing from those every sentence that also occurs in a
training document: no eval sentence was seen in pretraining or fine-tuning.

Example:

```python
from kbert.data.text_corpus import read_documents

train, held_out = (list(read_documents([path])) for path in ("train.txt", "eval.txt"))
train_file, eval_file = write_task(train, held_out, "task", 2000, 1000)
# kbert-finetune ... task.name=jsonl,task.text_a_column=text_a,task.text_b_column=text_b,task.label_column=label
```
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Sequence

# Farthest a positive's second sentence lies after its first (the nearest is 2).
WINDOW = 8
COLUMNS = {"text_a_column": "text_a", "text_b_column": "text_b", "label_column": "label"}


def _first_sentence(documents: Sequence[list[str]], usable: list[int], rng: random.Random) -> tuple[int, int]:
    """A document (weighted by its length, so every usable sentence is equally likely) and a sentence with at
    least two after it."""
    doc = rng.choices(usable, weights=[len(documents[d]) - 2 for d in usable])[0]
    return doc, rng.randrange(len(documents[doc]) - 2)


def _pair(documents: Sequence[list[str]], usable: list[int], label: int, rng: random.Random) -> dict:
    doc, i = _first_sentence(documents, usable, rng)
    if label:
        j = rng.randint(i + 2, min(i + WINDOW, len(documents[doc]) - 1))
        text_b = documents[doc][j]
    else:
        other = rng.choice([d for d in range(len(documents)) if d != doc])
        text_b = rng.choice(documents[other])
    return {"text_a": documents[doc][i], "text_b": text_b, "label": label}


def sentence_pairs(documents: Sequence[list[str]], count: int, seed: int) -> list[dict]:
    """`count` shuffled pairs, half same-document (label 1), half not (label 0); see the module invariants."""
    usable = [d for d, sentences in enumerate(documents) if len(sentences) >= 3]
    if count % 2 or not usable or len(documents) < 2:
        raise ValueError(f"need an even count ({count}), two documents and one of 3+ sentences")
    rng = random.Random(seed)
    pairs = [_pair(documents, usable, label, rng) for label in (1, 0) for _ in range(count // 2)]
    rng.shuffle(pairs)
    return pairs


def unseen(documents: Sequence[list[str]], seen: Sequence[list[str]]) -> list[list[str]]:
    """`documents` without the sentences that occur anywhere in `seen` (boilerplate lines repeat across
    documents); documents left empty are dropped."""
    known = {sentence for document in seen for sentence in document}
    kept = [[s for s in document if s not in known] for document in documents]
    return [d for d in kept if d]


def write_jsonl(pairs: Sequence[dict], path: str) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(pair) + "\n" for pair in pairs)
    return path


def write_task(
    train_documents: Sequence[list[str]],
    eval_documents: Sequence[list[str]],
    directory: str,
    train_count: int,
    eval_count: int,
    seed: int = 0,
) -> tuple[str, str]:
    """Writes `directory/train.jsonl` and `directory/eval.jsonl` (see the module invariants); returns their paths."""
    os.makedirs(directory, exist_ok=True)
    train = sentence_pairs(train_documents, train_count, seed)
    held_out = sentence_pairs(unseen(eval_documents, train_documents), eval_count, seed + 1)
    return (
        write_jsonl(train, os.path.join(directory, "train.jsonl")),
        write_jsonl(held_out, os.path.join(directory, "eval.jsonl")),
    )
