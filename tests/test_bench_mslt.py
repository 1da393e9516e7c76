"""tools/bench_mslt.py's pieces: the same-document downstream task, the fine-tuning recipe and the localhost cluster's
TF_CONFIGs."""

import json
import os
import sys

import pytest

# Not training_fixtures.ROOT: importing that module starts TensorFlow, which these tests never need.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))

import coherence_task  # noqa: E402
import localhost_cluster  # noqa: E402


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
        (doc_a, pos_a), (doc_b, pos_b) = ((int(w) for w in p.split()[2:5:2]) for p in (pair["text_a"],
                                                                                        pair["text_b"]))
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
    rows = {name: [json.loads(line) for line in open(path)] for name, path in (("train", train_file),
                                                                               ("eval", eval_file))}
    assert [len(rows["train"]), len(rows["eval"])] == [40, 20]
    assert sum(r["label"] for r in rows["eval"]) == 10
    train_sentences = {s for d in train for s in d}
    eval_sentences = {r[k] for r in rows["eval"] for k in ("text_a", "text_b")}
    assert eval_sentences and not eval_sentences & train_sentences
    assert all(s.startswith("held") for s in eval_sentences)
    assert set(rows["train"][0]) == set(coherence_task.COLUMNS.values())


def test_every_worker_gets_the_same_cluster_and_its_own_index():
    ports = localhost_cluster.free_ports(3)
    assert len(set(ports)) == 3
    configs = [json.loads(c) for c in localhost_cluster.tf_configs(ports)]
    assert [c["task"] for c in configs] == [{"type": "worker", "index": i} for i in range(3)]
    assert all(c["cluster"] == {"worker": [f"localhost:{p}" for p in ports]} for c in configs)


def test_launch_gives_each_worker_its_tf_config_and_log(tmp_path):
    logs = [str(tmp_path / f"w{i}.log") for i in range(3)]
    command = [sys.executable, "-c", "import os; print(os.environ.get('TF_CONFIG', 'none'))"]
    workers = localhost_cluster.launch(command, ["one", "two", ""], {"TF_CONFIG": "inherited"}, logs)
    assert localhost_cluster.wait_all(workers, poll_seconds=0.01) == [0, 0, 0]
    assert [open(log).read().strip() for log in logs] == ["one", "two", "inherited"]


def test_a_failed_worker_stops_the_others(tmp_path):
    logs = [str(tmp_path / f"w{i}.log") for i in range(2)]
    command = [sys.executable, "-c", "import os, sys, time; os.environ['TF_CONFIG'] == 'fail' and sys.exit(3); "
               "time.sleep(60)"]
    workers = localhost_cluster.launch(command, ["fail", "wait"], {}, logs)
    codes = localhost_cluster.wait_all(workers, poll_seconds=0.01)
    assert codes[0] == 3 and codes[1] == -15  # SIGTERM, long before its minute of sleep


def test_every_finetuning_run_of_a_comparison_gets_the_recipe_task_and_differs_only_in_init_and_seed():
    import finetune_scores

    task = {"name": "tsv", "train_file": "t.tsv", "eval_file": "e.tsv", "text_a_column": "text",
            "text_b_column": "", "label_column": "label"}
    recipe = finetune_scores.Recipe(task, "vocab.txt", seq_length=64, epochs=3, learning_rate=1e-3)
    pretrained = finetune_scores.finetune_config(recipe, "runs/full", {}, seed=1)
    random_init = finetune_scores.finetune_config(recipe, "", {"bert": "bert_tiny"}, seed=2)
    assert pretrained["task"] == random_init["task"] == task and pretrained["task"] is not task
    assert pretrained["schedule"] == random_init["schedule"] == {"peak_learning_rate": 1e-3, "warmup_fraction": 0.1,
                                                                  "power": 1.0}
    assert (pretrained["train"]["init_checkpoint"], pretrained["train"]["seed"]) == ("runs/full", 1)
    assert (random_init["train"]["init_checkpoint"], random_init["train"]["seed"]) == ("", 2)
    assert {k: v for k, v in pretrained["train"].items() if k not in ("init_checkpoint", "seed")} == \
        {k: v for k, v in random_init["train"].items() if k not in ("init_checkpoint", "seed")}
