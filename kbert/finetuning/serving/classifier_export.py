"""`kbert-export --format=saved_model`: a fine-tuned classifier or regressor as one serving SavedModel, strings in.

Invariant: the SavedModel tokenizes inside, with the run's vocabulary, lower-casing, `seq_length` and truncation
(`PairEncoder`, traced), then computes the run's `BertClassifier` with its best weights in the run's precision, so
loaded with TensorFlow and tensorflow-text alone it answers what `kbert-finetune` predicted. Its `serving_default`
signature, also the loaded object's call:

- inputs: `text_a` string `[batch]`, and `text_b` for a sentence-pair task;
- classification: `probabilities` float32 `[batch, labels]`, `label_id` int32 `[batch]` and `label` string
  `[batch]`, the label as the training file spells it; regression: `score` float32 `[batch]`.

`assets.extra/kbert.json` records the labels and where the training task's texts were (file format, header, text
columns), which `kbert-predict` reads; TF Serving ignores that folder.

Example:

```python
difference = export_classifier(load_run("runs/sst2"), "export/sst2/1")  # a TF Serving version folder
```
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import tensorflow as tf

from kbert.errors import ConfigError
from kbert.finetuning.serving.finetuned_run import FinetunedRun
from kbert.finetuning.serving.samples import sample_texts

METADATA = os.path.join("assets.extra", "kbert.json")


def text_inputs(pair: bool) -> list[tf.TensorSpec]:
    return [tf.TensorSpec([None], tf.string, name=name) for name in ("text_a", "text_b")[: 2 if pair else 1]]


class ServingClassifier(tf.Module):
    """The SavedModel's root (see the module docstring)."""

    def __init__(self, run: FinetunedRun):
        super().__init__()
        self._run = run
        # Listed so that the SavedModel holds them: tf.Module does not look inside a Keras model.
        self._weights = list(run.model.variables)
        self.__call__ = tf.function(self._answer, input_signature=text_inputs(run.columns.text_b is not None))

    def _answer(self, *texts: tf.Tensor) -> dict[str, tf.Tensor]:
        logits = self._run.model(self._run.encoder.encode(*texts), training=False)
        if self._run.label_names is None:
            return {"score": logits[:, 0]}
        # The argmax of the logits, as kbert-finetune's predictions take it.
        label_id = tf.argmax(logits, axis=-1, output_type=tf.int32)
        return {
            "probabilities": tf.nn.softmax(logits),
            "label_id": label_id,
            "label": tf.gather(tf.constant(self._run.label_names), label_id),
        }


def metadata(run: FinetunedRun) -> dict:
    """What `assets.extra/kbert.json` holds."""
    return {
        "model_dir": run.model_dir,
        "task": run.config.task.name,
        "labels": run.label_names,
        "columns": dataclasses.asdict(run.columns),
        "seq_length": run.encoder.seq_length,
        "lower_case": run.config.data.lower_case,
    }


def round_trip_difference(run: FinetunedRun, output_dir: str) -> float:
    """The largest |kbert - SavedModel| over the probabilities (or scores) of sample texts, the SavedModel loaded
    back."""
    texts = sample_texts(run.encoder.vocab)
    specs = text_inputs(run.columns.text_b is not None)
    inputs = {spec.name: tf.constant(t) for spec, t in zip(specs, (texts, texts[::-1]))}
    logits = run.model.predict_on_batch(run.encoder.encode(*inputs.values()))
    theirs = tf.saved_model.load(output_dir).signatures["serving_default"](**inputs)
    if run.label_names is None:
        return float(np.abs(logits[:, 0] - theirs["score"].numpy()).max())
    return float(np.abs(tf.nn.softmax(logits).numpy() - theirs["probabilities"].numpy()).max())


def check_exportable(run: FinetunedRun) -> None:
    """Raises ConfigError (one line, with the fix) for a run that tokenizes with a tokenizer.json: the `tokenizers`
    library runs outside the TensorFlow graph, so no SavedModel that takes strings can hold it."""
    if run.config.data.tokenizer:
        raise ConfigError(
            f"--format=saved_model takes strings and tokenizes inside the SavedModel, and the run {run.model_dir} "
            f"tokenizes with a tokenizer.json ({run.config.data.tokenizer}) outside the TensorFlow graph; label "
            f"files with kbert-predict --model={run.model_dir} instead."
        )


def export_classifier(run: FinetunedRun, output_dir: str) -> float:
    """Writes the SavedModel and its `assets.extra/kbert.json` to `output_dir`; returns the round trip's largest
    difference.

    Raises:
      ConfigError: a run that tokenizes with a tokenizer.json (`check_exportable`), before anything is written.
    """
    check_exportable(run)
    classifier = ServingClassifier(run)
    tf.saved_model.save(classifier, output_dir, signatures={"serving_default": classifier.__call__})
    tf.io.gfile.makedirs(os.path.dirname(os.path.join(output_dir, METADATA)))
    with tf.io.gfile.GFile(os.path.join(output_dir, METADATA), "w") as f:
        f.write(json.dumps(metadata(run), indent=2) + "\n")
    return round_trip_difference(run, output_dir)
