"""kbert.data.prepare_data: the user's text through the split, the vocabulary and the TFRecords."""

import random

import pytest

from corpus_fixtures import WORDS
from kbert.data.prepare_data import DataSettings, prepare_data


def test_user_text_goes_through_the_data_steps(tmp_path):
    rng = random.Random(1)
    for part in range(2):
        (tmp_path / f"notes_{part}.txt").write_text("".join(
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 12))).capitalize() + ". "
            + " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 12))) + ".\n\n" for _ in range(30)))
    settings = DataSettings(text=[str(tmp_path / "notes_*.txt")], heldout_every=6, vocab_size=300,
                                 seq_length=32, max_predictions=5, num_workers=1)
    prepared = prepare_data(settings, str(tmp_path / "data"), print_fn=lambda *a, **k: None)
    assert (tmp_path / "data" / "text.txt").read_text().count("\n\n") == 60
    assert prepared.train_instances > 0 and prepared.heldout_instances > 0
    assert prepared.vocab_size == len((tmp_path / "data" / "vocab.txt").read_text().splitlines())

    with pytest.raises(FileNotFoundError, match="--text"):
        prepare_data(DataSettings(text=[str(tmp_path / "missing_*.txt")]), str(tmp_path / "data2"),
                          print_fn=lambda *a, **k: None)
