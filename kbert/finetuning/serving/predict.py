"""`kbert-predict`: predictions for a TSV, CSV or JSONL file from a fine-tuning run or from its serving SavedModel.

Invariant: the file is read, predicted and written one batch at a time, so memory is bounded by `batch_size` rows
whatever the file's size. The output is the run's own `predictions/eval.tsv` format (`index<TAB>prediction`, the
index the 0-based data row, the prediction the label's name or the regression value), written to a temporary file
renamed at the end: a failure leaves no partial output. A row that lacks a text column stops the run with one line
naming the file and the line.

Example:

```python
predictor = open_predictor("runs/sst2")             # or the SavedModel of kbert-export --format=saved_model
write_predictions(predictor, "new.tsv", "new_predictions.tsv", predictor.columns, batch_size=32)
```
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator, Sequence

import tensorflow as tf

from kbert.errors import ConfigError, InputDataError, MissingFileError
from kbert.finetuning.files import Row, empty_file_error, stream_columns
from kbert.finetuning.predictions import HEADER, shown_predictions, submission_lines
from kbert.finetuning.serving.classifier_export import METADATA, text_inputs
from kbert.finetuning.serving.finetuned_run import FinetunedRun, load_run
from kbert.finetuning.tasks import TextColumns


class RunPredictor:
    """kbert's own path: the run's tokenizer (WordPiece in the graph, or its tokenizer.json outside it) and its
    classifier's `predict_on_batch`."""

    def __init__(self, run: FinetunedRun):
        self.run = run
        self.columns = run.columns

    def __call__(self, texts: Sequence[list[str]]) -> list[str]:
        logits = self.run.model.predict_on_batch(self.run.encoder.encode(*(tf.constant(t) for t in texts)))
        return shown_predictions(logits, self.run.label_names)


class SavedModelPredictor:
    """The serving SavedModel's `serving_default` signature, as TF Serving would call it."""

    def __init__(self, path: str):
        metadata = os.path.join(path, METADATA)
        if not tf.io.gfile.exists(metadata):
            raise MissingFileError(
                f"--model={path}: a SavedModel without {METADATA}; give a folder written by "
                "kbert-export --format=saved_model, or the fine-tuning run itself."
            )
        with tf.io.gfile.GFile(metadata) as f:
            self.columns = TextColumns(**json.load(f)["columns"])
        self.serve = tf.saved_model.load(path).signatures["serving_default"]

    def __call__(self, texts: Sequence[list[str]]) -> list[str]:
        specs = text_inputs(self.columns.text_b is not None)
        outputs = self.serve(**{spec.name: tf.constant(t) for spec, t in zip(specs, texts)})
        if "label" in outputs:
            return [label.decode() for label in outputs["label"].numpy()]
        return shown_predictions(outputs["score"].numpy()[:, None], None)


def open_predictor(path: str, vocab_file: str = "", tokenizer: str = ""):
    """A `SavedModelPredictor` for a SavedModel folder, else a `RunPredictor` for a fine-tuning run (its
    vocabulary replaced by `vocab_file`, its tokenizer.json by `tokenizer`, if given).

    Raises:
      KbertError: neither a kbert serving SavedModel nor a finished fine-tuning run (see `load_run`).
    """
    if tf.io.gfile.exists(os.path.join(path, "saved_model.pb")):
        return SavedModelPredictor(path)
    return RunPredictor(load_run(path, vocab_file, flag="--model", tokenizer=tokenizer))


def with_overrides(columns: TextColumns, file_format: str = "", text_a: str = "", text_b: str = "") -> TextColumns:
    """The training task's columns with the flags' changes; columns given by name imply a header line.

    Raises:
      ConfigError: `text_b` for a model of single texts.
    """
    if text_b and columns.text_b is None:
        raise ConfigError(f"--text_b_column={text_b}: the model was fine-tuned on single texts; drop the flag.")
    changes = {"file_format": file_format, "text_a": text_a, "text_b": text_b}
    changes = {key: value for key, value in changes.items() if value}
    if text_a or text_b:
        changes["header"] = True
    return dataclasses.replace(columns, **changes)


def _batches(rows: Iterator[Row], batch_size: int, path: str, wanted: list) -> Iterator[list[dict]]:
    batch = []
    for number, values in rows:
        if values is None:
            raise InputDataError(
                f"{path}, line {number}: the row has no value for column "
                f"{' or '.join(repr(c) for c in wanted)}; fix or remove that row."
            )
        batch.append(values)
        if len(batch) == batch_size:
            yield batch
            batch = []
    if batch:
        yield batch


def write_predictions(predictor, input_file: str, output_file: str, columns: TextColumns, batch_size: int = 32) -> int:
    """Writes `output_file` (see the module docstring); returns the number of rows predicted.

    Raises:
      InputDataError: a missing column, a row without a text, a line that is not JSON, a file without rows.
      MissingFileError: no `input_file`.
    """
    wanted = [c for c in (columns.text_a, columns.text_b) if c is not None]
    rows = stream_columns(input_file, columns.file_format, wanted, columns.header)
    partial, count = output_file + ".partial", 0
    try:
        with tf.io.gfile.GFile(partial, "w") as f:
            f.write(HEADER)
            for batch in _batches(rows, batch_size, input_file, wanted):
                shown = predictor([[values[c] for values in batch] for c in wanted])
                f.write(submission_lines([str(count + i) for i in range(len(batch))], shown))
                count += len(batch)
        if not count:
            raise empty_file_error(input_file)
    except BaseException:
        if tf.io.gfile.exists(partial):
            tf.io.gfile.remove(partial)
        raise
    tf.io.gfile.rename(partial, output_file, overwrite=True)
    return count
