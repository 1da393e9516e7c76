"""The vocabulary and lower-casing of an imported checkpoint (Hugging Face `tokenizer_config.json`, keras-hub
`tokenizer.json`): taken where the user sets none, said in one line, a contradiction refused in one line before
training; a fine-tuning run records what it took, so kbert-predict and kbert-export of the run use it."""

import json
import os
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf
from cli_batch import run_batch
from finetuning_fixtures import write_config, write_tsv
from imported_fixtures import HF_CONFIG, hf_tensors, write_hf, write_keras_hub_preset

from kbert.errors import ConfigError
from kbert.finetuning import load_finetune_config, run_finetuning
from kbert.finetuning.exporting import FLAG_KEYS
from kbert.finetuning.runner import prepare
from kbert.finetuning.serving.classifier_export import metadata
from kbert.finetuning.serving.finetuned_run import load_run
from kbert.finetuning.serving.predict import open_predictor
from kbert.finetuning.vocabulary import casing_for, vocab_file_for

CASED = {"tokenizer_class": "BertTokenizer", "do_lower_case": False}


def _pieces(encoder, text: str) -> list[str]:
    """The word pieces `encoder` makes of `text`: a cased one makes [UNK] of `W1` (the vocabulary is w0, w1, ...)."""
    return [encoder.vocab[i] for i in encoder.tokenize(tf.constant([text])).numpy()[0]]


def test_a_cased_hf_directory_brings_its_vocabulary_and_casing(tmp_path):
    hf = write_hf(tmp_path / "hf", tokenizer=CASED)
    assert vocab_file_for(hf, "") == os.path.join(hf, "vocab.txt")
    assert vocab_file_for(hf, "mine.txt") == "mine.txt"
    casing = casing_for(hf, None)
    assert casing.lower_case is False
    assert casing.line == f"lower_case: false, from {hf}/tokenizer_config.json."
    assert casing_for(hf, False).line == "lower_case: false, set by data.lower_case."


@pytest.mark.parametrize("keys, key", [(None, "data.lower_case"), (FLAG_KEYS, "--lower_case")])
def test_a_lower_case_that_contradicts_the_checkpoint_is_one_line(tmp_path, keys, key):
    hf = write_hf(tmp_path / "hf", tokenizer=CASED)
    with pytest.raises(ConfigError) as raised:
        casing_for(hf, True, *([keys] if keys else []))
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"{key}=true contradicts {hf}/tokenizer_config.json (do_lower_case: false)")
    assert message.endswith(f"leave {key} unset to take the checkpoint's casing.")


def test_without_do_lower_case_the_default_is_taken_and_said(tmp_path):
    hf = write_hf(tmp_path / "hf", tokenizer={"tokenizer_class": "BertTokenizer"})
    casing = casing_for(hf, None)
    assert casing.lower_case is True
    assert casing.line == f"lower_case: true, the default: {hf}/tokenizer_config.json has no do_lower_case."
    assert casing_for(hf, False).lower_case is False  # nothing to contradict
    bare = write_hf(tmp_path / "bare")
    assert casing_for(bare, None).line == f"lower_case: true, the default: {bare} has no tokenizer_config.json."
    assert casing_for("", None).line == (
        "lower_case: true, the default (set data.lower_case=false for a cased vocabulary)."
    )
    assert casing_for(str(tmp_path / "kbert_run"), None, FLAG_KEYS).line == (
        f"lower_case: true, the default: {tmp_path}/kbert_run holds no tokenizer config (set "
        "--lower_case=false for a cased vocabulary)."
    )


def test_a_tokenizer_config_that_is_not_a_bool_and_a_missing_vocabulary_are_one_line(tmp_path):
    hf = write_hf(tmp_path / "hf", tokenizer={"do_lower_case": "no"})
    with pytest.raises(ConfigError, match=r"tokenizer_config.json: do_lower_case='no' must be true or false\.$"):
        casing_for(hf, None)
    novocab = write_hf(tmp_path / "novocab", vocab=False)
    with pytest.raises(ConfigError, match=f"^--vocab_file is not set and --checkpoint={novocab} brings none: give"):
        vocab_file_for(novocab, "", FLAG_KEYS)
    with pytest.raises(ConfigError, match=r"^data.vocab_file is not set: give the vocabulary"):
        vocab_file_for("", "")


def test_a_keras_hub_preset_brings_its_tokenizers_lowercase(tmp_path):
    pytest.importorskip("keras_hub")
    from kbert.finetuning.hub_export import export_preset
    from kbert.modeling import BertEncoder
    from kbert.modeling.imported_checkpoint import imported_checkpoint

    preset = str(tmp_path / "preset")
    write_keras_hub_preset(preset, masked_lm=False)  # keras-hub's BertTokenizer: lowercase false by default
    assert vocab_file_for(preset, "") == os.path.join(preset, "assets", "tokenizer", "vocabulary.txt")
    assert casing_for(preset, None).line == f"lower_case: false, from {preset}/tokenizer.json."
    with pytest.raises(ConfigError, match=r"tokenizer.json \(lowercase: false\)"):
        casing_for(preset, True)
    source = imported_checkpoint(preset)
    export_preset(BertEncoder(source.config), source.vocab_file, str(tmp_path / "uncased"), lower_case=True)
    assert casing_for(str(tmp_path / "uncased"), None).lower_case is True


def _task_config(tmp_path, hf, **data) -> str:
    rows = [["w1 w2", 0], ["w3 w4", 1]] * 4
    write_tsv(tmp_path / "t.tsv", ["text", "y"], rows)
    task = {
        "name": "tsv",
        "train_file": str(tmp_path / "t.tsv"),
        "eval_file": str(tmp_path / "t.tsv"),
        "text_a_column": "text",
        "label_column": "y",
    }
    return write_config(
        tmp_path / "c.yaml",
        task=task,
        model={"bert": "", "overrides": {}},  # the checkpoint's
        data=data,
        train={"init_checkpoint": hf, "epochs": 1, "global_batch_size": 4},
    )


@pytest.fixture(scope="module")
def cased_run(tmp_path_factory):
    """One epoch from a cased Hugging Face directory, no data.vocab_file, no data.lower_case."""
    tmp = tmp_path_factory.mktemp("cased")
    hf = write_hf(tmp / "hf", tokenizer=CASED)
    lines = []
    try:
        summary = run_finetuning(
            load_finetune_config([_task_config(tmp, hf)]),
            str(tmp / "run"),
            tf.distribute.get_strategy(),
            print_fn=lambda line, **_: lines.append(line),
        )
    finally:
        keras.mixed_precision.set_global_policy("float32")
    return tmp, hf, summary, lines


@pytest.mark.slow
@pytest.mark.xdist_group("cased_run")  # one worker builds the shared run once
def test_finetuning_from_an_hf_directory_trains_with_its_vocabulary_and_casing(cased_run):
    tmp, hf, summary, lines = cased_run
    assert f"lower_case: false, from {hf}/tokenizer_config.json." in lines
    assert summary["epochs"] and "accuracy" in summary["eval"]
    recorded = json.load(open(tmp / "run" / "finetune_config.json"))["data"]
    assert recorded["lower_case"] is False and recorded["vocab_file"] == os.path.join(hf, "vocab.txt")
    assert summary["config"]["data"] == recorded


@pytest.mark.slow
@pytest.mark.xdist_group("cased_run")
def test_predict_and_export_of_the_run_use_its_casing(cased_run):
    tmp, _, _, _ = cased_run
    run = load_run(str(tmp / "run"))
    assert run.config.data.lower_case is False and _pieces(run.encoder, "w1 W1") == ["w1", "[UNK]"]
    assert metadata(run)["lower_case"] is False  # the serving SavedModel's kbert.json
    predictor = open_predictor(str(tmp / "run"))
    assert _pieces(predictor.run.encoder, "w1 W1") == ["w1", "[UNK]"]
    # A run written before the casing was taken from the checkpoint: its recorded value holds, unchecked.
    old = tmp / "old_run"
    shutil.copytree(tmp / "run", old)
    config = json.load(open(old / "finetune_config.json"))
    config["data"]["lower_case"] = True
    (old / "finetune_config.json").write_text(json.dumps(config))
    assert _pieces(load_run(str(old)).encoder, "w1 W1") == ["w1", "w1"]


def test_a_contradicting_lower_case_stops_finetuning_before_anything_is_written(tmp_path):
    hf = write_hf(tmp_path / "hf", tokenizer=CASED)
    config = load_finetune_config([_task_config(tmp_path, hf, lower_case=True)])
    with pytest.raises(ConfigError, match=r"^data.lower_case=true contradicts .*tokenizer_config.json"):
        run_finetuning(config, str(tmp_path / "run"), tf.distribute.get_strategy(), print_fn=lambda *a, **k: None)
    assert not os.path.exists(tmp_path / "run")
    lowered = prepare(load_finetune_config([_task_config(tmp_path, write_hf(tmp_path / "plain"))]))
    assert lowered.casing.lower_case is True and _pieces(lowered.encoder, "w1 W1") == ["w1", "w1"]


@pytest.mark.spawns
def test_kbert_export_takes_the_checkpoints_casing_or_refuses_a_contradiction_and_gives_back_the_hf_layout(tmp_path):
    """Three kbert-export command lines in one process, each as a fresh process would run it: a cased checkpoint's
    export, a contradicting --lower_case refused, and a BertForMaskedLM given back in its own Hugging Face layout
    (the round trip of tests/test_continue_pretraining.py's continued checkpoints, sharing this process)."""
    from safetensors.numpy import load_file

    hf = write_hf(tmp_path / "hf", tokenizer=CASED)
    tensors = hf_tensors(HF_CONFIG, architecture="BertForMaskedLM")
    masked_lm = write_hf(tmp_path / "masked_lm", tensors=tensors)
    export = [f"--checkpoint={hf}", "--format=hf"]
    result, refused, layout = run_batch(
        "export",
        [
            export + [f"--output_dir={tmp_path}/out"],
            export + [f"--output_dir={tmp_path}/again", "--lower_case"],
            [
                f"--checkpoint={masked_lm}",
                "--format=hf",
                "--hf_architecture=BertForMaskedLM",
                f"--output_dir={tmp_path}/layout",
            ],
        ],
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.splitlines()[0] == f"lower_case: false, from {hf}/tokenizer_config.json."
    assert json.load(open(tmp_path / "out" / "tokenizer_config.json"))["do_lower_case"] is False
    assert refused.returncode == 1, refused.stdout[-3000:] + refused.stderr[-3000:]
    errors = [line for line in refused.stderr.splitlines() if "kbert-export" in line]
    assert errors == [
        f"kbert-export: error: --lower_case=true contradicts {hf}/tokenizer_config.json (do_lower_case: false), "
        f"the tokenizer of --checkpoint={hf}; leave --lower_case unset to take the checkpoint's casing."
    ]
    assert not os.path.exists(tmp_path / "again")

    assert layout.returncode == 0, layout.stdout[-3000:] + layout.stderr[-3000:]
    assert "Wrote" in layout.stdout and "BertForMaskedLM" in layout.stdout
    out = tmp_path / "layout"
    back = load_file(str(out / "model.safetensors"))
    assert sorted(back) == sorted(tensors) and all(np.array_equal(back[n], tensors[n]) for n in tensors)
    assert json.load(open(out / "config.json"))["architectures"] == ["BertForMaskedLM"]
    assert open(out / "vocab.txt").read() == open(os.path.join(masked_lm, "vocab.txt")).read()
