"""`kbert-predict`: predictions for a TSV, CSV or JSONL file from a kbert-finetune run or its serving SavedModel.

The file's texts are read from the training task's columns (GLUE's, or `task.text_a_column` and
`task.text_b_column`) unless the flags name others, and tokenized as the run was: its vocabulary, or its
tokenizer.json outside the graph (a run that tokenizes so, a ModernBERT's, predicts from its run directory only).
The output is the run's own `predictions/*.tsv` format, `index<TAB>prediction`, one row per input row. The file
streams through in batches, so it may be of any size.

Example:

    kbert-predict --model=runs/sst2 --input_file=reviews.tsv --output_file=reviews_predicted.tsv
    kbert-predict --model=export/sst2/1 --input_file=reviews.jsonl --file_format=jsonl --text_a_column=text \\
        --output_file=reviews_predicted.tsv
"""

from __future__ import annotations

from absl import app, flags

from kbert.cli import entry

PROGRAM = "kbert-predict"
FLAGS = flags.FLAGS
flags.DEFINE_string(
    "model", None, "A kbert-finetune model_dir, or the SavedModel kbert-export --format=saved_model wrote from one."
)
flags.DEFINE_string("input_file", None, "The texts to predict: TSV, CSV or JSONL.")
flags.DEFINE_string("output_file", None, "Where to write index<TAB>prediction rows.")
flags.DEFINE_enum("file_format", None, ["tsv", "csv", "jsonl"], "The input's format (default: the training task's).")
flags.DEFINE_string(
    "text_a_column", "", "The input's first text column, by header name (default: the training task's)."
)
flags.DEFINE_string("text_b_column", "", "The input's second text column, for a sentence-pair model.")
flags.DEFINE_integer("batch_size", 32, "Rows per prediction batch; memory is bounded by it.", lower_bound=1)
flags.DEFINE_string("vocab_file", "", "A run's vocabulary, where its data.vocab_file has moved.")
flags.DEFINE_string("tokenizer", "", "A run's tokenizer.json (or its directory), where its data.tokenizer has moved.")
for _name in ("model", "input_file", "output_file"):
    flags.mark_flag_as_required(_name)


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    # Imported here so `--help` and flag errors come back without loading TensorFlow.
    from kbert.finetuning.serving.predict import open_predictor, with_overrides, write_predictions

    predictor = open_predictor(FLAGS.model, FLAGS.vocab_file, FLAGS.tokenizer)
    columns = with_overrides(predictor.columns, FLAGS.file_format or "", FLAGS.text_a_column, FLAGS.text_b_column)
    count = write_predictions(predictor, FLAGS.input_file, FLAGS.output_file, columns, FLAGS.batch_size)
    print(f"Wrote {count} predictions for {FLAGS.input_file} to {FLAGS.output_file}.")


def run() -> None:
    entry.run(main, PROGRAM)


if __name__ == "__main__":
    run()
