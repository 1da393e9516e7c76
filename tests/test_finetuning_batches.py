"""Length-bucketed batches: each padded to the narrowest width that holds its longest row, full training batches
from an endless seeded stream, evaluation in file order, and model outputs equal to those at full length."""

import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf
from finetuning_fixtures import vocab_file

from kbert.finetuning import BertClassifier
from kbert.finetuning.batches import bucket_widths, eval_batches, training_batches
from kbert.finetuning.encoding import PairEncoder
from kbert.finetuning.examples import Examples
from kbert.modeling import BertConfig, BertEncoder

SEQ_LENGTH = 32
TINY = BertConfig(
    vocab_size=200,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=SEQ_LENGTH,
)


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return PairEncoder(vocab_file(tmp_path_factory.mktemp("vocab")), SEQ_LENGTH)


def _examples(count=50, pairs=False, seed=0) -> Examples:
    """Texts of 1 to 40 words (some truncated), or pairs of 1 to 26 and 1 to 3 words: packed lengths in every
    bucket up to 32. Each is labelled with its own index."""
    rng = np.random.default_rng(seed)

    def texts(most):
        return [
            " ".join(f"w{int(i)}" for i in rng.integers(0, 60, int(rng.integers(1, most + 1)))) for _ in range(count)
        ]

    if pairs:
        return Examples("mem", texts(26), texts(3), np.arange(count, dtype=np.int32))
    return Examples("mem", texts(40), None, np.arange(count, dtype=np.int32))


def _full_length(encoder, examples, ids) -> dict[str, np.ndarray]:
    """`PairEncoder.encode` of the examples `ids`, at `seq_length`."""
    columns = [examples.text_a] + ([examples.text_b] if examples.text_b is not None else [])
    encoded = encoder.encode(*(tf.constant([column[i] for i in ids]) for column in columns))
    return {name: value.numpy() for name, value in encoded.items()}


def _narrowest(length: int) -> int:
    return next(w for w in bucket_widths(SEQ_LENGTH) if w >= length)


def _check_cut_of_full_length(encoder, examples, features, ids) -> int:
    """Asserts that `features` are the full-length encoding of `ids` with only padding cut; returns the width."""
    full = _full_length(encoder, examples, ids)
    width = features["input_ids"].shape[1]
    assert width == _narrowest(full["input_mask"].sum(axis=1).max())
    for name, value in full.items():
        np.testing.assert_array_equal(features[name].numpy(), value[:, :width])
    assert not full["input_mask"][:, width:].any()
    return width


def test_widths_are_few_multiples_of_eight_and_waste_under_half():
    for seq_length in range(8, 1025):
        widths = bucket_widths(seq_length)
        assert widths[-1] == seq_length and widths == sorted(set(widths))
        assert all(w % 8 == 0 for w in widths[:-1]) and len(widths) <= 2 * seq_length.bit_length() - 5
        # A row one token longer than the width below is padded to less than 1.5 times its length above 16.
        assert all(wide < 1.5 * (narrow + 1) for narrow, wide in zip(widths, widths[1:]) if narrow >= 16)
    assert bucket_widths(512) == [8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512]


def test_every_dataset_maps_one_trace_of_the_tokenizer(tmp_path):
    encoder = PairEncoder(vocab_file(tmp_path), SEQ_LENGTH)
    examples = _examples(8)
    training_batches(encoder, examples, 4, seed=0)
    eval_batches(encoder, examples, 4)
    eval_batches(encoder, _examples(6, seed=1), 4, with_labels=False)
    assert encoder.dataset_encode.experimental_get_tracing_count() == 1


@pytest.mark.slow
@pytest.mark.parametrize("pairs", [False, True])
def test_training_batches_are_full_one_width_each_and_only_padding_is_cut(encoder, pairs):
    examples = _examples(pairs=pairs)
    widths = set()
    for features, ids in training_batches(encoder, examples, batch_size=4, seed=1).take(30):
        assert ids.shape == (4,)
        width = _check_cut_of_full_length(encoder, examples, features, ids.numpy())
        lengths = features["input_mask"].numpy().sum(axis=1)
        assert all(_narrowest(n) == width for n in lengths)  # the whole batch comes from one bucket
        widths.add(width)
    assert widths == set(bucket_widths(SEQ_LENGTH))


@pytest.mark.slow
def test_training_stream_is_seeded_reshuffled_and_drops_nothing_for_good(encoder):
    examples = _examples()
    steps = 3 * len(examples) // 4  # three passes' worth of batches

    def stream(seed):
        return [ids.numpy().tolist() for _, ids in training_batches(encoder, examples, 4, seed).take(steps)]

    first = stream(1)
    assert first == stream(1) and first != stream(2)
    assert first[: steps // 3] != first[steps // 3 : 2 * steps // 3]
    counts = np.bincount(list(itertools.chain(*first)), minlength=len(examples))
    # Rows left in a half-filled group at the end of a pass open the next pass's batches: none is lost.
    assert counts.min() >= 2 and counts.sum() == 4 * steps


@pytest.mark.slow
def test_eval_batches_keep_the_order_and_cut_only_padding(encoder):
    examples = _examples(count=21, pairs=True)
    seen = []
    for features, ids in eval_batches(encoder, examples, batch_size=4):
        _check_cut_of_full_length(encoder, examples, features, ids.numpy())
        seen += ids.numpy().tolist()
    assert seen == list(range(21))
    texts_only = [f["input_ids"].shape for f in eval_batches(encoder, examples, 4, with_labels=False)]
    assert texts_only == [f["input_ids"].shape for f, _ in eval_batches(encoder, examples, 4)]


@pytest.mark.slow
def test_outputs_and_predictions_equal_those_at_full_length(encoder):
    examples = _examples(count=40, pairs=True)
    keras.utils.set_random_seed(3)
    model = BertClassifier(BertEncoder(TINY), num_outputs=3)
    full = tf.data.Dataset.from_tensor_slices((examples.text_a, examples.text_b)).batch(8).map(encoder.encode)
    cut = eval_batches(encoder, examples, 8, with_labels=False)
    assert {f["input_ids"].shape[1] for f in cut} > {SEQ_LENGTH}  # some batches are narrower
    logits_full, logits_cut = (model.predict(d, verbose=0) for d in (full, cut))
    np.testing.assert_allclose(logits_cut, logits_full, atol=1e-5)
    assert (np.argmax(logits_cut, axis=1) == np.argmax(logits_full, axis=1)).all()
    for f_full, f_cut in zip(full, cut):
        pooled_full = model.encoder(f_full)["pooled_output"].numpy()
        np.testing.assert_allclose(model.encoder(f_cut)["pooled_output"].numpy(), pooled_full, atol=1e-5)


@pytest.mark.slow
def test_fit_trains_on_every_width_under_xla(encoder):
    """Each width is one shape: XLA compiles a program per width, and fit runs exactly `steps_per_epoch` steps."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 64).astype(np.int32)
    # Class k's texts hold words w{30k}..w{30k+29} only, 1 to 12 words of them: widths 8 and 16.
    texts = [" ".join(f"w{30 * k + int(i)}" for i in rng.integers(0, 30, int(rng.integers(1, 13)))) for k in labels]
    examples = Examples("mem", texts, None, labels)
    keras.utils.set_random_seed(1)
    model = BertClassifier(BertEncoder(TINY), num_outputs=2)
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        jit_compile=True,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    batches = training_batches(encoder, examples, batch_size=8, seed=1)
    assert {f["input_ids"].shape[1] for f, _ in batches.take(12)} == {8, 16}
    history = model.fit(batches, epochs=3, steps_per_epoch=4, shuffle=False, verbose=0).history["loss"]
    assert int(model.optimizer.iterations.numpy()) == 12 and history[-1] < history[0]
