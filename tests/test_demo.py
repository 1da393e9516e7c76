"""The demo pipeline at a very small size: docstring corpus of a fake package, a few steps, table and plots."""

import json
import math
import os
import random

import pytest

from kbert.demo import data, pipeline, text

WORDS = ("the model reads a file and returns its tokens while the optimizer scales each layer step by a trust "
         "ratio computed from weight and update norms so large batches train as well as small ones do").split()


def _fake_package(root, modules=6, functions=12):
    rng = random.Random(0)
    for m in range(modules):
        lines = []
        for f in range(functions):
            sentences = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 12))).capitalize() + "."
                         for _ in range(rng.randint(2, 4))]
            lines.append(f'def function_{f}():\n    """{" ".join(sentences)}"""\n')
        path = root / "pkg" / f"module_{m}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n\n".join(lines))
    return root


TINY = dict(steps=6, corpus_bytes=1_000_000, heldout_every=6, vocab_size=300, seq_length=32, max_predictions=5,
            dupe_factor=3, num_layers=2, hidden_size=32, num_attention_heads=2, batch_size=8, learning_rate=1e-3,
            num_workers=1)


def test_demo_produces_table_plots_and_runs(tmp_path):
    roots = [str(_fake_package(tmp_path / "site"))]
    out = tmp_path / "demo"
    lines = []
    result = pipeline.run_demo(pipeline.DemoSettings(out=str(out), source_roots=roots, **TINY),
                               print_fn=lambda *a, **k: lines.append(" ".join(map(str, a))))

    assert [run.name for run in result.runs] == ["full", "mslt"]
    for run in result.runs:
        assert run.curve.steps[-1] == TINY["steps"]
        assert all(math.isfinite(loss) for loss in run.curve.losses)
        assert run.wall_seconds > 0 and run.curve.seconds == sorted(run.curve.seconds)
        # The held-out set was evaluated (at least one full batch), to finite numbers.
        assert run.eval["sequences"] >= TINY["batch_size"] and math.isfinite(run.eval["masked_lm_loss"])
    assert result.runs[1].stage_ends == [2, 4]

    table = (out / "results.md").read_text()
    assert table == result.table + "\n"
    assert table.splitlines()[0].startswith("| run | steps |") and len(table.splitlines()) == 4
    assert "| full | 6 |" in table and "| mslt | 6 |" in table
    assert json.loads((out / "results.json").read_text())[1]["name"] == "mslt"
    for name in ("loss_vs_step.png", "loss_vs_time.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for name in ("docstrings.txt", "train.txt", "heldout.txt", "vocab.txt", "train.tfrecord", "heldout.tfrecord"):
        assert (out / "data" / name).stat().st_size > 0
    assert any(result.table in line for line in lines)
    assert any(line.startswith("Done in ") and line.endswith(f"Everything is under {out}:") for line in lines)
    assert sum(line.strip().startswith("$ kbert-pretrain --config_file=") for line in lines) == 2


def test_demo_refuses_a_used_output_folder_before_any_work(tmp_path):
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "keep.txt").write_text("an earlier run")
    with pytest.raises(FileExistsError, match="--out="):
        pipeline.run_demo(pipeline.DemoSettings(out=str(tmp_path / "demo"), **TINY))
    assert os.listdir(tmp_path / "demo") == ["keep.txt"]


def test_user_text_is_resplit_and_held_out_at_a_stride(tmp_path):
    source = tmp_path / "notes.txt"
    source.write_text("".join(f"Paragraph {i} starts here.\nIt wraps onto a second line. Then ends!\n\n"
                              for i in range(8)))
    stats = text.write_split(text.read_documents([str(source)], resplit=True), str(tmp_path / "train.txt"),
                             str(tmp_path / "heldout.txt"), heldout_every=4)
    assert (stats.train_documents, stats.heldout_documents) == (6, 2)
    assert (tmp_path / "heldout.txt").read_text().split("\n\n")[0] == (
        "Paragraph 3 starts here.\nIt wraps onto a second line.\nThen ends!")
    with pytest.raises(ValueError, match="at least 20"):
        text.write_split(text.read_documents([str(source)], resplit=True), str(tmp_path / "a.txt"),
                         str(tmp_path / "b.txt"), heldout_every=20)


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
