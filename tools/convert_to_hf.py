"""The road to Hugging Face, run end to end: kbert-export's Google format, converted and loaded by `transformers`,
gives the same outputs as kbert's encoder.

    pip install "transformers>=4.40,<5" torch   # transformers 5 no longer reads TensorFlow checkpoints
    python tools/convert_to_hf.py --checkpoint=runs/bert_base --vocab_file=vocab.txt --work_dir=/tmp/hf_check

Runs `kbert-export --format=google` into WORK_DIR/google, converts that checkpoint with transformers' own TF
reader (`load_tf_weights_in_bert`, what its `convert` command calls) into a `BertForPreTraining`, saves it as a
Hugging Face model directory WORK_DIR/hf (config.json, weights, vocab.txt), loads it back with
`BertModel.from_pretrained`, and prints the largest |kbert - transformers| difference of the sequence and pooled
outputs on a sample batch. A `gelu_approximate` model is saved with Hugging Face's name for it, `gelu_new`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

flags.DEFINE_string("checkpoint", None, "A kbert model_dir or checkpoint, or a Google TF1 checkpoint.", required=True)
flags.DEFINE_string("vocab_file", None, "The checkpoint's WordPiece vocabulary.", required=True)
flags.DEFINE_string("bert_config", "", "A preset name or bert_config.json, where the checkpoint has none.")
flags.DEFINE_string("work_dir", "", "Where the Google export and the Hugging Face directory go (default: a temp dir).")
FLAGS = flags.FLAGS

# Hugging Face's name for kbert's tanh GELU; every other kbert activation (the erf "gelu" included) has its name.
HF_NAMES = {"gelu_approximate": "gelu_new"}


def export_google(google_dir: str) -> None:
    """kbert-export --format=google, as a user runs it."""
    command = [
        sys.executable,
        "-m",
        "kbert.cli.export",
        f"--checkpoint={FLAGS.checkpoint}",
        f"--vocab_file={FLAGS.vocab_file}",
        "--format=google",
        f"--output_dir={google_dir}",
    ]
    if FLAGS.bert_config:
        command.append(f"--bert_config={FLAGS.bert_config}")
    subprocess.run(command, check=True)


def convert(google_dir: str, hf_dir: str) -> None:
    """The Google checkpoint -> a Hugging Face model directory, through transformers' own TF reader."""
    import transformers

    with open(os.path.join(google_dir, "bert_config.json")) as f:
        bert_config = json.load(f)
    bert_config["hidden_act"] = HF_NAMES.get(bert_config["hidden_act"], bert_config["hidden_act"])
    config = transformers.BertConfig(**bert_config)
    model = transformers.BertForPreTraining(config)
    transformers.models.bert.modeling_bert.load_tf_weights_in_bert(
        model, config, os.path.join(google_dir, "bert_model.ckpt")
    )
    model.save_pretrained(hf_dir)
    shutil.copy(os.path.join(google_dir, "vocab.txt"), hf_dir)


def max_difference(hf_dir: str) -> float:
    """Largest |kbert - transformers| over the sequence (real tokens) and pooled outputs of a sample batch."""
    import torch
    import transformers

    from kbert.finetuning.exporting import checkpoint_encoder
    from kbert.finetuning.hub_export import output_difference, sample_batch

    encoder = checkpoint_encoder(FLAGS.checkpoint, FLAGS.bert_config, FLAGS.vocab_file)
    batch = sample_batch(encoder)
    model = transformers.BertModel.from_pretrained(hf_dir).eval()
    with torch.no_grad():
        theirs = model(
            input_ids=torch.tensor(batch["input_ids"], dtype=torch.long),
            attention_mask=torch.tensor(batch["input_mask"], dtype=torch.long),
            token_type_ids=torch.tensor(batch["segment_ids"], dtype=torch.long),
        )
    return output_difference(
        batch,
        encoder(batch, training=False),
        {"sequence_output": theirs.last_hidden_state.numpy(), "pooled_output": theirs.pooler_output.numpy()},
    )


def main(argv):
    del argv
    work_dir = FLAGS.work_dir or tempfile.mkdtemp(prefix="convert_to_hf_")
    google_dir, hf_dir = os.path.join(work_dir, "google"), os.path.join(work_dir, "hf")
    export_google(google_dir)
    convert(google_dir, hf_dir)
    print(f"Hugging Face model directory: {hf_dir}")
    print(f"largest |kbert - transformers BertModel| output difference on a sample batch: {max_difference(hf_dir):.2e}")


if __name__ == "__main__":
    app.run(main)
