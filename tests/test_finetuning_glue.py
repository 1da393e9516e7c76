"""The GLUE table: official metrics per task, the mean over seeds and tasks, finished runs reused."""

import json
import os

import pytest
from finetuning_fixtures import write_mnli, write_tsv

from kbert.errors import MissingFileError
from kbert.finetuning.config import FinetuneConfig
from kbert.finetuning.glue import glue_average, glue_table, run_glue, task_score, tasks_in


def test_task_scores_use_the_official_metrics():
    assert task_score("cola", {"eval": {"matthews_corr": 0.5, "accuracy": 0.9}}) == 50.0
    assert task_score("mrpc", {"eval": {"f1": 0.9, "accuracy": 0.8}}) == pytest.approx(85.0)
    assert task_score("stsb", {"eval": {"pearson": 0.86, "spearman": 0.84}}) == pytest.approx(85.0)
    assert task_score("mnli", {"eval": {"accuracy": 0.84}, "eval_mismatched": {"accuracy": 0.82}}) == pytest.approx(
        83.0
    )


def test_average_leaves_out_wnli_and_table_shows_seeds():
    scores = {"rte": [60.0, 70.0], "sst2": [90.0], "wnli": [10.0]}
    assert glue_average(scores) == pytest.approx((65.0 + 90.0) / 2)
    table = glue_table(scores).splitlines()
    assert table[0] == "rte     65.0 ± 7.1  (2 seeds)" and table[1] == "sst2    90.0  (1 seed)"
    assert table[-1].startswith("GLUE    77.5")


def test_run_glue_finds_the_tasks_and_reuses_finished_runs(tmp_path):
    write_mnli(tmp_path / "glue")
    write_tsv(tmp_path / "glue" / "RTE" / "train.tsv", ["index", "sentence1", "sentence2", "label"], [])
    assert tasks_in(str(tmp_path / "glue")) == ["mnli", "rte"]
    finished = {
        "mnli": {"eval": {"accuracy": 0.5}, "eval_mismatched": {"accuracy": 0.7}},
        "rte": {"eval": {"accuracy": 0.6}},
    }
    for name, summary in finished.items():
        for seed in (1, 2):
            os.makedirs(tmp_path / "runs" / name / f"seed_{seed}")
            (tmp_path / "runs" / name / f"seed_{seed}" / "summary.json").write_text(json.dumps(summary))
    config = FinetuneConfig()
    config.override({"task": {"name": "glue", "data_dir": str(tmp_path / "glue")}})
    lines = []
    result = run_glue(
        config, str(tmp_path / "runs"), strategy=None, seeds=(1, 2), print_fn=lambda line, **_: lines.append(line)
    )
    assert result["scores"] == {"mnli": [60.0, 60.0], "rte": [60.0, 60.0]} and result["average"] == 60.0
    assert json.load(open(tmp_path / "runs" / "glue.json"))["average"] == 60.0
    with pytest.raises(MissingFileError, match="no GLUE task there"):
        config.override({"task": {"data_dir": str(tmp_path)}})
        run_glue(config, str(tmp_path / "none"), strategy=None, seeds=(1,))
