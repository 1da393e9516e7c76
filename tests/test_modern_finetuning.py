"""kbert-finetune and kbert-predict of a ModernBERT-class checkpoint with its tokenizer.json (trained here, nothing
downloaded): pairs are the tokenizers library's own ids, cut longest-first; the classifier head (cls or mean
pooling, dense, activation, LayerNorm) is transformers' ModernBERT one, checked in NumPy float64; a checkpoint
pretrained here with masked LM fine-tunes on a TSV task past its random-init control, kbert-predict labels a file
with the run, and the exports that take strings refuse it in one line."""

import json
import math
import os
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf
import yaml
from cli_batch import assert_refused, run_tools
from finetuning_fixtures import write_tsv
from model_fixtures import randomize
from tokenizer_fixtures import MODERNBERT, generated_words, write_tokenizer
from tokenizers import Tokenizer

from kbert.errors import ConfigError, MissingFileError, VocabularyError
from kbert.finetuning import BertClassifier, load_finetune_config, run_finetuning
from kbert.finetuning.examples import Examples
from kbert.finetuning.serving.classifier_export import export_classifier
from kbert.finetuning.serving.finetuned_run import load_run
from kbert.finetuning.serving.predict import open_predictor, write_predictions
from kbert.finetuning.serving.tf_hub_export import check_tokenization
from kbert.finetuning.tokenizer_encoding import TokenizerEncoder
from kbert.finetuning.vocabulary import tokenizer_for
from kbert.modeling import BertConfig, BertEncoder, BertPretrainer
from kbert.modeling.imported_checkpoint import imported_checkpoint
from kbert.modeling.modernbert_checkpoint import export_modernbert_checkpoint

SEQ = 24
SIZES = {
    "hidden_size": 32,
    "num_attention_heads": 2,
    "intermediate_size": 48,
    "num_hidden_layers": 3,
    "max_position_embeddings": 64,
    "local_attention": 8,  # rows of 24 reach past the local window
}


def _modern(vocab_size: int, **changes) -> BertConfig:
    return BertConfig.load("modernbert_tiny").replace(vocab_size=vocab_size, **SIZES, **changes)


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tokenizer")
    write_tokenizer(directory, MODERNBERT)
    return directory


def _table(tokenizer_dir) -> int:
    """A word table padded past the tokenizer's ids to a multiple of 64, as ModernBERT's."""
    return -(-TokenizerEncoder(str(tokenizer_dir), SEQ).vocab_size // 64) * 64


def _hf_dir(directory, pretrainer: BertPretrainer, tokenizer_dir, pooling: str = "mean") -> str:
    """A Hugging Face ModernBERT directory of `pretrainer` with the tokenizer.json and `classifier_pooling`."""
    ids = TokenizerEncoder(str(tokenizer_dir), SEQ).special_ids
    export_modernbert_checkpoint(
        pretrainer,
        str(directory),
        {"pad_token_id": ids["pad_id"], "cls_token_id": ids["cls_id"], "sep_token_id": ids["sep_id"]},
    )
    shutil.copy(tokenizer_dir / "tokenizer.json", directory / "tokenizer.json")
    path = directory / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "classifier_pooling": pooling}))
    return str(directory)


def _cut(a: list[int], b: list[int], budget: int) -> tuple[list[int], list[int]]:
    """google-research/bert's `_truncate_seq_pair`: one piece at a time off the longer segment (ties: b)."""
    a, b = list(a), list(b)
    while len(a) + len(b) > budget:
        (a if len(a) > len(b) else b).pop()
    return a, b


def test_pairs_are_the_tokenizers_own_ids_cut_longest_first(tokenizer_dir):
    encoder = TokenizerEncoder(str(tokenizer_dir), SEQ)
    theirs = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))  # its post-processor: [CLS] A [SEP] B [SEP]
    rng = np.random.default_rng(0)
    words = generated_words()
    a_texts = [" ".join(rng.choice(words, n)) for n in (1, 2, 3, 6, 12, 1, 9, 14)]
    b_texts = [" ".join(rng.choice(words, n)) for n in (1, 3, 2, 6, 1, 12, 9, 2)]
    features = {k: v.numpy() for k, v in encoder.encode(tf.constant(a_texts), tf.constant(b_texts)).items()}
    special = encoder.special_ids
    cut = 0
    for row, (a, b) in enumerate(zip(a_texts, b_texts)):
        a_ids, b_ids = (theirs.encode(t, add_special_tokens=False).ids for t in (a, b))
        kept_a, kept_b = _cut(a_ids, b_ids, SEQ - 3)
        expected = [special["cls_id"], *kept_a, special["sep_id"], *kept_b, special["sep_id"]]
        if (kept_a, kept_b) == (a_ids, b_ids):
            assert expected == theirs.encode(a, b).ids
        cut += (kept_a, kept_b) != (a_ids, b_ids)
        n, pad = len(expected), SEQ - len(expected)
        assert features["input_ids"][row].tolist() == expected + [special["pad_id"]] * pad
        assert features["input_mask"][row].tolist() == [1] * n + [0] * pad
        assert features["segment_ids"][row].tolist() == [0] * (len(kept_a) + 2) + [1] * (len(kept_b) + 1) + [0] * pad
    assert 0 < cut < len(a_texts)
    assert encoder.count_truncated(Examples("pairs.tsv", a_texts, b_texts)) == cut
    single = encoder.encode(tf.constant(a_texts[:3]))["input_ids"].numpy()
    assert [row[row != special["pad_id"]].tolist() for row in single] == [theirs.encode(a).ids for a in a_texts[:3]]
    encoder.segment_ids = False  # a model without a token-type table: ModernBERT's
    assert not encoder.encode(tf.constant(a_texts), tf.constant(b_texts))["segment_ids"].numpy().any()


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


@pytest.mark.parametrize("pooling", ["cls", "mean"])
@pytest.mark.parametrize("bias", [False, True])
def test_the_classifier_head_is_transformers_modernbert_head_in_numpy(pooling, bias):
    config = _modern(64, use_bias=bias, head_use_bias=bias)
    model = BertClassifier(BertEncoder(config), 3, dropout=0.0, pooling=pooling)
    randomize(model, seed=1, scale=0.2)
    rng = np.random.default_rng(2)
    mask = (np.arange(10)[None] < np.array([[10], [6], [3]])).astype(np.int32)
    batch = {"input_ids": rng.integers(5, 64, (3, 10)).astype(np.int32), "input_mask": mask}
    batch["segment_ids"] = np.zeros_like(mask)
    hidden = np.asarray(model.encoder(batch)["sequence_output"], np.float64)
    pooled = hidden[:, 0] if pooling == "cls" else (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)

    def weights(layer) -> list[np.ndarray]:
        return [np.asarray(w, np.float64) for w in layer.weights]

    dense = weights(model.head_dense)
    h = _gelu(pooled @ dense[0] + (dense[1] if bias else 0.0))
    norm = weights(model.head_norm)
    h = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + config.layer_norm_eps) * norm[0]
    h = h + (norm[1] if bias else 0.0)
    kernel, offset = weights(model.classifier)
    np.testing.assert_allclose(np.asarray(model(batch, training=False)), h @ kernel + offset, atol=2e-5)
    # Padding is neither attended to nor pooled.
    repadded = dict(batch, input_ids=np.where(mask > 0, batch["input_ids"], 7).astype(np.int32))
    np.testing.assert_allclose(model(repadded), model(batch), atol=1e-6)


def test_pooling_is_for_models_without_a_pooler_in_one_line():
    with pytest.raises(ConfigError, match=r"classifier_pooling=mean: a model with a pooler") as e:
        BertClassifier(BertEncoder(BertConfig.load("bert_tiny")), 2, pooling="mean")
    with pytest.raises(ConfigError, match=r"classifier_pooling is needed for a model without a pooler") as f:
        BertClassifier(BertEncoder(_modern(64)), 2)
    assert "\n" not in str(e.value) + str(f.value)


def test_a_modernbert_checkpoint_brings_its_tokenizer_and_pooling(tmp_path, tokenizer_dir):
    directory = _hf_dir(tmp_path / "hf", BertPretrainer(_modern(_table(tokenizer_dir))), tokenizer_dir)
    assert tokenizer_for(directory, "", "", None) == os.path.join(directory, "tokenizer.json")
    assert tokenizer_for(directory, "", "vocab.txt", None) is None  # a vocabulary given: WordPiece
    assert imported_checkpoint(directory).classifier_pooling == "mean"
    for args, needle in (
        (("tok", "vocab.txt", None), "data.tokenizer=tok and data.vocab_file=vocab.txt both say how to tokenize"),
        (("", "", True), "data.lower_case applies to a data.vocab_file; the normalizer of the tokenizer.json"),
    ):
        with pytest.raises(ConfigError, match=needle):
            tokenizer_for(directory, *args)
    with pytest.raises(MissingFileError, match=r"^data.tokenizer=nowhere/tokenizer.json is not there; give a"):
        tokenizer_for("", "nowhere/tokenizer.json", "", None)
    values = json.loads((tmp_path / "hf" / "config.json").read_text())
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**values, "classifier_pooling": "max"}))
    with pytest.raises(ConfigError, match=r"config.json: classifier_pooling='max' is not supported: choose one"):
        imported_checkpoint(directory)


# The task: a made-up word belongs to one of two groups. Pretraining text keeps each sentence within one group, so
# masked LM learns which words go together; fine-tuning labels sentences of a few words of each group, and the
# evaluation asks about the other words, which only a pretrained encoder has seen with their group.
SEEN = 6


def _groups() -> tuple[list[str], list[str]]:
    words = sorted(set(generated_words()))
    np.random.default_rng(3).shuffle(words)
    return words[: len(words) // 2], words[len(words) // 2 :]


def _sentences(rng: np.random.Generator, groups, labels, words: slice) -> list[str]:
    return [" ".join(rng.choice(groups[k][words], rng.integers(4, 9))) for k in labels]


def _pretrain(tokenizer_dir, steps: int = 400, batch: int = 64) -> BertPretrainer:
    """A tiny ModernBERT trained with masked LM (30% of the pieces, ModernBERT's rate) on sentences of one group."""
    encoder = TokenizerEncoder(str(tokenizer_dir), SEQ)
    encoder.segment_ids = False
    rng = np.random.default_rng(4)
    texts = _sentences(rng, _groups(), rng.integers(0, 2, 4096), slice(None))
    features = {k: v.numpy() for k, v in encoder.encode(tf.constant(texts)).items()}
    predictions = 8
    positions = np.zeros((len(texts), predictions), np.int32)
    weights = np.zeros((len(texts), predictions), np.float32)
    for row, length in enumerate(features["input_mask"].sum(1)):
        count = min(predictions, max(1, round(0.3 * (length - 2))))
        positions[row, :count] = np.sort(rng.choice(np.arange(1, length - 1), count, replace=False))
        weights[row, :count] = 1.0
    original = np.take_along_axis(features["input_ids"], positions, 1)
    features["masked_lm_ids"] = original * (weights > 0)
    masked = np.where(weights > 0, encoder.tokenizer.role_ids["mask"], original)
    np.put_along_axis(features["input_ids"], positions, masked, 1)  # the unused slots put [CLS] back
    features.update(masked_lm_positions=positions, masked_lm_weights=weights)
    dataset = tf.data.Dataset.from_tensor_slices(features).shuffle(4096, seed=0).repeat().batch(batch)
    keras.utils.set_random_seed(0)
    model = BertPretrainer(_modern(_table(tokenizer_dir)))
    model.compile(optimizer=keras.optimizers.Adam(2e-3))
    model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0)
    return model


def _task(directory) -> dict:
    """train.tsv of the first SEEN words of each group, dev.tsv of the others."""
    rng = np.random.default_rng(5)
    groups = _groups()
    files = {}
    for split, count, words in (("train", 64, slice(None, SEEN)), ("dev", 64, slice(SEEN, None))):
        labels = rng.integers(0, 2, count)
        rows = [[text, "ab"[k]] for text, k in zip(_sentences(rng, groups, labels, words), labels)]
        files[split] = write_tsv(directory / f"{split}.tsv", ["text", "group"], rows)
    return {
        "name": "tsv",
        "train_file": files["train"],
        "eval_file": files["dev"],
        "text_a_column": "text",
        "label_column": "group",
    }


def _finetune(directory, task: dict, **sections) -> tuple[dict, list[str]]:
    config = {
        "task": task,
        "data": {"seq_length": SEQ},
        "model": {"classifier_dropout": 0.0},
        "schedule": {"peak_learning_rate": 1e-3, "warmup_fraction": 0.1},
        "train": {"epochs": 4, "global_batch_size": 8, "eval_batch_size": 32},
    }
    for section, values in sections.items():
        config[section].update(values)
    path = directory / "finetune.yaml"
    path.write_text(yaml.safe_dump(config))
    lines = []
    summary = run_finetuning(
        load_finetune_config([str(path)]),
        str(directory / "run"),
        tf.distribute.get_strategy(),
        print_fn=lambda line, **_: lines.append(line),
    )
    return summary, lines


@pytest.fixture(scope="module")
def modern_run(tmp_path_factory, tokenizer_dir):
    """A ModernBERT pretrained here, as a Hugging Face directory, fine-tuned on the task by kbert-finetune."""
    tmp_path = tmp_path_factory.mktemp("modern")
    checkpoint = _hf_dir(tmp_path / "hf", _pretrain(tokenizer_dir), tokenizer_dir)
    task = _task(tmp_path)
    (tmp_path / "pretrained").mkdir()
    summary, lines = _finetune(tmp_path / "pretrained", task, train={"init_checkpoint": checkpoint})
    return tmp_path, checkpoint, task, summary, lines


@pytest.mark.slow
@pytest.mark.xdist_group("modern_run")  # one worker builds the shared run once
def test_a_pretrained_modernbert_fine_tunes_past_random_init_and_predicts_a_file(modern_run, tokenizer_dir):
    tmp_path, checkpoint, task, summary, lines = modern_run
    tokenizer = os.path.join(checkpoint, "tokenizer.json")
    assert f"tokenizer: {tokenizer} (a tokenizer.json: its own normalizer decides casing)." in lines
    assert "The classifier head (dense, activation, LayerNorm) starts from its masked-LM head's transform." in lines
    assert summary["config"]["data"]["tokenizer"] == tokenizer
    assert summary["config"]["model"]["classifier_pooling"] == "mean"  # the checkpoint's config.json
    assert summary["bert_config"]["vocab_size"] == _table(tokenizer_dir)  # the checkpoint's table, padded
    (tmp_path / "control").mkdir()
    control, _ = _finetune(
        tmp_path / "control",
        task,
        model={"bert": "modernbert_tiny", "overrides": SIZES, "classifier_pooling": "mean"},
        data={"tokenizer": str(tokenizer_dir)},
    )
    history = summary["epochs"]
    assert history[-1]["loss"] < history[0]["loss"]
    accuracy, chance = summary["eval"]["accuracy"], control["eval"]["accuracy"]
    print(f"eval accuracy on unseen words: pretrained {accuracy:.3f}, random init {chance:.3f}")
    assert accuracy >= 0.8 and accuracy >= chance + 0.15

    # kbert-predict labels a file from the run directory, as the run labelled it.
    run_dir = str(tmp_path / "pretrained" / "run")
    output = str(tmp_path / "labelled.tsv")
    predictor = open_predictor(run_dir)
    assert write_predictions(predictor, task["eval_file"], output, predictor.columns) == 64
    assert open(output).read() == open(os.path.join(run_dir, "predictions", "eval.tsv")).read()
    larger = write_tokenizer(tmp_path / "larger", MODERNBERT, 800, extra_special=tuple(f"<x{i}>" for i in range(300)))
    with pytest.raises(VocabularyError, match="--tokenizer=.* has .* tokens but the model of --model="):
        open_predictor(run_dir, tokenizer=str(larger))

    # The exports that take strings refuse it in one line, writing nothing.
    with pytest.raises(ConfigError, match=r"^--format=saved_model takes strings .* kbert-predict --model=") as e:
        export_classifier(load_run(run_dir), str(tmp_path / "served"))
    with pytest.raises(ConfigError, match=r"^--format=tf_hub: .* kbert-predict --model=RUN_DIR") as f:
        check_tokenization(checkpoint, "")
    assert "\n" not in str(e.value) + str(f.value) and not (tmp_path / "served").exists()


@pytest.mark.slow
@pytest.mark.spawns
@pytest.mark.xdist_group("modern_run")
def test_the_command_lines_predict_with_the_run_and_refuse_to_serve_it(modern_run):
    tmp_path, checkpoint, task, _, _ = modern_run
    run_dir, output = str(tmp_path / "pretrained" / "run"), str(tmp_path / "cli_labelled.tsv")
    args = [f"--model={run_dir}", f"--input_file={task['eval_file']}", f"--output_file={output}"]
    # All three command lines in one process (tests/cli_batch.py: one TensorFlow start), each as a fresh one.
    predicted, served, hub = run_tools(
        [
            ("predict", args),
            ("export", [f"--checkpoint={run_dir}", "--format=saved_model", f"--output_dir={tmp_path}/cli_served"]),
            ("export", [f"--checkpoint={checkpoint}", "--format=tf_hub", f"--output_dir={tmp_path}/hub"]),
        ]
    )
    assert predicted.returncode == 0, predicted.stderr
    assert open(output).read() == open(os.path.join(run_dir, "predictions", "eval.tsv")).read()
    assert_refused(served, "kbert-export", "--format=saved_model takes strings", f"kbert-predict --model={run_dir}")
    assert_refused(hub, "kbert-export", "--format=tf_hub: its preprocess", "kbert-predict --model=RUN_DIR")
    assert not (tmp_path / "cli_served").exists() and not (tmp_path / "hub").exists()
