"""The demo pipeline at a very small size: docstring corpus of fake packages, a few steps, table and plots; the
downstream task builder and the corpus' package record on their own."""

import json
import math
import os
import random

import pytest

from kbert.data import docstring_corpus
from kbert.demo import data, history, pipeline, report, sources, task
from kbert.demo.downstream import FinetuneSettings

WORDS = ("the model reads a file and returns its tokens while the optimizer scales each layer step by a trust "
         "ratio computed from weight and update norms so large batches train as well as small ones do").split()


def _fake_package(root, modules=6, functions=12, packages=("pkg_a", "pkg_b", "pkg_c")):
    """Modules spread over `packages` (the first one a single-file module), each docstring a few random sentences."""
    rng = random.Random(0)
    for m in range(modules):
        lines = []
        for f in range(functions):
            sentences = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 12))).capitalize() + "."
                         for _ in range(rng.randint(2, 4))]
            lines.append(f'def function_{f}():\n    """{" ".join(sentences)}"""\n')
        package = packages[m % len(packages)]
        path = root / (f"{package}.py" if package == packages[0] else f"{package}/module_{m}.py")
        path.parent.mkdir(parents=True, exist_ok=True)
        previous = path.read_text() + "\n\n" if path.exists() else ""
        path.write_text(previous + "\n\n".join(lines))
    return root


TINY = dict(steps=6, corpus_bytes=1_000_000, heldout_every=6, vocab_size=300, seq_length=32, max_predictions=5,
            dupe_factor=3, num_layers=2, hidden_size=32, num_attention_heads=2, batch_size=8, learning_rate=1e-3,
            num_workers=1, finetune=FinetuneSettings(seeds=1, epochs=1, batch_size=8))


def test_demo_produces_table_plots_and_runs(tmp_path):
    roots = [str(_fake_package(tmp_path / "site"))]
    out = tmp_path / "demo"
    lines = []
    result = pipeline.run_demo(pipeline.DemoSettings(out=str(out), source_roots=roots, **TINY),
                               print_fn=lambda *a, **k: lines.append(" ".join(map(str, a))))

    assert [run.name for run in result.runs] == ["full", "mslt"]
    assert [(d.encoder, d.seeds) for d in result.downstream] == [("full", [1]), ("mslt", [1]), ("random", [1])]
    for scores in result.downstream:
        # Three balanced classes, 4 of each class's 24 docstrings evaluated: the accuracy is a whole number of 12ths.
        assert 0 <= scores.mean <= 100 and round(scores.mean * 12 / 100, 6).is_integer() and scores.spread == 0
    for run in result.runs:
        assert run.curve.steps[-1] == TINY["steps"]
        assert all(math.isfinite(loss) for loss in run.curve.losses)
        assert run.wall_seconds > 0 and run.curve.seconds == sorted(run.curve.seconds)
        # The held-out set was evaluated (at least one full batch), to finite numbers.
        assert run.eval["sequences"] >= TINY["batch_size"] and math.isfinite(run.eval["masked_lm_loss"])
    assert result.runs[1].stage_ends == [2, 4]

    table = (out / "results.md").read_text()
    assert table == result.table + "\n"
    assert table.splitlines()[0].startswith("| run | steps |") and len(table.splitlines()) == 5
    assert table.splitlines()[0].endswith("| downstream acc % (1 seed) |")
    for row, scores in zip(table.splitlines()[2:], result.downstream):
        assert row.endswith(f"| {scores.mean:.1f} ± 0.0 |")
    assert "| full | 6 |" in table and "| mslt | 6 |" in table and "| random init | 0 |" in table
    results = json.loads((out / "results.json").read_text())
    assert results["pretraining"][1]["name"] == "mslt"
    assert results["downstream"]["task"]["labels"] == ["pkg_a", "pkg_b", "pkg_c"]
    assert [(d["encoder"], d["scores"]) for d in results["downstream"]["encoders"]] == [
        (d.encoder, d.scores) for d in result.downstream]
    for name in ("loss_vs_step.png", "loss_vs_time.png", "downstream.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for name in ("docstrings.txt", "sources.txt", "train.txt", "heldout.txt", "vocab.txt", "train.tfrecord",
                 "heldout.tfrecord", "task/train.tsv", "task/eval.tsv"):
        assert (out / "data" / name).stat().st_size > 0
    for encoder in ("full", "mslt", "random"):
        summary = json.loads((out / "runs" / "finetune" / encoder / "seed_1" / "summary.json").read_text())
        assert summary["init_checkpoint"] == ("" if encoder == "random" else str(out / "runs" / encoder))
    assert any(result.table in line for line in lines)
    assert any(line.startswith("Pretraining gain over random init") for line in lines)
    assert any(line.startswith("Done in ") and line.endswith(f"Everything is under {out}:") for line in lines)
    assert sum(line.strip().startswith("$ kbert-pretrain --config_file=") for line in lines) == 2
    assert sum(line.strip().startswith("$ kbert-finetune --config_file=") for line in lines) == 3


def test_demo_refuses_a_used_output_folder_before_any_work(tmp_path):
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "keep.txt").write_text("an earlier run")
    with pytest.raises(FileExistsError, match="--out="):
        pipeline.run_demo(pipeline.DemoSettings(out=str(tmp_path / "demo"), **TINY))
    assert os.listdir(tmp_path / "demo") == ["keep.txt"]


def test_user_text_goes_through_the_data_steps(tmp_path):
    rng = random.Random(1)
    for part in range(2):
        (tmp_path / f"notes_{part}.txt").write_text("".join(
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 12))).capitalize() + ". "
            + " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 12))) + ".\n\n" for _ in range(30)))
    settings = data.DataSettings(text=[str(tmp_path / "notes_*.txt")], heldout_every=6, vocab_size=300,
                                 seq_length=32, max_predictions=5, num_workers=1)
    prepared = data.prepare_data(settings, str(tmp_path / "data"), print_fn=lambda *a, **k: None)
    assert (tmp_path / "data" / "text.txt").read_text().count("\n\n") == 60
    assert prepared.train_instances > 0 and prepared.heldout_instances > 0
    assert prepared.vocab_size == len((tmp_path / "data" / "vocab.txt").read_text().splitlines())

    with pytest.raises(FileNotFoundError, match="--text"):
        data.prepare_data(data.DataSettings(text=[str(tmp_path / "missing_*.txt")]), str(tmp_path / "data2"),
                          print_fn=lambda *a, **k: None)


def _task_files(tmp_path, documents):
    """A corpus and its sources file from (package, docstring) pairs."""
    corpus, packages = tmp_path / "corpus.txt", tmp_path / "sources.txt"
    corpus.write_text("".join(f"{doc}\n\n" for _, doc in documents))
    packages.write_text("".join(f"{package}\n" for package, _ in documents))
    return str(corpus), str(packages)


def test_package_task_is_balanced_disjoint_and_deterministic(tmp_path):
    rng = random.Random(2)
    sizes = {"big": 40, "_small": 23, "tiny": 9, "mid": 30}
    documents = [(package, " ".join(rng.choice(WORDS) for _ in range(8)) + f" about _small.thing {n}.")
                 for package, count in sizes.items() for n in range(count)]
    documents += [("big", documents[0][1])]  # a repeated docstring is one example
    corpus, packages = _task_files(tmp_path, documents)
    settings = task.TaskSettings(num_classes=3, max_per_class=25, eval_every=5)
    built = task.build_package_task(corpus, packages, str(tmp_path / "a"), settings)

    # "tiny" has fewer than 2 * eval_every docstrings; the three others are cut to the smallest's 23.
    assert built.labels == ["_small", "big", "mid"]
    rows = {split: [line.split("\t") for line in open(path).read().splitlines()]
            for split, path in (("train", built.train_file), ("eval", built.eval_file))}
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

    again = task.build_package_task(corpus, packages, str(tmp_path / "b"), settings)
    assert open(again.train_file).read() == open(built.train_file).read()
    assert open(again.eval_file).read() == open(built.eval_file).read()
    with pytest.raises(ValueError, match="--corpus_bytes"):
        task.build_package_task(corpus, packages, str(tmp_path / "c"), task.TaskSettings(eval_every=20))


@pytest.mark.parametrize("max_bytes", [None, 2000])
def test_every_corpus_document_is_given_its_package(tmp_path, max_bytes):
    root = _fake_package(tmp_path / "site", modules=5, functions=4)
    recorder = sources.DocumentSources([str(root)])
    stats = docstring_corpus.build_docstring_corpus(str(tmp_path / "corpus.txt"), [str(root)], max_bytes=max_bytes,
                                                    progress=recorder)
    # Modules 0 and 3 are pkg_a.py, 1 and 4 pkg_b/, 2 pkg_c/, walked in name order: pkg_a.py, pkg_b/, pkg_c/.
    expected = ["pkg_a"] * 8 + ["pkg_b"] * 8 + ["pkg_c"] * 4
    assert stats.truncated == (max_bytes is not None)
    assert recorder.packages(stats.documents) == expected[:stats.documents]
    assert sources.package_of(str(root / "pkg_b" / "module_1.py"), [str(tmp_path), str(root)]) == "pkg_b"


def test_table_and_plot_show_three_seeds_of_every_encoder(tmp_path):
    curve = history.LossCurve([10, 20], [1.0, 2.0], [7.0, 6.5])
    metrics = {"masked_lm_loss": 6.0, "masked_lm_accuracy": 0.1, "next_sentence_accuracy": 0.7}
    runs = [report.RunResult("full", curve, 80.0, metrics), report.RunResult("mslt", curve, 64.0, metrics, [8, 16])]
    scores = [report.DownstreamScores("full", [1, 2, 3], [70.0, 72.0, 74.0]),
              report.DownstreamScores("mslt", [1, 2, 3], [66.0, 66.0, 66.0]),
              report.DownstreamScores("random", [1, 2, 3], [50.0, 55.0, 60.0])]
    assert (scores[0].mean, scores[0].spread, scores[2].spread) == (72.0, 2.0, 5.0)  # sample standard deviation
    rows = report.results_table(runs, scores).splitlines()
    assert rows[0].endswith("| downstream acc % (3 seeds) |") and rows[1].count("|") == rows[0].count("|")
    assert rows[2].startswith("| full | 20 | 80.0 | 1.00x |") and rows[2].endswith("| 72.0 ± 2.0 |")
    assert rows[3].startswith("| mslt | 20 | 64.0 | 1.25x |") and rows[3].endswith("| 66.0 ± 0.0 |")
    assert rows[4] == "| random init | 0 | | | | | | | 55.0 ± 5.0 |"
    assert all(row.count("|") == rows[0].count("|") for row in rows)
    assert "downstream" not in report.results_table(runs)

    report.plot_downstream(scores, str(tmp_path / "downstream.png"))
    assert (tmp_path / "downstream.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
