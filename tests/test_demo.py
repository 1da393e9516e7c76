"""The demo pipeline at a very small size: docstring corpus of fake packages, a few steps, table and plots."""

import json
import math
import os

import pytest

from corpus_fixtures import fake_package
from kbert.demo import history, pipeline, report
from kbert.demo.downstream import FinetuneSettings

TINY = dict(steps=6, corpus_bytes=1_000_000, heldout_every=6, vocab_size=300, seq_length=32, max_predictions=5,
            dupe_factor=3, num_layers=2, hidden_size=32, num_attention_heads=2, batch_size=8, learning_rate=1e-3,
            num_workers=1, finetune=FinetuneSettings(seeds=1, epochs=1, batch_size=8))


def test_demo_produces_table_plots_and_runs(tmp_path):
    roots = [str(fake_package(tmp_path / "site"))]
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
