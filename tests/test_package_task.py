"""kbert.finetuning.package_task: which package a docstring comes from, balanced, disjoint and deterministic."""

import random

import pytest
from corpus_fixtures import WORDS

from kbert.finetuning.package_task import TaskSettings, build_package_task


def _task_files(tmp_path, documents):
    """A corpus and its sources file from (package, docstring) pairs."""
    corpus, packages = tmp_path / "corpus.txt", tmp_path / "sources.txt"
    corpus.write_text("".join(f"{doc}\n\n" for _, doc in documents))
    packages.write_text("".join(f"{package}\n" for package, _ in documents))
    return str(corpus), str(packages)


def test_package_task_is_balanced_disjoint_and_deterministic(tmp_path):
    rng = random.Random(2)
    sizes = {"big": 40, "_small": 23, "tiny": 9, "mid": 30}
    documents = [
        (package, " ".join(rng.choice(WORDS) for _ in range(8)) + f" about _small.thing {n}.")
        for package, count in sizes.items()
        for n in range(count)
    ]
    documents += [("big", documents[0][1])]  # a repeated docstring is one example
    corpus, packages = _task_files(tmp_path, documents)
    settings = TaskSettings(num_classes=3, max_per_class=25, eval_every=5)
    built = build_package_task(corpus, packages, str(tmp_path / "a"), settings)

    # "tiny" has fewer than 2 * eval_every docstrings; the three others are cut to the smallest's 23.
    assert built.labels == ["_small", "big", "mid"]
    rows = {
        split: [line.split("\t") for line in open(path).read().splitlines()]
        for split, path in (("train", built.train_file), ("eval", built.eval_file))
    }
    assert rows["train"][0] == rows["eval"][0] == ["text", "label"]
    for split, count in (("train", 19), ("eval", 4)):
        labels = [label for _, label in rows[split][1:]]
        assert {label: labels.count(label) for label in built.labels} == dict.fromkeys(built.labels, count)
    train_texts = {text for text, _ in rows["train"][1:]}
    assert not train_texts & {text for text, _ in rows["eval"][1:]}
    assert len(train_texts) == len(rows["train"]) - 1
    # The package's name is gone from its own docstrings, also inside a dotted name; other packages keep it.
    assert all("small" not in text for text, label in rows["train"][1:] if label == "_small")
    assert all("_small.thing" in text for text, label in rows["train"][1:] if label == "big")
    assert (built.train_examples, built.eval_examples) == (57, 12)
    # kbert-finetune's reading of the files: the same texts, class ids in the order of `labels`.
    data = built.examples()
    assert data.label_names == tuple(built.labels) and len(data.train) == 57 and len(data.evals["eval"]) == 12
    assert [built.labels[i] for i in data.train.labels] == [label for _, label in rows["train"][1:]]
    assert data.train.text_a == [text for text, _ in rows["train"][1:]]

    again = build_package_task(corpus, packages, str(tmp_path / "b"), settings)
    assert open(again.train_file).read() == open(built.train_file).read()
    assert open(again.eval_file).read() == open(built.eval_file).read()
    with pytest.raises(ValueError, match="--corpus_bytes"):
        build_package_task(corpus, packages, str(tmp_path / "c"), TaskSettings(eval_every=20))
