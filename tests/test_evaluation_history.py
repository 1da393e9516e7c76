"""Time to target read from an evaluation history: the first evaluation at or above the target, or a run's own
record when it ran with that target."""

import json

from kbert.training.evaluation_history import final_accuracy, first_reaching, read_summary, time_to_target

HISTORY = [
    {"step": 5, "samples": 160, "seconds": 2.0, "masked_lm_accuracy": 0.05},
    {"step": 10, "samples": 320, "seconds": 4.0, "masked_lm_accuracy": 0.10},
    {"step": 15, "samples": 480, "seconds": 6.0, "masked_lm_accuracy": 0.09},
]


def test_the_first_evaluation_at_or_above_the_target_is_the_time_to_target():
    assert first_reaching(HISTORY, 0.10)["samples"] == 320  # equal counts as reached
    assert first_reaching(HISTORY, 0.07) == {
        "target": 0.07,
        "step": 10,
        "samples": 320,
        "seconds": 4.0,
        "masked_lm_accuracy": 0.10,
    }
    assert first_reaching(HISTORY, 0.11) is None and first_reaching([], 0.01) is None


def test_the_final_accuracy_is_the_last_evaluation_not_the_best():
    assert final_accuracy(HISTORY) == 0.09
    assert final_accuracy([]) != final_accuracy([])  # NaN: nothing was evaluated


def test_a_run_with_the_same_target_reads_its_own_record(tmp_path):
    recorded = {"target": 0.08, "step": 10, "samples": 320, "seconds": 4.5, "masked_lm_accuracy": 0.10}
    summary = {"target_mlm_accuracy": 0.08, "time_to_target": recorded, "evaluations": HISTORY}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    assert time_to_target(read_summary(str(tmp_path)), 0.08) == recorded
    # a target set after the run (a peer's final accuracy) is read from the evaluations
    assert time_to_target(summary, 0.05)["samples"] == 160
    assert time_to_target({"target_mlm_accuracy": None, "time_to_target": None}, 0.05) is None
