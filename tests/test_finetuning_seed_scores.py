"""kbert.finetuning.seed_scores: scores over seeds as mean ± sample standard deviation."""

from kbert.finetuning.seed_scores import format_scores, mean_and_spread


def test_the_spread_is_the_sample_standard_deviation_and_zero_for_one_seed():
    assert mean_and_spread([70.0, 72.0, 74.0]) == (72.0, 2.0)
    assert format_scores([50.0, 55.0, 60.0]) == "55.0 ± 5.0"
    assert format_scores([66.04]) == "66.0 ± 0.0"
