"""kbert.finetuning.coherence_task: the same-document pairs are deterministic and balanced, and no eval sentence was
seen in training."""

import json

import pytest

from kbert.finetuning import coherence_task


def _documents(count, sentences, prefix):
    return [[f"{prefix} doc {d} sentence {s} ." for s in range(sentences)] for d in range(count)]


def test_pairs_are_deterministic_balanced_and_labelled_by_document():
    documents = _documents(6, 12, "train")
    pairs = coherence_task.sentence_pairs(documents, 200, seed=3)
    assert pairs == coherence_task.sentence_pairs(documents, 200, seed=3)
    assert pairs != coherence_task.sentence_pairs(documents, 200, seed=4)
    assert len(pairs) == 200 and sum(p["label"] for p in pairs) == 100
    assert 0 < sum(p["label"] for p in pairs[:100]) < 100  # shuffled, not positives first
    for pair in pairs:
        (doc_a, pos_a), (doc_b, pos_b) = ((int(w) for w in p.split()[2:5:2]) for p in (pair["text_a"], pair["text_b"]))
        if pair["label"]:
            assert doc_a == doc_b and 2 <= pos_b - pos_a <= coherence_task.WINDOW
        else:
            assert doc_a != doc_b


def test_an_odd_count_or_one_document_is_refused():
    with pytest.raises(ValueError):
        coherence_task.sentence_pairs(_documents(3, 5, "x"), 7, seed=0)
    with pytest.raises(ValueError):
        coherence_task.sentence_pairs(_documents(1, 5, "x"), 8, seed=0)


def test_eval_pairs_come_from_held_out_documents_without_any_sentence_seen_in_training(tmp_path):
    train = _documents(5, 10, "train")
    held_out = _documents(3, 10, "held")
    held_out[0][4] = train[2][7]  # a boilerplate line both splits share
    train_file, eval_file = coherence_task.write_task(train, held_out, str(tmp_path), 40, 20)
    rows = {
        name: [json.loads(line) for line in open(path)] for name, path in (("train", train_file), ("eval", eval_file))
    }
    assert [len(rows["train"]), len(rows["eval"])] == [40, 20]
    assert sum(r["label"] for r in rows["eval"]) == 10
    train_sentences = {s for d in train for s in d}
    eval_sentences = {r[k] for r in rows["eval"] for k in ("text_a", "text_b")}
    assert eval_sentences and not eval_sentences & train_sentences
    assert all(s.startswith("held") for s in eval_sentences)
    assert set(rows["train"][0]) == set(coherence_task.COLUMNS.values())
