"""The LAMB paper's batch-scaling rules (square-root rate, linear-epoch warmup share) and the flat-samples test."""

import math

import pytest

from kbert.bench.large_batch import MAX_WARMUP_SHARE, largest_flat_batch, scaled_recipe


def test_the_base_batch_keeps_its_recipe():
    recipe = scaled_recipe(64, 2e-3, 0.01, 64)
    assert (recipe.learning_rate, recipe.warmup_share) == (2e-3, 0.01)


def test_the_papers_table_is_reproduced():
    # "untuned LAMB": 512 -> 32K, rate 5/(2^3 * 10^3) -> 5/10^3, warmup share 1/320 -> 1/5
    base = 5 / (2**3 * 1e3)
    for doublings in range(7):
        recipe = scaled_recipe(512, base, 1 / 320, 512 * 2**doublings)
        assert math.isclose(recipe.learning_rate, 5 / (2 ** (3 - doublings / 2) * 1e3))
        assert math.isclose(recipe.warmup_share, 2**doublings / 320)


def test_the_warmup_share_is_capped():
    assert scaled_recipe(64, 1e-3, 0.1, 64 * 64).warmup_share == MAX_WARMUP_SHARE


@pytest.mark.parametrize(
    "samples, flat",
    [
        ({64: 1000, 128: 1200, 256: 1190, 512: 1201}, 256),  # 1,201 is over 1.2 x 1,000
        ({64: 1000, 128: 800, 256: 1100}, 256),  # fewer samples than the base are flat too
        ({64: 1000, 128: 1500, 256: 1000}, 64),  # flat only while every smaller batch is
        ({64: 1000, 128: None, 256: 900}, 64),  # not reached
        ({64: None, 128: 900}, None),  # the base did not reach the target: nothing to compare with
    ],
)
def test_the_largest_flat_batch(samples, flat):
    assert largest_flat_batch(samples) == flat


def test_the_tolerance_is_a_parameter():
    assert largest_flat_batch({64: 1000, 128: 1400}, tolerance=0.5) == 128
