"""Dynamic masking: RoBERTa-style statistics, special tokens, fresh masks per epoch, masks drawn from the seed,
whole-word masking; the same with a byte-level BPE tokenizer.json (data.tokenizer)."""

import math

import numpy as np
import pytest
import tensorflow as tf
from tfrecord_fixtures import CLS, MASK, SEP, make_instances, write_records, write_vocab
from tokenizer_fixtures import MODERNBERT, generated_lines, write_tokenizer
from tokenizers import Tokenizer

from kbert.data import pretraining_dataset
from kbert.data.create_pretraining_data import create_pretraining_data
from kbert.data.dynamic_masking import DynamicMasker
from kbert.data.instances import InstanceConfig

SEQ, PRED = 64, 20


@pytest.fixture()
def files(tmp_path):
    vocab = write_vocab(str(tmp_path / "vocab.txt"))
    instances = make_instances(512, SEQ, None, len(vocab), seed=11)
    write_records(tmp_path / "unmasked.tfrecord", instances)
    return tmp_path, vocab, instances


def one_epoch(tmp_path, vocab, **kwargs):
    dataset = pretraining_dataset(
        str(tmp_path / "unmasked.tfrecord"),
        SEQ,
        PRED,
        64,
        is_training=False,
        dynamic_masking=True,
        vocab_file=str(tmp_path / "vocab.txt"),
        **kwargs,
    )
    return dataset


def stack(dataset) -> dict[str, np.ndarray]:
    batches = list(dataset.as_numpy_iterator())
    return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


def test_masking_statistics_15_percent_and_80_10_10(files):
    tmp_path, vocab, instances = files
    out = stack(one_epoch(tmp_path, vocab, seed=1))
    original = np.array([inst["input_ids"] for inst in instances])
    lengths = out["input_mask"].sum(1)

    counts = out["masked_lm_weights"].sum(1)
    expected = np.minimum(PRED, np.ceil(0.15 * (lengths - 3)))  # [CLS] and two [SEP] are never selectable
    np.testing.assert_array_equal(counts, expected)
    assert abs(counts.sum() / (lengths - 3).sum() - 0.15) < 0.02

    chosen, replaced_by = [], []
    for row in range(len(original)):
        n = int(counts[row])
        positions = out["masked_lm_positions"][row, :n]
        assert np.all(np.diff(positions) > 0)  # ascending
        assert np.all(out["masked_lm_positions"][row, n:] == 0) and np.all(out["masked_lm_ids"][row, n:] == 0)
        np.testing.assert_array_equal(out["masked_lm_ids"][row, :n], original[row, positions])
        untouched = np.setdiff1d(np.arange(SEQ), positions)
        np.testing.assert_array_equal(out["input_ids"][row, untouched], original[row, untouched])
        chosen.append(original[row, positions])
        replaced_by.append(out["input_ids"][row, positions])
    chosen, replaced_by = np.concatenate(chosen), np.concatenate(replaced_by)
    assert not np.isin(chosen, [0, CLS, SEP, MASK]).any()
    share_mask = np.mean(replaced_by == MASK)
    share_kept = np.mean(replaced_by == chosen)
    share_random = 1 - share_mask - share_kept
    assert abs(share_mask - 0.8) < 0.03, share_mask
    assert abs(share_kept - 0.1) < 0.025, share_kept  # a random draw equal to the original counts here: p=1/196
    assert abs(share_random - 0.1) < 0.025, share_random
    assert np.all(replaced_by < len(vocab))


def test_special_tokens_and_padding_never_masked_even_at_low_lengths(tmp_path):
    vocab = write_vocab(str(tmp_path / "vocab.txt"))
    # Shortest legal instances: [CLS] a [SEP] b [SEP] ... and plenty of padding.
    instances = make_instances(128, 8, None, len(vocab), seed=2)
    for inst in instances:
        pad = SEQ - 8
        for name in ("input_ids", "input_mask", "segment_ids"):
            inst[name] = inst[name] + [0] * pad
    write_records(tmp_path / "unmasked.tfrecord", instances)
    out = stack(one_epoch(tmp_path, vocab))
    lengths = out["input_mask"].sum(1)
    for row in range(len(instances)):
        n = int(out["masked_lm_weights"][row].sum())
        assert n >= 1
        positions = out["masked_lm_positions"][row, :n]
        assert np.all(positions < lengths[row])
        assert not np.isin(np.array(instances[row]["input_ids"])[positions], [0, CLS, SEP]).any()


def test_new_masks_every_epoch(files):
    tmp_path, vocab, _ = files
    # Training repeats forever; one file and a shuffle buffer of 1 keep the record order fixed across epochs.
    dataset = pretraining_dataset(
        str(tmp_path / "unmasked.tfrecord"),
        SEQ,
        PRED,
        64,
        dynamic_masking=True,
        vocab_file=str(tmp_path / "vocab.txt"),
        shuffle_buffer=1,
        seed=0,
    )
    batches_per_epoch = 512 // 64
    both = stack(dataset.take(2 * batches_per_epoch))
    first = {k: v[:512] for k, v in both.items()}
    second = {k: v[512:] for k, v in both.items()}
    np.testing.assert_array_equal(first["input_mask"], second["input_mask"])  # same records, same order
    same_rows = np.all(first["masked_lm_positions"] == second["masked_lm_positions"], axis=1)
    assert same_rows.mean() < 0.2


def test_masks_are_drawn_from_the_seed_and_resume_with_skipped_batches(files):
    """The same seed masks the same records the same way, whatever the global seed and however parallel the map;
    another seed masks them otherwise; skipping batches draws the masks the full stream draws for them. (Records in
    file order, so only the masks can differ.)"""
    tmp_path, vocab, _ = files

    def batches(seed: int, skip: int = 0, take: int = 6) -> dict[str, np.ndarray]:
        return stack(one_epoch(tmp_path, vocab, seed=seed, skip_batches=skip).take(take))

    tf.random.set_seed(1)
    first = batches(seed=5)
    tf.random.set_seed(2)
    again = batches(seed=5)
    for name in first:
        np.testing.assert_array_equal(first[name], again[name], err_msg=name)
    other = batches(seed=6)
    np.testing.assert_array_equal(first["segment_ids"], other["segment_ids"])  # the same records
    assert np.mean(np.all(first["masked_lm_positions"] == other["masked_lm_positions"], axis=1)) < 0.2
    resumed = batches(seed=5, skip=4, take=2)
    for name in first:
        np.testing.assert_array_equal(first[name][4 * 64 :], resumed[name], err_msg=name)


def test_whole_word_masking_masks_all_pieces_of_a_word(files):
    tmp_path, vocab, instances = files
    continues = np.array([t.startswith("##") for t in vocab])
    out = stack(one_epoch(tmp_path, vocab, whole_word_masking=True, seed=3))
    original = np.array([inst["input_ids"] for inst in instances])
    expected_words, total_selected_words = 0, 0
    for row in range(len(original)):
        length = int(out["input_mask"][row].sum())
        ids = original[row, :length]
        # Random fixture ids put `##` pieces after [CLS]/[SEP]: a piece after a special token starts a word.
        starts = ~continues[ids]
        starts[1:] |= np.isin(ids[:-1], [CLS, SEP])
        word = np.cumsum(starts) - 1
        selectable = {w for w in range(word[-1] + 1) if not np.isin(ids[word == w], [CLS, SEP]).any()}
        n = int(out["masked_lm_weights"][row].sum())
        assert (1 if selectable else 0) <= n <= PRED
        positions = out["masked_lm_positions"][row, :n]
        masked_words = np.unique(word[positions])
        # Every piece of every chosen word is chosen, and no special token is.
        np.testing.assert_array_equal(np.sort(positions), np.flatnonzero(np.isin(word, masked_words)))
        assert not np.isin(ids[positions], [CLS, SEP]).any()
        expected_words += min(PRED, math.ceil(0.15 * len(selectable)))
        total_selected_words += len(masked_words)
        assert len(masked_words) <= math.ceil(0.15 * len(selectable))
    # ceil(15% of words), less the whole words that would overflow max_predictions (dropped, never cut).
    assert 0.9 < total_selected_words / expected_words <= 1.0


def test_vocab_without_mask_token_is_an_error(tmp_path):
    (tmp_path / "vocab.txt").write_text("[PAD]\n[CLS]\n[SEP]\nhello\n")
    with pytest.raises(ValueError, match=r"vocab.txt.*\[MASK\]"):
        DynamicMasker.from_vocab_file(str(tmp_path / "vocab.txt"), max_predictions=5)


def test_masked_records_with_dynamic_masking_is_an_error(tmp_path):
    vocab = write_vocab(str(tmp_path / "vocab.txt"))
    write_records(tmp_path / "unmasked.tfrecord", make_instances(8, SEQ, PRED, len(vocab)))
    with pytest.raises(ValueError, match="unmasked.tfrecord.*already masked.*--no_masking"):
        one_epoch(tmp_path, vocab)


def test_a_dynamically_masked_run_scores_masked_held_out_records_on_their_own_masks(tmp_path):
    """A run masking 30% anew each pass (38 predictions a sequence) evaluates held-out records written with BERT's
    15% (20 predictions) as they are, so its accuracy is comparable with a 15% run's; unmasked ones are masked."""
    from kbert.tasks.bert import dataset_fn
    from kbert.training.config import PretrainingConfig

    vocab = write_vocab(str(tmp_path / "vocab.txt"))
    write_records(tmp_path / "unmasked.tfrecord", make_instances(16, SEQ, None, len(vocab), seed=3))
    masked = make_instances(16, SEQ, PRED, len(vocab), seed=4)
    write_records(tmp_path / "heldout.tfrecord", masked)

    def eval_batch(eval_files):
        config = PretrainingConfig(
            {
                "data": {
                    "train_files": str(tmp_path / "unmasked.tfrecord"),
                    "eval_files": str(tmp_path / eval_files),
                    "seq_length": SEQ,
                    "max_predictions": 38,
                    "dynamic_masking": True,
                    "masked_lm_prob": 0.3,
                    "vocab_file": str(tmp_path / "vocab.txt"),
                },
                "eval": {"global_batch_size": 16},
            }
        )
        return next(iter(dataset_fn(config, False, len(vocab))(tf.distribute.InputContext())))

    batch = eval_batch("heldout.tfrecord")
    assert batch["masked_lm_ids"].shape == (16, PRED)
    np.testing.assert_array_equal(batch["masked_lm_ids"], np.stack([m["masked_lm_ids"] for m in masked]))
    np.testing.assert_array_equal(batch["input_ids"], np.stack([m["input_ids"] for m in masked]))
    assert eval_batch("unmasked.tfrecord")["masked_lm_ids"].shape == (16, 38)  # masked by the run's masker


@pytest.fixture(scope="module")
def bpe_records(tmp_path_factory):
    """Unmasked records (--no_masking) of generated documents, written with a byte-level BPE tokenizer.json trained
    here (ModernBERT's special tokens, no prefix space: a line's first word carries no "Ġ"); and the tokenizer."""
    root = tmp_path_factory.mktemp("bpe")
    tokenizer = write_tokenizer(root / "tokenizer", MODERNBERT)
    lines = generated_lines(480, seed=7)
    (root / "corpus.txt").write_text("\n\n".join("\n".join(lines[i : i + 6]) for i in range(0, 480, 6)) + "\n")
    config = InstanceConfig(max_seq_length=SEQ, max_predictions_per_seq=PRED, dupe_factor=2, no_masking=True)
    out = root / "unmasked.tfrecord"
    create_pretraining_data([str(root / "corpus.txt")], [str(out)], None, True, config, tokenizer=str(tokenizer))
    return tokenizer, out


def bpe_passes(bpe_records, seed: int, passes: int = 3, whole_word: bool = True) -> dict[str, np.ndarray]:
    """`passes` passes of training batches (shuffled, repeated) over the BPE records, masked dynamically."""
    tokenizer, records = bpe_records
    count = sum(1 for _ in tf.data.TFRecordDataset(str(records)))
    dataset = pretraining_dataset(
        str(records),
        SEQ,
        PRED,
        32,
        dynamic_masking=True,
        tokenizer=str(tokenizer.parent),
        whole_word_masking=whole_word,
        seed=seed,
    )
    return stack(dataset.take(passes * count // 32))


@pytest.mark.parametrize("whole_word", [True, False])
def test_a_tokenizer_json_masks_no_special_token_and_whole_words(bpe_records, whole_word):
    tokenizer, records = bpe_records
    theirs = Tokenizer.from_file(str(tokenizer))
    special = [theirs.token_to_id(t) for t in MODERNBERT[:4]]  # [CLS] [SEP] [MASK] [PAD]
    spec = {"input_ids": tf.io.FixedLenFeature([SEQ], tf.int64)}
    parsed = tf.data.TFRecordDataset(str(records)).batch(10_000).map(lambda r: tf.io.parse_example(r, spec))
    rows = {tuple(r) for r in next(iter(parsed))["input_ids"].numpy()}
    out = bpe_passes(bpe_records, seed=3, whole_word=whole_word)
    assert len(out["input_ids"]) > 3 * 150

    # The rows before masking (the masked positions given back their labels) are the records' rows.
    weights = out["masked_lm_weights"] > 0
    row, slot = np.nonzero(weights)
    positions = out["masked_lm_positions"][row, slot]
    original = out["input_ids"].copy()
    original[row, positions] = out["masked_lm_ids"][row, slot]
    assert all(tuple(r) in rows for r in original)
    masked = np.zeros(original.shape, bool)
    masked[row, positions] = True
    assert masked.sum() == weights.sum() > 1000
    assert not np.isin(original[masked], special).any()
    assert not (masked & (out["input_mask"] == 0)).any()

    # A piece starts a word when it carries "Ġ", is special, or follows a special token: a segment's first word,
    # whose first piece carries no "Ġ" (it opened a line), is a word of its own, masked like any other.
    starts_word = np.array([theirs.id_to_token(i).startswith("\u0120") for i in range(theirs.get_vocab_size())])
    starts = starts_word[original] | np.isin(original, special)
    starts[:, 1:] |= np.isin(original[:, :-1], special)
    word = np.cumsum(starts, axis=1) + SEQ * np.arange(len(original))[:, None]
    whole = np.isin(word, word[masked])
    segment_first = np.zeros_like(masked)
    segment_first[:, 1:] = np.isin(original[:, :-1], special[:2]) & ~np.isin(original[:, 1:], special)
    assert (segment_first & ~starts_word[original]).sum() > 300
    assert masked[segment_first & ~starts_word[original]].sum() > 20
    if whole_word:
        np.testing.assert_array_equal(masked, whole)
        assert masked[~starts & (out["input_mask"] > 0)].sum() > 200  # words of several pieces, masked together
    else:
        assert (masked != whole).sum() > 200  # pieces masked alone


def test_a_tokenizer_jsons_masks_are_drawn_from_the_seed(bpe_records):
    """Two passes of training batches, as a run with the same seed reads them (records shuffled from the global seed
    and `seed`, masks drawn from `seed`), are the same twice over; another seed masks otherwise."""

    def passes(seed: int) -> dict[str, np.ndarray]:
        tf.random.set_seed(1)
        return bpe_passes(bpe_records, seed=seed, passes=2)

    first, again, other = passes(5), passes(5), passes(6)
    for name in first:
        np.testing.assert_array_equal(first[name], again[name], err_msg=name)
    assert not np.array_equal(first["masked_lm_positions"], other["masked_lm_positions"])


def test_a_run_with_data_tokenizer_masks_a_tokenizer_jsons_records(bpe_records):
    """kbert-pretrain's input: data.tokenizer gives the masker its special ids and words."""
    from kbert.tasks.bert import dataset_fn
    from kbert.training.config import PretrainingConfig

    tokenizer, records = bpe_records
    data = {"train_files": str(records), "seq_length": SEQ, "max_predictions": PRED, "dynamic_masking": True}
    config = PretrainingConfig(
        {
            "data": {**data, "tokenizer": str(tokenizer.parent), "whole_word_masking": True},
            "train": {"global_batch_size": 64},
        }
    )
    config.validate()
    batch = next(iter(dataset_fn(config, True, 512)(tf.distribute.InputContext())))
    weights = batch["masked_lm_weights"].numpy() > 0
    special = [Tokenizer.from_file(str(tokenizer)).token_to_id(t) for t in MODERNBERT[:4]]
    assert weights.sum() > 300 and not np.isin(batch["masked_lm_ids"].numpy()[weights], special).any()
