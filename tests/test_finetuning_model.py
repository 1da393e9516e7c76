"""BertClassifier serialises as keras-hub's tasks do: its config and a `.keras` file rebuild the same model."""

import keras
import numpy as np

from kbert.finetuning import BertClassifier
from kbert.modeling import BertConfig, BertEncoder

TINY = BertConfig(
    vocab_size=50,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=16,
)


def _classifier() -> BertClassifier:
    return BertClassifier(BertEncoder(TINY), num_outputs=3, dropout=0.2)


def _batch() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "input_ids": rng.integers(0, TINY.vocab_size, (4, 8), dtype=np.int32),
        "input_mask": np.array([[1] * 8] * 2 + [[1] * 5 + [0] * 3] * 2, np.int32),
        "segment_ids": np.array([[0] * 4 + [1] * 4] * 4, np.int32),
    }


def test_get_config_round_trips():
    model = _classifier()
    config = model.get_config()
    rebuilt = BertClassifier.from_config(config)
    assert rebuilt.get_config() == config
    assert rebuilt.encoder.config == TINY and rebuilt.num_outputs == 3 and rebuilt.dropout_rate == 0.2
    # The encoder keeps a pretraining model's paths, so checkpoints load into it.
    assert {v.path.split("/")[0] for v in rebuilt.weights} == {"bert", "classifier"}


def test_keras_file_round_trip_gives_the_same_outputs(tmp_path):
    model = _classifier()
    path = str(tmp_path / "classifier.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, BertClassifier) and loaded.get_config() == model.get_config()
    batch = _batch()
    np.testing.assert_array_equal(loaded(batch, training=False).numpy(), model(batch, training=False).numpy())
