"""kbert-pack-pretraining-data: every input sequence in exactly one packed row, the packed layout, output bytes
independent of --num_workers, the inspector on packed files, and bad input refused in one line before any output
is touched."""

import collections
import pathlib
import re

import numpy as np
import pytest
from cli_batch import assert_refused, run_batch
from tfrecord_fixtures import CLS, make_instances, write_records, write_vocab

from kbert.data import input_files, schema, validation
from kbert.data.inspection import inspect_files
from kbert.data.packing.pack_pretraining_data import check_inputs, pack_pretraining_data
from kbert.data.packing.sequences import row_sequences
from kbert.data.record_stats import VocabDecoder
from kbert.errors import ConfigError, InputDataError, MissingFileError

SEQ, PRED, K = 32, 5, 3


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("packing")
    vocab = write_vocab(str(folder / "vocab.txt"))
    for i in range(2):
        write_records(folder / f"masked-{i}.tfrecord", make_instances(120, SEQ, PRED, len(vocab), seed=i))
    write_records(
        folder / "unmasked.tfrecord", make_instances(150, SEQ, None, len(vocab), seed=2), v2=True, gzip_compressed=True
    )
    # masked_lm_prob 0.6 with P=8: most pairs of sequences overflow a row's P + K - 1 = 10 slots.
    write_records(folder / "dense.tfrecord", make_instances(150, SEQ, 8, len(vocab), seed=3, masked_lm_prob=0.6))
    return folder, vocab


def _read(paths):
    """Every record of `paths`, parsed (v1 names), and the first file's layout."""
    layout = validation.first_layout(paths)
    records = [r for p in paths for r in validation.read_records(p, validation.detect_compression(p))]
    return validation.parse_records(records, layout), layout


def _sequences(arrays):
    """The multiset of sequences of parsed rows: tokens, segments, predictions relative to the sequence, label."""
    found = collections.Counter()
    for row in range(len(arrays["input_ids"])):
        for sequence in row_sequences(arrays, row):
            key = tuple((name, tuple(np.asarray(value).ravel().tolist())) for name, value in sorted(sequence.items()))
            found[key] += 1
    return found


def _check_layout(arrays, max_predictions):
    """input_mask numbers the sequences 1..k in order, positions restart at each one, next_sentence_* point at
    their [CLS]; padding is 0 everywhere; the predictions fit their slots and stay inside their sequence."""
    for row in range(len(arrays["input_ids"])):
        mask, weights = arrays["input_mask"][row], arrays["next_sentence_weights"][row]
        k = int((weights > 0).sum())
        assert weights.tolist() == [1.0] * k + [0.0] * (K - k)
        starts = arrays["next_sentence_positions"][row]
        assert starts[k:].tolist() == arrays["next_sentence_labels"][row, k:].tolist() == [0] * (K - k)
        expected_mask, expected_positions = [], []
        for j in range(k):
            length = int((mask == j + 1).sum())
            assert starts[j] == len(expected_mask) and arrays["input_ids"][row, starts[j]] == CLS
            expected_mask += [j + 1] * length
            expected_positions += list(range(length))
        pad = SEQ - len(expected_mask)
        assert mask.tolist() == expected_mask + [0] * pad
        assert arrays["positions"][row].tolist() == expected_positions + [0] * pad
        for name in ("input_ids", "segment_ids"):
            assert not arrays[name][row, len(expected_mask) :].any()
        if max_predictions is not None:
            real = arrays["masked_lm_weights"][row] > 0
            assert real.sum() <= schema.packed_predictions(max_predictions, K)
            assert not arrays["masked_lm_positions"][row][~real].any() and not arrays["masked_lm_ids"][row][~real].any()
            assert (mask[arrays["masked_lm_positions"][row][real]] > 0).all()


@pytest.mark.parametrize(
    "inputs,max_predictions,gzip,most_rows",
    [
        (["masked-0.tfrecord", "masked-1.tfrecord"], PRED, None, 0.75),
        (["unmasked.tfrecord"], None, None, 0.75),  # v2 names, GZIP: kept
        (["dense.tfrecord"], 8, True, 0.9),  # the prediction slots, not the tokens, limit the rows
    ],
)
def test_every_input_sequence_lands_in_exactly_one_row(data, tmp_path, inputs, max_predictions, gzip, most_rows):
    folder, _ = data
    paths = [str(folder / name) for name in inputs]
    outputs = [str(tmp_path / "packed-0.tfrecord"), str(tmp_path / "packed-1.tfrecord")]
    summary = pack_pretraining_data(paths, outputs, sequences_per_row=K, chunk_records=100, gzip=gzip)
    before, in_layout = _read(paths)
    after, layout = _read(outputs)
    assert _sequences(after) == _sequences(before)
    _check_layout(after, max_predictions)
    assert (layout.sequences_per_row, layout.max_predictions, layout.seq_length) == (K, max_predictions, SEQ)
    assert layout.use_v2_feature_names == in_layout.use_v2_feature_names
    assert layout.compression == ("GZIP" if gzip else in_layout.compression)
    assert summary.sequences == len(before["input_ids"]) and summary.rows == len(after["input_ids"])
    assert summary.rows < most_rows * summary.sequences
    assert summary.padding(summary.rows) < summary.padding(summary.sequences)


def test_output_bytes_do_not_depend_on_num_workers(data, tmp_path):
    folder, _ = data
    paths = [str(folder / "masked-0.tfrecord"), str(folder / "masked-1.tfrecord")]

    def packed(name, **options):
        outputs = [str(tmp_path / f"{name}-{i}.tfrecord") for i in range(2)]
        pack_pretraining_data(paths, outputs, sequences_per_row=K, chunk_records=64, **options)
        return [pathlib.Path(path).read_bytes() for path in outputs]

    one = packed("one", num_workers=1)
    assert packed("two", num_workers=2) == one
    assert packed("seed", random_seed=1) != one  # the seed orders the rows


def test_inspector_counts_and_decodes_the_sequences_of_packed_rows(data, tmp_path, capsys):
    folder, vocab = data
    paths = [str(folder / "masked-0.tfrecord"), str(folder / "masked-1.tfrecord")]
    output = tmp_path / "packed.tfrecord"
    summary = pack_pretraining_data(paths, [str(output)], sequences_per_row=K)
    capsys.readouterr()
    stats = inspect_files(str(output), None, None, VocabDecoder(vocab), len(vocab), None, num_examples=1)
    out = capsys.readouterr().out
    assert (stats.records, stats.sequences) == (summary.rows, 240)
    assert stats.length_counts.sum() == 240 and stats.nsp_counts.sum() == 240
    assert f"{'total':<60} {summary.rows:>10,} {240:>10,}" in out
    assert "layout: packed (3 sequences a row), seq_length 32, max_predictions 5, masked" in out
    after, _ = _read([str(output)])
    first = row_sequences(after, 0)
    assert f"sequence {len(first)} of {len(first)}:" in out
    assert f"next_sentence_label: {first[-1]['next_sentence_label']}" in out


@pytest.mark.parametrize(
    "other,needle",
    [
        (dict(v2=True), "v2 names"),
        (dict(max_predictions=None), "unmasked"),
        (dict(seq_length=48), "seq_length 48"),
        (dict(max_predictions=6), "masked (6 predictions)"),
    ],
)
def test_a_pattern_of_mixed_layouts_is_refused(data, tmp_path, other, needle):
    folder, vocab = data
    options = dict(seq_length=SEQ, max_predictions=PRED, v2=False)
    options.update(other)
    odd = write_records(
        tmp_path / "odd.tfrecord",
        make_instances(4, options["seq_length"], options["max_predictions"], len(vocab)),
        v2=options["v2"],
    )
    with pytest.raises(InputDataError, match=f"odd.tfrecord holds .*{re.escape(needle)}.*pack files of one layout"):
        check_inputs([str(folder / "masked-0.tfrecord"), odd])


def test_a_record_that_disagrees_with_the_first_one_fails_the_run_and_writes_nothing(data, tmp_path):
    _, vocab = data
    mixed = write_records(
        tmp_path / "mixed.tfrecord", make_instances(5, SEQ, PRED, len(vocab)) + make_instances(1, 48, PRED, len(vocab))
    )
    output = tmp_path / "out" / "packed.tfrecord"
    with pytest.raises(InputDataError, match="mixed.tfrecord: a record of records 0 to 5 disagrees with the layout"):
        pack_pretraining_data([mixed], [str(output)])
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == ["mixed.tfrecord"]


def test_a_file_cut_short_fails_the_run_naming_it(data, tmp_path):
    folder, _ = data
    cut = tmp_path / "cut.tfrecord"
    cut.write_bytes((folder / "masked-0.tfrecord").read_bytes()[:-10])
    with pytest.raises(InputDataError, match="cut.tfrecord: corrupt or truncated TFRecord after 119 good records"):
        pack_pretraining_data([str(cut)], [str(tmp_path / "out" / "packed.tfrecord")])
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == ["cut.tfrecord"]


def _mlm_only(path, vocab):
    instances = make_instances(4, SEQ, PRED, len(vocab))
    return write_records(path, [{k: v for k, v in inst.items() if k != "next_sentence_labels"} for inst in instances])


def _snapshot(*folders):
    return {p: p.read_bytes() for folder in folders for p in folder.rglob("*") if p.is_file()}


@pytest.mark.spawns
def test_the_tool_refuses_bad_input_in_one_line_and_touches_no_file(data, tmp_path):
    folder, vocab = data
    masked, output = str(folder / "masked-0.tfrecord"), tmp_path / "out" / "packed.tfrecord"
    output.parent.mkdir()
    output.write_bytes(b"an earlier run's records")
    packed = tmp_path / "packed-input.tfrecord"
    pack_pretraining_data([masked], [str(packed)])
    mlm_only = _mlm_only(tmp_path / "mlm.tfrecord", vocab)
    cases = {
        "packed": ([f"--input_file={packed}"], ["--input_file", "packed-input.tfrecord is already packed"]),
        "mixed": (
            [f"--input_file={masked},{folder / 'unmasked.tfrecord'}"],
            ["--input_file", "unmasked.tfrecord holds", "v2 names", "pack files of one layout"],
        ),
        "mlm_only": ([f"--input_file={mlm_only}"], ["--input_file", "mlm.tfrecord holds MLM-only records"]),
        "per_pack": (
            [f"--input_file={masked}", "--max_sequences_per_pack=0"],
            ["--max_sequences_per_pack=0", "at least 1"],
        ),
    }
    before = _snapshot(folder, tmp_path)
    runs = run_batch("pack_pretraining_data", [[f"--output_file={output}", *args] for args, _ in cases.values()])
    for (_, needles), run in zip(cases.values(), runs):
        assert_refused(run, "kbert-pack-pretraining-data", *needles)
    assert _snapshot(folder, tmp_path) == before


def test_an_output_that_is_an_input_a_pattern_that_matches_nothing_or_empty_shards_are_refused(data, tmp_path):
    folder, vocab = data
    masked = str(folder / "masked-0.tfrecord")
    four = write_records(folder / "four.tfrecord", make_instances(4, SEQ, PRED, len(vocab)))
    before = _snapshot(folder)
    with pytest.raises(ConfigError, match="--output_file: .*masked-0.tfrecord is also --input_file"):
        pack_pretraining_data([masked], [str(tmp_path / "new.tfrecord"), masked])
    with pytest.raises(InputDataError, match="--num_output_shards: .* for 5 output files .* pack more input records"):
        pack_pretraining_data([four], [str(tmp_path / "out" / f"packed-{i}") for i in range(5)])
    with pytest.raises(MissingFileError, match="--input_file: no file matches"):
        input_files.expand_patterns(str(tmp_path / "nothing-*.tfrecord"), "--input_file")
    assert _snapshot(folder) == before and not any(p.is_file() for p in tmp_path.rglob("*"))
