"""The demo pipeline at a very small size: docstring corpus of fake packages, a few steps, the probe and
fine-tuning, table, plots and the verdict line."""

import json
import math
import os
import subprocess
import types

import forkserver
import pytest
from corpus_fixtures import fake_package

from kbert.data.corpus_fingerprint import fingerprint
from kbert.demo import history, pipeline, processes, report
from kbert.demo.downstream import FinetuneSettings
from kbert.demo.report import FINETUNE, PROBE, DownstreamScores
from kbert.demo.verdict import verdict

TINY = dict(
    steps=6,
    corpus_bytes=1_000_000,
    heldout_every=6,
    vocab_size=300,
    seq_length=32,
    max_predictions=5,
    dupe_factor=3,
    num_layers=2,
    hidden_size=32,
    num_attention_heads=2,
    batch_size=8,
    learning_rate=1e-3,
    num_workers=1,
    probe_seeds=2,
    finetune=FinetuneSettings(seeds=1, epochs=1, batch_size=8),
)


@pytest.mark.spawns
def test_demo_produces_table_plots_runs_and_a_verdict(tmp_path, monkeypatch):
    # Its kbert-pretrain and kbert-finetune processes start as children of the fork server.
    fork_server = types.SimpleNamespace(Popen=forkserver.Popen, PIPE=subprocess.PIPE, STDOUT=subprocess.STDOUT)
    monkeypatch.setattr(processes, "subprocess", fork_server)
    roots = [str(fake_package(tmp_path / "site"))]
    out = tmp_path / "demo"
    lines = []
    result = pipeline.run_demo(
        pipeline.DemoSettings(out=str(out), source_roots=roots, **TINY),
        print_fn=lambda *a, **k: lines.append(" ".join(map(str, a))),
    )

    assert [run.name for run in result.runs] == ["full", "mslt"]
    assert [(d.encoder, d.measure, d.seeds) for d in result.downstream] == [
        ("full", PROBE, []),
        ("mslt", PROBE, []),
        ("random", PROBE, [1, 2]),
        ("full", FINETUNE, [1]),
        ("mslt", FINETUNE, [1]),
        ("random", FINETUNE, [1]),
    ]
    for scores in result.downstream:
        # Three balanced classes, 4 of each class's 24 docstrings evaluated: every score is a whole number of 12ths.
        assert all(0 <= s <= 100 and round(s * 12 / 100, 6).is_integer() for s in scores.scores)
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
    assert table.splitlines()[0].endswith("| probe acc %, seeds 1-2 | fine-tuned acc %, seed 1 |")
    assert "| full | 6 |" in table and "| mslt | 6 |" in table and "| random init | 0 |" in table
    results = json.loads((out / "results.json").read_text())
    # The corpus the results come from, by its fingerprint: a document count and a hash of its bytes.
    assert results["corpus"] == json.loads(json.dumps(fingerprint(str(out / "data" / "docstrings.txt")).__dict__))
    assert results["corpus"]["documents"] == len((out / "data" / "sources.txt").read_text().split())
    assert results["pretraining"][1]["name"] == "mslt"
    assert results["downstream"]["task"]["labels"] == ["pkg_a", "pkg_b", "pkg_c"]
    assert [(d["encoder"], d["measure"], d["scores"]) for d in results["downstream"]["encoders"]] == [
        (d.encoder, d.measure, d.scores) for d in result.downstream
    ]
    assert results["downstream"]["verdict"] == {"passed": result.verdict.passed, "line": result.verdict.line}
    for name in ("loss_vs_step.png", "loss_vs_time.png", "downstream.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for name in (
        "docstrings.txt",
        "sources.txt",
        "train.txt",
        "heldout.txt",
        "vocab.txt",
        "train.tfrecord",
        "heldout.tfrecord",
        "task/train.tsv",
        "task/eval.tsv",
    ):
        assert (out / "data" / name).stat().st_size > 0
    for encoder in ("full", "mslt", "random"):
        summary = json.loads((out / "runs" / "finetune" / encoder / "seed_1" / "summary.json").read_text())
        assert summary["init_checkpoint"] == ("" if encoder == "random" else str(out / "runs" / encoder))
    assert any(result.table in line for line in lines)
    assert any(line.startswith("Done in ") and line.endswith(f"Everything is under {out}:") for line in lines)
    assert sum(line.strip().startswith("$ kbert-pretrain --config_file=") for line in lines) == 2
    assert sum(line.strip().startswith("$ kbert-finetune --config_file=") for line in lines) == 3
    # Whatever it says, the verdict is the last line.
    assert lines[-1] == result.verdict.line
    assert lines[-1].startswith("Pretraining beat random init" if result.verdict.passed else "PRETRAINING DID NOT")


def test_demo_refuses_a_used_output_folder_before_any_work(tmp_path):
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "keep.txt").write_text("an earlier run")
    with pytest.raises(FileExistsError, match="--out="):
        pipeline.run_demo(pipeline.DemoSettings(out=str(tmp_path / "demo"), **TINY))
    assert os.listdir(tmp_path / "demo") == ["keep.txt"]


def _runs(mlm_accuracy=(0.25, 0.22)):
    curve = history.LossCurve([10, 20], [1.0, 2.0], [7.0, 6.5])
    return [
        report.RunResult(
            name,
            curve,
            seconds,
            {"masked_lm_loss": 6.0, "masked_lm_accuracy": accuracy},
            [8, 16] if name == "mslt" else [],
        )
        for name, seconds, accuracy in (("full", 80.0, mlm_accuracy[0]), ("mslt", 64.0, mlm_accuracy[1]))
    ]


PROBED = [
    DownstreamScores("full", PROBE, [], [84.0]),
    DownstreamScores("mslt", PROBE, [], [80.0]),
    DownstreamScores("random", PROBE, [1, 2, 3], [70.0, 74.0, 72.0]),
]


def test_table_and_plot_show_every_seed_of_every_measure(tmp_path):
    scores = PROBED + [
        DownstreamScores("full", FINETUNE, [1, 2], [90.0, 92.0]),
        DownstreamScores("mslt", FINETUNE, [1, 2], [88.0, 88.0]),
        DownstreamScores("random", FINETUNE, [1, 2], [86.0, 90.0]),
    ]
    assert (scores[3].mean, scores[3].spread, scores[2].spread) == (91.0, math.sqrt(2), 2.0)  # sample std
    rows = report.results_table(_runs(), scores).splitlines()
    assert rows[0].endswith("| probe acc %, seeds 1-3 | fine-tuned acc %, seeds 1-2 |")
    assert rows[1].count("|") == rows[0].count("|")
    assert rows[2].startswith("| full | 20 | 80.0 | 1.00x |") and rows[2].endswith("| 84.0 | 90.0, 92.0 (91.0 ± 1.4) |")
    assert rows[3].startswith("| mslt | 20 | 64.0 | 1.25x |") and rows[3].endswith("| 80.0 | 88.0, 88.0 (88.0 ± 0.0) |")
    assert rows[4] == "| random init | 0 | | | | | | 70.0, 74.0, 72.0 (72.0 ± 2.0) | 86.0, 90.0 (88.0 ± 2.8) |"
    assert all(row.count("|") == rows[0].count("|") for row in rows)
    assert "acc %" not in report.results_table(_runs())

    report.plot_downstream(scores, str(tmp_path / "downstream.png"))
    assert (tmp_path / "downstream.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_verdict_passes_only_above_every_random_seed_and_names_the_cause():
    passed = verdict(_runs(), PROBED)
    assert passed.passed
    assert passed.line == (
        "Pretraining beat random init (probe): full +12.0 points, mslt +8.0 points; goal: 5 points "
        "over the random-init mean and above each of its 3 seeds (74.0% at best): met."
    )

    # mslt is 6 points over the mean but not above the best seed: it fails, and the line names it and the cause.
    close = PROBED[:1] + [
        DownstreamScores("mslt", PROBE, [], [78.0]),
        DownstreamScores("random", PROBE, [1, 2, 3], [70.0, 80.0, 66.0]),
    ]
    short = verdict(_runs((0.25, 0.12)), close)
    assert not short.passed
    assert short.line.startswith(
        "PRETRAINING DID NOT BEAT RANDOM INIT (probe): full +12.0 points, mslt +6.0 points; "
        "goal: 5 points over the random-init mean and above each of its 3 seeds (80.0% at "
        "best): missed by mslt. Likely cause: too little pretraining (mslt 20 steps to "
        "held-out MLM accuracy 0.120):"
    )
    assert "Raise --steps" in short.line and "full" not in short.line.split("Likely cause")[1]
    # Under the mean by 5 points fails too, even above every seed.
    assert not verdict(_runs(), PROBED[:1] + [DownstreamScores("mslt", PROBE, [], [76.0])] + PROBED[2:]).passed
