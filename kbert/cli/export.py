"""`kbert-export`: a kbert, Google, Hugging Face or keras-hub BERT checkpoint as a keras-hub preset, a Google TF1
checkpoint, a Hugging Face BERT directory or TF Hub-style SavedModels; a fine-tuning run as one serving SavedModel.

`--format=keras_hub` writes a directory that `keras_hub.models.BertBackbone.from_preset(DIR)` and
`keras_hub.models.BertTextClassifier.from_preset(DIR, num_classes=N)` load, tokenizer included (needs the
`kbert[hub]` extra). keras-hub computes only the tanh GELU: an erf-GELU model (`hidden_act: gelu`) is refused
unless `--allow_gelu_approximation`; a masked-LM head that computes keras-hub's (a model imported from a keras-hub
BertMaskedLM) goes with it as the BertMaskedLM task. `--format=google` writes `bert_model.ckpt`, `bert_config.json`
and `vocab.txt`, the input of Hugging Face's converter. `--format=hf` writes `config.json`, `model.safetensors`,
`vocab.txt` and `tokenizer_config.json` in the layout of `--hf_architecture` (BertForPreTraining: everything;
BertForMaskedLM; BertModel), which `transformers` loads directly. `--format=tf_hub` writes `preprocess/` and
`encoder/`, Model Garden's TF Hub interface. `--format=saved_model` takes a kbert-finetune model_dir and writes a
SavedModel that takes strings and returns labels (or scores). The two formats that take strings tokenize inside the
SavedModel, so they refuse a model that tokenizes with a tokenizer.json (a ModernBERT's): kbert-predict labels files
with it from its run directory. See docs/finetuning.md.

Example:

    kbert-export --checkpoint=runs/bert_tiny --bert_config=configs/models/bert_tiny.json --vocab_file=vocab.txt \\
        --format=keras_hub --output_dir=export/bert_tiny_en
    kbert-export --checkpoint=runs/continued --format=hf --hf_architecture=BertForMaskedLM --output_dir=export/hf
    kbert-export --checkpoint=runs/sst2 --format=saved_model --output_dir=export/sst2/1
"""

from __future__ import annotations

import os

from absl import app, flags

from kbert.choices import HF_ARCHITECTURES
from kbert.cli import entry

PROGRAM = "kbert-export"
FORMATS = ("keras_hub", "google", "hf", "tf_hub", "saved_model")
# What a fine-tuning run fixes for --format=saved_model.
RUN_FLAGS = ("bert_config", "lower_case", "seq_length")
FLAGS = flags.FLAGS
flags.DEFINE_string(
    "checkpoint",
    None,
    "A kbert pretraining model_dir or checkpoint, an MSLT run or stage export, "
    "a Google TF1 checkpoint (bert_model.ckpt), a Hugging Face BERT directory "
    "or a keras-hub preset; for --format=saved_model a kbert-finetune "
    "model_dir.",
)
flags.DEFINE_string("bert_config", "", "A bert_config.json or preset name, where none comes with the checkpoint.")
flags.DEFINE_string(
    "vocab_file",
    None,
    "The vocabulary the model was pretrained with (a Hugging Face or keras-hub "
    "checkpoint brings its own); for --format=saved_model only where the run's "
    "own has moved.",
)
flags.DEFINE_string(
    "tokenizer",
    "",
    "--format=hf: the Hugging Face tokenizer.json (or its directory) a model was pretrained with, in place of "
    "--vocab_file (data.tokenizer's); it is copied beside the weights with the config files of its directory. A "
    "Hugging Face ModernBERT checkpoint brings its own.",
)
flags.DEFINE_enum(
    "format",
    "keras_hub",
    list(FORMATS),
    "keras_hub: a keras-hub preset; google: a TF1 checkpoint; hf: a Hugging Face BERT directory; "
    "tf_hub: preprocess/ and encoder/ SavedModels; saved_model: a fine-tuned classifier taking "
    "strings.",
)
flags.DEFINE_enum(
    "hf_architecture",
    "BertForPreTraining",
    list(HF_ARCHITECTURES),
    "--format=hf: the weights written: BertForPreTraining (encoder, pooler, both heads; every BERT "
    "class loads it), BertForMaskedLM (no pooler, no next-sentence head) or BertModel (no heads).",
)
flags.DEFINE_string("output_dir", None, "Where to write the export: a new or empty folder (see --overwrite).")
flags.DEFINE_bool(
    "overwrite",
    False,
    "Write into a folder that holds files, over the export's files of the same names; nothing else there is deleted.",
)
flags.DEFINE_bool(
    "lower_case",
    None,
    "Whether the tokenizer lower-cases and strips accents (an uncased vocabulary); unset: what a Hugging Face or "
    "keras-hub checkpoint's tokenizer config says, else true.",
)
flags.DEFINE_integer(
    "seq_length",
    None,
    "--format=tf_hub: the preprocessor's default packed length (default 128, or the model's max positions if fewer).",
)
flags.DEFINE_bool(
    "allow_gelu_approximation",
    False,
    "Export an erf-GELU model to keras-hub, whose BertBackbone computes the tanh approximation; the "
    "difference measured on a sample batch is printed.",
)
for _name in ("checkpoint", "output_dir"):
    flags.mark_flag_as_required(_name)


def _check_flags() -> None:
    from kbert.errors import ConfigError

    if FLAGS.tokenizer and FLAGS.format != "hf":
        raise ConfigError(
            f"--tokenizer is --format=hf's (it writes the tokenizer beside the weights); --format={FLAGS.format} "
            "takes a WordPiece --vocab_file."
        )
    if FLAGS.tokenizer and FLAGS.vocab_file:
        raise ConfigError("--tokenizer and --vocab_file both name the model's tokenizer; give one.")
    if FLAGS.format == "saved_model":
        given = [f"--{name}" for name in RUN_FLAGS if FLAGS[name].present]
        if given:
            raise ConfigError(
                f"--format=saved_model takes the model, its lower-casing and seq_length from the "
                f"fine-tuning run; drop {', '.join(given)}."
            )


def _encoder_export() -> str:
    """keras_hub, google, hf or tf_hub: the line to print."""
    from kbert.finetuning import hub_export
    from kbert.finetuning.exporting import FLAG_KEYS, checkpoint_pretrainer, export_google, export_hf
    from kbert.finetuning.serving.tf_hub_export import check_tokenization, export_tf_hub
    from kbert.finetuning.vocabulary import casing_for, checkpoint_tokenizer, vocab_file_for
    from kbert.modeling.keras_hub_checkpoint import computes_keras_hub_head

    if FLAGS.format == "tf_hub":
        check_tokenization(FLAGS.checkpoint, FLAGS.vocab_file or "")
    brought = None if FLAGS.vocab_file or FLAGS.format != "hf" else checkpoint_tokenizer(FLAGS.checkpoint)
    tokenizer = FLAGS.tokenizer or (os.path.dirname(brought) if brought else "")  # the directory: its configs go too
    if tokenizer:  # the casing is the tokenizer's own
        pretrainer, has_mlm = checkpoint_pretrainer(FLAGS.checkpoint, FLAGS.bert_config, "", tokenizer)
        path = export_hf(pretrainer, "", FLAGS.output_dir, FLAGS.hf_architecture, tokenizer=tokenizer)
        architecture = "ModernBertForMaskedLM" if pretrainer.nsp_head is None else FLAGS.hf_architecture
        return f"Wrote {path} ({architecture}), config.json and the tokenizer of {tokenizer}."
    vocab = vocab_file_for(FLAGS.checkpoint, FLAGS.vocab_file or "", FLAG_KEYS)
    casing = casing_for(FLAGS.checkpoint, FLAGS.lower_case, FLAG_KEYS)
    if FLAGS.format != "google":  # Google's format records no casing
        print(casing.line, flush=True)
    pretrainer, has_mlm = checkpoint_pretrainer(FLAGS.checkpoint, FLAGS.bert_config, vocab)
    encoder = pretrainer.encoder
    if FLAGS.format == "google":
        path = export_google(encoder, vocab, FLAGS.output_dir)
        return f"Wrote {path} (the encoder, Google's names), bert_config.json and vocab.txt."
    if FLAGS.format == "hf":
        path = export_hf(pretrainer, vocab, FLAGS.output_dir, FLAGS.hf_architecture, casing.lower_case)
        head = (
            ""
            if has_mlm or FLAGS.hf_architecture == "BertModel"
            else " (the checkpoint has no masked-LM head: the one written is untrained)"
        )
        architecture = "ModernBertForMaskedLM" if pretrainer.nsp_head is None else FLAGS.hf_architecture
        return f"Wrote {path} ({architecture}), config.json, vocab.txt, tokenizer.json and tokenizer_config.json{head}."
    if FLAGS.format == "tf_hub":
        difference = export_tf_hub(pretrainer, has_mlm, vocab, FLAGS.output_dir, casing.lower_case, FLAGS.seq_length)
        mlm = "encoder.mlm included" if has_mlm else "no masked-LM head in the checkpoint, so no encoder.mlm"
        return (
            f"Wrote {FLAGS.output_dir}/preprocess and {FLAGS.output_dir}/encoder ({mlm}); largest |kbert - "
            f"SavedModel| output difference on sample texts: {difference:.3g}."
        )
    task = has_mlm and computes_keras_hub_head(pretrainer.config)
    backbone = hub_export.export_preset(
        encoder,
        vocab,
        FLAGS.output_dir,
        casing.lower_case,
        FLAGS.allow_gelu_approximation,
        masked_lm=pretrainer if task else None,
    )
    difference = hub_export.max_difference(encoder, backbone)
    note = " (erf GELU exported as tanh GELU)" if encoder.config.hidden_act == "gelu" else ""
    note += ", with its BertMaskedLM task" if task else ""
    return (
        f"Wrote the keras-hub preset {FLAGS.output_dir}; largest |kbert - keras-hub| output difference on a "
        f"sample batch: {difference:.3g}{note}."
    )


def _classifier_export() -> str:
    from kbert.finetuning.serving.classifier_export import export_classifier, text_inputs
    from kbert.finetuning.serving.finetuned_run import load_run

    run = load_run(FLAGS.checkpoint, FLAGS.vocab_file or "")
    difference = export_classifier(run, FLAGS.output_dir)
    inputs = ", ".join(spec.name for spec in text_inputs(run.columns.text_b is not None))
    outputs = "score" if run.label_names is None else f"probabilities, label_id, label ({', '.join(run.label_names)})"
    return (
        f"Wrote the serving SavedModel {FLAGS.output_dir}: {inputs} -> {outputs}; largest |kbert - SavedModel| "
        f"difference on sample texts: {difference:.3g}."
    )


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    _check_flags()
    # Imported here so `--help` and flag errors come back without loading TensorFlow.
    from kbert.finetuning.exporting import check_output_dir

    check_output_dir(FLAGS.output_dir, FLAGS.overwrite)
    print(_classifier_export() if FLAGS.format == "saved_model" else _encoder_export())


def run() -> None:
    entry.run(main, PROGRAM)


if __name__ == "__main__":
    run()
