"""`kbert-export`: a kbert or Google BERT checkpoint as a keras-hub preset or a Google TF1 checkpoint.

`--format=keras_hub` writes a directory that `keras_hub.models.BertBackbone.from_preset(DIR)` and
`keras_hub.models.BertTextClassifier.from_preset(DIR, num_classes=N)` load, tokenizer included (needs the
`kbert[hub]` extra). keras-hub computes only the tanh GELU: an erf-GELU model (`hidden_act: gelu`) is refused
unless `--allow_gelu_approximation`. `--format=google` writes `bert_model.ckpt`, `bert_config.json` and `vocab.txt`,
the input of Hugging Face's converter (docs/finetuning.md).

Example:

    kbert-export --checkpoint=runs/bert_tiny --bert_config=configs/models/bert_tiny.json --vocab_file=vocab.txt \\
        --format=keras_hub --output_dir=export/bert_tiny_en
"""

from __future__ import annotations

from absl import app, flags

from kbert.cli import entry

PROGRAM = "kbert-export"
FORMATS = ("keras_hub", "google")
FLAGS = flags.FLAGS
flags.DEFINE_string("checkpoint", None, "A kbert pretraining model_dir or checkpoint, an MSLT run or stage export, "
                                        "or a Google TF1 checkpoint (bert_model.ckpt).")
flags.DEFINE_string("bert_config", "", "A bert_config.json or preset name, where none comes with the checkpoint.")
flags.DEFINE_string("vocab_file", None, "The vocabulary the model was pretrained with.")
flags.DEFINE_enum("format", "keras_hub", list(FORMATS), "keras_hub: a keras-hub preset; google: a TF1 checkpoint.")
flags.DEFINE_string("output_dir", None, "Where to write the export.")
flags.DEFINE_bool("lower_case", True, "Whether the vocabulary is uncased (the tokenizer lower-cases and strips "
                                      "accents).")
flags.DEFINE_bool("allow_gelu_approximation", False,
                  "Export an erf-GELU model to keras-hub, whose BertBackbone computes the tanh approximation; the "
                  "difference measured on a sample batch is printed.")
for _name in ("checkpoint", "vocab_file", "output_dir"):
    flags.mark_flag_as_required(_name)


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    # Imported here so `--help` and flag errors come back without loading TensorFlow.
    from kbert.finetuning import hub_export
    from kbert.finetuning.exporting import checkpoint_encoder, export_google

    encoder = checkpoint_encoder(FLAGS.checkpoint, FLAGS.bert_config, FLAGS.vocab_file)
    if FLAGS.format == "google":
        path = export_google(encoder, FLAGS.vocab_file, FLAGS.output_dir)
        print(f"Wrote {path} (the encoder, Google's names), bert_config.json and vocab.txt.")
        return
    backbone = hub_export.export_preset(encoder, FLAGS.vocab_file, FLAGS.output_dir, FLAGS.lower_case,
                                        FLAGS.allow_gelu_approximation)
    difference = hub_export.max_difference(encoder, backbone)
    note = " (erf GELU exported as tanh GELU)" if encoder.config.hidden_act == "gelu" else ""
    print(f"Wrote the keras-hub preset {FLAGS.output_dir}; largest |kbert - keras-hub| output difference on a "
          f"sample batch: {difference:.3g}{note}.")


def run() -> None:
    entry.run(main, PROGRAM)


if __name__ == "__main__":
    run()
