"""kbert.data.pretraining_dataset: shapes, round trip, sharding, checkpointing, Model Garden interop."""

import os
import random
import sys

import forkserver
import numpy as np
import pytest
import tensorflow as tf
from cli_batch import run_tools
from tfrecord_fixtures import make_instances, write_records, write_vocab

from kbert.data import pretraining_dataset
from kbert.data.validation import validate_file

SEQ, PRED = 32, 5

EXPECTED_SPEC = {
    "input_ids": (tf.int32, [None, SEQ]),
    "input_mask": (tf.int32, [None, SEQ]),
    "segment_ids": (tf.int32, [None, SEQ]),
    "masked_lm_positions": (tf.int32, [None, PRED]),
    "masked_lm_ids": (tf.int32, [None, PRED]),
    "masked_lm_weights": (tf.float32, [None, PRED]),
    "next_sentence_labels": (tf.int32, [None, 1]),
}


@pytest.fixture()
def vocab(tmp_path):
    return write_vocab(str(tmp_path / "vocab.txt"))


def all_examples(dataset) -> list[dict]:
    """Unbatches a finite dataset into a list of per-example NumPy dicts."""
    return [{k: v.tolist() for k, v in ex.items()} for ex in dataset.unbatch().as_numpy_iterator()]


def decode(ids, vocab) -> str:
    return " ".join(vocab[i] for i in ids if i != 0).replace(" ##", "")


def test_batches_have_static_shapes_and_architecture_dtypes(tmp_path, vocab):
    path = write_records(tmp_path / "a.tfrecord", make_instances(40, SEQ, PRED, len(vocab)))
    dataset = pretraining_dataset(path, SEQ, PRED, global_batch_size=8, vocab_size=len(vocab), seed=1)
    for name, (dtype, shape) in EXPECTED_SPEC.items():
        spec = dataset.element_spec[name]
        assert spec.dtype == dtype, name
        assert spec.shape.as_list() == [8] + shape[1:], name
    batches = list(dataset.take(12).as_numpy_iterator())  # 12 * 8 > 40 records: it repeats when training
    assert len(batches) == 12


@pytest.mark.parametrize("v2,gzip_compressed", [(False, False), (True, False), (False, True), (True, True)])
def test_round_trip_records_to_decoded_text(tmp_path, vocab, v2, gzip_compressed):
    instances = make_instances(20, SEQ, PRED, len(vocab), seed=3)
    path = write_records(tmp_path / "a.tfrecord", instances, v2=v2, gzip_compressed=gzip_compressed)
    dataset = pretraining_dataset(path, SEQ, PRED, global_batch_size=4, is_training=False)
    got = all_examples(dataset)
    assert len(got) == 20  # 20 / 4: nothing dropped
    for want, example in zip(instances, got):
        assert decode(example["input_ids"], vocab) == decode(want["input_ids"], vocab)
        for name, expected in want.items():
            assert example[name] == expected, name


def test_evaluation_keeps_the_last_partial_batch_and_training_drops_it(tmp_path, vocab):
    path = write_records(tmp_path / "a.tfrecord", make_instances(10, SEQ, PRED, len(vocab)))
    dataset = pretraining_dataset(path, SEQ, PRED, global_batch_size=4, is_training=False)
    assert [b["input_ids"].shape[0] for b in dataset.as_numpy_iterator()] == [4, 4, 2]
    training = pretraining_dataset(path, SEQ, PRED, global_batch_size=4, is_training=True, seed=1)
    assert training.element_spec["input_ids"].shape.as_list() == [4, SEQ]


def test_shards_by_file_per_input_pipeline(tmp_path, vocab):
    paths = []
    for i in range(4):
        instances = make_instances(8, SEQ, PRED, len(vocab), seed=i)
        for inst in instances:
            inst["next_sentence_labels"] = [i]  # tags each record with its file
        paths.append(write_records(tmp_path / f"part-{i}.tfrecord", instances))
    seen = []
    for pipeline_id in range(2):
        context = tf.distribute.InputContext(
            num_input_pipelines=2, input_pipeline_id=pipeline_id, num_replicas_in_sync=4
        )
        dataset = pretraining_dataset(str(tmp_path / "part-*.tfrecord"), SEQ, PRED, 16, context, is_training=False)
        batches = list(dataset.as_numpy_iterator())
        assert all(b["input_ids"].shape[0] == 4 for b in batches)  # 16 global / 4 replicas
        files = {int(x) for b in batches for x in b["next_sentence_labels"][:, 0]}
        assert files == {pipeline_id, pipeline_id + 2}
        seen.append(files)
    assert seen[0].isdisjoint(seen[1])


def test_fewer_files_than_pipelines_is_an_error(tmp_path, vocab):
    path = write_records(tmp_path / "only.tfrecord", make_instances(8, SEQ, PRED, len(vocab)))
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=0, num_replicas_in_sync=2)
    with pytest.raises(ValueError, match="num_output_shards"):
        pretraining_dataset(path, SEQ, PRED, 8, context)


def test_distribute_datasets_from_function(tmp_path, vocab):
    write_records(tmp_path / "a.tfrecord", make_instances(16, SEQ, PRED, len(vocab)))
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    dataset = strategy.distribute_datasets_from_function(
        lambda ctx: pretraining_dataset(str(tmp_path / "*.tfrecord"), SEQ, PRED, 8, ctx, seed=0)
    )
    batch = next(iter(dataset))
    assert batch["input_ids"].shape == (8, SEQ)
    assert batch["next_sentence_labels"].shape == (8, 1)


def test_building_the_input_pipelines_converts_nothing_with_autograph(tmp_path, vocab, monkeypatch):
    """tf.data's functions here have no Python control flow on tensors: autograph would only convert them, and all
    they call, on every build (most of tracing a pretraining pipeline). Fine-tuning's batches likewise."""
    from tensorflow.python.autograph.pyct import transpiler

    from kbert.finetuning.batches import eval_batches, training_batches
    from kbert.finetuning.encoding import PairEncoder
    from kbert.finetuning.examples import Examples

    converted = []
    transform = transpiler.PyToPy.transform
    monkeypatch.setattr(
        transpiler.PyToPy, "transform", lambda self, fn, context: converted.append(fn) or transform(self, fn, context)
    )
    path = write_records(tmp_path / "a.tfrecord", make_instances(16, SEQ, None, len(vocab)))
    vocab_file = str(tmp_path / "vocab.txt")  # the fixture's
    masked = dict(dynamic_masking=True, vocab_file=vocab_file, whole_word_masking=True, seed=1)
    next(iter(pretraining_dataset(path, SEQ, PRED, global_batch_size=4, **masked)))
    encoder = PairEncoder(vocab_file, seq_length=SEQ)
    examples = Examples("mem", ["a b", "c"], ["d", "e f"], np.array([0, 1], np.int32))
    next(iter(training_batches(encoder, examples, batch_size=2, seed=1)))
    next(iter(eval_batches(encoder, examples, batch_size=2)))
    assert converted == []


@pytest.mark.parametrize("dynamic", [False, True])
def test_iterator_saves_and_restores_in_a_checkpoint(tmp_path, vocab, dynamic):
    instances = make_instances(64, SEQ, None if dynamic else PRED, len(vocab), seed=5)
    write_records(tmp_path / "a.tfrecord", instances)
    kwargs = dict(dynamic_masking=dynamic, vocab_size=len(vocab), seed=7, shuffle_buffer=16)

    def fresh_iterator():
        return iter(pretraining_dataset(str(tmp_path / "*.tfrecord"), SEQ, PRED, 4, **kwargs))

    iterator = fresh_iterator()
    for _ in range(3):
        next(iterator)
    checkpoint = tf.train.Checkpoint(iterator=iterator)
    saved = checkpoint.write(str(tmp_path / "ckpt" / "it"))
    want = [next(iterator) for _ in range(4)]

    restored = fresh_iterator()
    tf.train.Checkpoint(iterator=restored).read(saved).assert_consumed()
    got = [next(restored) for _ in range(4)]
    # Record order and dynamic masks resume exactly.
    for w, g in zip(want, got):
        assert w.keys() == g.keys()
        for name in w:
            np.testing.assert_array_equal(w[name], g[name], err_msg=name)


def model_garden_corpus(tmp_path, vocab) -> str:
    """A small text corpus in Google's format: one sentence per line, blank line between documents."""
    rng = random.Random(0)
    words = [t for t in vocab if t.startswith("w")]
    lines = []
    for _ in range(12):
        for _ in range(rng.randint(2, 6)):
            lines.append(" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))))
        lines.append("")
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(lines))
    return str(path)


MODEL_GARDEN_CASES = [(False, False), (True, True)]  # (v2, gzip_compressed)


@pytest.fixture(scope="module")
def model_garden_files(tmp_path_factory):
    """Model Garden's create_pretraining_data tool on one corpus for each case, all its runs in one process
    (tests/cli_batch.py: one TensorFlow start; in a process of its own, as its absl flags would clash with others),
    each run as `python -m official.nlp.data.create_pretraining_data ARGS` would: (folder, vocab, case -> path)."""
    folder = tmp_path_factory.mktemp("model_garden")
    vocab = write_vocab(str(folder / "vocab.txt"))
    corpus = model_garden_corpus(folder, vocab)
    outputs = {case: str(folder / f"mg-{case[0]}-{case[1]}.tfrecord") for case in MODEL_GARDEN_CASES}
    runs = [
        [
            f"--input_file={corpus}",
            f"--output_file={outputs[(v2, gzip_compressed)]}",
            f"--vocab_file={folder / 'vocab.txt'}",
            f"--max_seq_length={SEQ}",
            f"--max_predictions_per_seq={PRED}",
            "--dupe_factor=2",
            f"--gzip_compress={gzip_compressed}",
            f"--use_v2_feature_names={v2}",
        ]
        for v2, gzip_compressed in MODEL_GARDEN_CASES
    ]
    results = run_tools([("-m official.nlp.data.create_pretraining_data", args) for args in runs])
    for result in results:
        assert result.returncode == 0, result.stderr[-3000:]
    return folder, vocab, outputs


@pytest.mark.spawns
@pytest.mark.xdist_group("pipeline_model_garden")  # one worker runs the shared batch once
@pytest.mark.parametrize("v2,gzip_compressed", MODEL_GARDEN_CASES)
def test_matches_model_garden_loader_on_model_garden_files(model_garden_files, v2, gzip_compressed):
    from official.nlp.data import pretrain_dataloader

    _, vocab, outputs = model_garden_files
    path = outputs[(v2, gzip_compressed)]
    layout = validate_file(path, SEQ, PRED)
    assert (layout.use_v2_feature_names, layout.compression) == (v2, "GZIP" if gzip_compressed else "")
    ours = all_examples(pretraining_dataset(path, SEQ, PRED, 4, is_training=False, vocab_size=len(vocab)))
    config = pretrain_dataloader.BertPretrainDataConfig(
        input_path=path,
        global_batch_size=4,
        is_training=False,
        seq_length=SEQ,
        max_predictions_per_seq=PRED,
        use_v2_feature_names=v2,
        file_type="tfrecord_compressed" if gzip_compressed else "tfrecord",
        drop_remainder=False,  # an evaluation reads every record
    )
    theirs = all_examples(pretrain_dataloader.BertPretrainDataLoader(config).load())
    assert len(ours) == len(theirs) > 8
    names = {"input_ids": "input_word_ids", "segment_ids": "input_type_ids"}
    for a, b in zip(ours, theirs):
        assert {names.get(k, k) for k in a} == set(b)
        for name in a:
            assert a[name] == b[names.get(name, name)], name


def text_corpus(tmp_path, vocab) -> tuple[str, str]:
    """Sentences of words and word-plus-piece words (`w3p5` tokenizes to `w3 ##p5`); returns (path, all text)."""
    rng = random.Random(1)
    words = [t for t in vocab if t.startswith("w")]
    pieces = [t[2:] for t in vocab if t.startswith("##")]
    lines = []
    for _ in range(16):
        for _ in range(rng.randint(2, 6)):
            lines.append(
                " ".join(
                    rng.choice(words) + (rng.choice(pieces) if rng.random() < 0.3 else "")
                    for _ in range(rng.randint(3, 12))
                )
            )
        lines.append("")
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(lines))
    return str(path), " ".join(line for line in lines if line)


@pytest.fixture(scope="module")
def created_files(tmp_path_factory):
    """tools/create_pretraining_data.py on one corpus, with masks and without (for dynamic masking), both runs in one
    process (tests/cli_batch.py: one TensorFlow start), each as `python tools/create_pretraining_data.py ARGS` would:
    (folder, vocab, corpus text, dynamic -> path)."""
    folder = tmp_path_factory.mktemp("created")
    vocab = write_vocab(str(folder / "vocab.txt"))
    corpus, text = text_corpus(folder, vocab)
    outputs = {dynamic: str(folder / f"instances-{dynamic}.tfrecord") for dynamic in (False, True)}
    runs = [
        [
            f"--input_file={corpus}",
            f"--output_file={outputs[dynamic]}",
            f"--vocab_file={folder / 'vocab.txt'}",
            f"--max_seq_length={SEQ}",
            f"--max_predictions_per_seq={PRED}",
            "--dupe_factor=2",
            f"--no_masking={dynamic}",
        ]
        for dynamic in outputs
    ]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for result in run_tools([("tools/create_pretraining_data.py", args) for args in runs], cwd=root):
        assert result.returncode == 0, result.stderr[-3000:]
    return folder, vocab, text, outputs


@pytest.mark.spawns
@pytest.mark.xdist_group("pipeline_created")  # one worker runs the shared batch once
@pytest.mark.parametrize("dynamic", [False, True])
def test_round_trip_text_through_create_pretraining_data(created_files, dynamic):
    folder, vocab, text, outputs = created_files
    examples = all_examples(
        pretraining_dataset(
            outputs[dynamic],
            SEQ,
            PRED,
            4,
            is_training=False,
            dynamic_masking=dynamic,
            vocab_file=str(folder / "vocab.txt"),
        )
    )
    assert len(examples) >= 40
    for example in examples:
        ids = list(example["input_ids"])
        for position, label, weight in zip(
            example["masked_lm_positions"], example["masked_lm_ids"], example["masked_lm_weights"]
        ):
            if weight:
                ids[position] = label
        sep = vocab.index("[SEP]")
        assert ids[0] == vocab.index("[CLS]") and ids.count(sep) == 2
        end_a = ids.index(sep)
        end_b = ids.index(sep, end_a + 1)
        # Both segments are runs of corpus text, restored exactly; truncation may cut a word at either end.
        for segment in (ids[1:end_a], ids[end_a + 1 : end_b]):
            words = decode(segment, vocab).removeprefix("##")
            assert words and words in text
        assert int(sum(example["masked_lm_weights"])) >= 1


DISTRIBUTED_SCRIPT = """
import sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from kbert.data import pretraining_dataset
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
dataset = strategy.distribute_datasets_from_function(
    lambda ctx: pretraining_dataset(sys.argv[1], 32, 5, 8, ctx, is_training=False))
batch = next(iter(dataset))
for replica in strategy.experimental_local_results(batch["input_ids"]):
    print(replica.device.split(":")[-1], replica.shape[0], replica.numpy()[:, 1].tolist())
"""


@pytest.mark.spawns
def test_two_replicas_get_their_own_per_replica_batches(tmp_path, vocab):
    instances = make_instances(16, SEQ, PRED, len(vocab), seed=9)
    path = write_records(tmp_path / "a.tfrecord", instances)
    result = forkserver.run(
        [sys.executable, "-c", DISTRIBUTED_SCRIPT, path],
        check=True,
        capture_output=True,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    lines = result.stdout.strip().splitlines()
    assert [line.split()[:2] for line in lines] == [["0", "4"], ["1", "4"]]  # 8 global / 2 replicas
    first_ids = [inst["input_ids"][1] for inst in instances[:8]]
    assert lines[0].split(" ", 2)[2] + lines[1].split(" ", 2)[2] == str(first_ids[:4]) + str(first_ids[4:])
