"""`data.masked_lm_prob`: the share of tokens dynamic masking masks follows the key from the config to the batches,
and bad values (or a rate for static records, or too few prediction slots for it) are one line."""

import numpy as np
import pytest
import tensorflow as tf
from tfrecord_fixtures import make_instances, write_records, write_vocab

from kbert.data.masking import predictions_needed
from kbert.errors import ConfigError
from kbert.tasks.bert import dataset_fn
from kbert.training.config import PretrainingConfig, load_config

SEQ, RECORDS = 64, 256


@pytest.fixture(scope="module")
def unmasked(tmp_path_factory):
    """Unmasked records ([CLS] A [SEP] B [SEP], `--no_masking`) and their vocabulary."""
    directory = tmp_path_factory.mktemp("masking_rate")
    vocab = write_vocab(str(directory / "vocab.txt"))
    records = write_records(directory / "unmasked.tfrecord", make_instances(RECORDS, SEQ, None, len(vocab), seed=3))
    return records, str(directory / "vocab.txt"), len(vocab)


def _config(records: str, vocab_file: str, override: str = "") -> PretrainingConfig:
    return load_config(
        PretrainingConfig,
        [],
        ",".join(
            filter(
                None,
                [
                    f"data.train_files={records},data.eval_files={records},data.vocab_file={vocab_file}",
                    f"data.dynamic_masking=true,data.seq_length={SEQ},data.max_predictions=40",
                    override,
                ],
            )
        ),
    )


def _one_pass(config: PretrainingConfig, vocab_size: int) -> dict[str, np.ndarray]:
    """The eval input of `config` (one pass over the records), through `kbert.tasks.bert.dataset_fn`."""
    batches = list(dataset_fn(config, False, vocab_size)(tf.distribute.InputContext()).as_numpy_iterator())
    return {k: np.concatenate([b[k] for b in batches]) for k in ("input_mask", "masked_lm_weights")}


@pytest.mark.parametrize("override, rate", [("", 0.15), ("data.masked_lm_prob=0.4", 0.4)], ids=["default", "0.40"])
def test_masked_share_follows_the_key(unmasked, override, rate):
    records, vocab_file, vocab_size = unmasked
    tf.random.set_seed(5)
    out = _one_pass(_config(records, vocab_file, override), vocab_size)
    selectable = out["input_mask"].sum(1) - 3  # [CLS] and both [SEP] are never masked
    masked = out["masked_lm_weights"].sum(1)
    assert len(masked) == RECORDS and selectable.sum() > 5000
    # tensorflow-text selects ceil(rate x selectable) tokens of each sequence (40 slots never bind at SEQ 64).
    np.testing.assert_array_equal(masked, np.ceil(rate * selectable.astype(np.float64)))
    # So the share is the rate, rounded up by under one token a sequence.
    share = masked.sum() / selectable.sum()
    assert rate <= share < rate + RECORDS / selectable.sum(), share


@pytest.mark.parametrize(
    "override, message",
    [
        ("data.masked_lm_prob=0", "data.masked_lm_prob=0"),
        ("data.masked_lm_prob=1.0", "data.masked_lm_prob=1.0 must be in (0, 1)."),
        (
            "data.dynamic_masking=false,data.masked_lm_prob=0.3",
            "data.masked_lm_prob=0.3 is dynamic masking's rate, but data.dynamic_masking is off",
        ),
        (
            "data.seq_length=128,data.max_predictions=20,data.masked_lm_prob=0.3",
            "data.max_predictions=20 caps dynamic masking below data.masked_lm_prob=0.3 of data.seq_length=128 (38 "
            "tokens): set data.max_predictions=38 or more.",
        ),
    ],
)
def test_bad_masking_rate_is_one_line(override, message):
    with pytest.raises(ConfigError) as error:
        _config("train.tfrecord", "vocab.txt", override)
    assert message in str(error.value) and "\n" not in str(error.value), str(error.value)


def test_slots_needed_for_a_rate():
    """ceil(p x (seq_length - 2)) slots: 30% of 128 needs 38, Wettig et al.'s 40% of 512 needs 204."""
    for seq, rate, slots in [(128, 0.3, 38), (512, 0.4, 204), (128, 0.15, 19)]:
        assert predictions_needed(rate, seq) == slots
        override = f"data.seq_length={seq},data.masked_lm_prob={rate},data.max_predictions="
        _config("train.tfrecord", "vocab.txt", override + str(slots))  # enough
        with pytest.raises(ConfigError, match=f"set data.max_predictions={slots} or more"):
            _config("train.tfrecord", "vocab.txt", override + str(slots - 1))
