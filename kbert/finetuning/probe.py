"""A frozen-encoder probe: how much of a text classification task an encoder's features hold, with no training of
the encoder.

Each example is encoded once (`[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]`, cut to the tokenizer's `seq_length`),
and its feature vector is the mean of the encoder's final-layer outputs over its real tokens. A multinomial
logistic regression (scikit-learn, L-BFGS) on standardised features is fitted on the training texts and scored on
the eval texts. Its L2 strength is chosen per encoder from `PROBE_CS` by 5-fold cross-validation on the training
texts (folds in file order, each standardised on its own training part), so no encoder gets a probe tuned for
another. The encoder's weights never change: the score measures what pretraining put into them, not a fine-tuning
recipe. A random-init encoder gives the floor, one score per initialisation seed.

Invariant: the same encoder weights and texts give the same score (inference only, unshuffled folds, a
deterministic solver).

Example:

```python
tokenizer = PairEncoder("data/vocab.txt", seq_length=64)
data = load_task_data(resolve_task(task_config))                     # kbert-finetune's reading of a task
train, evaluation = data.train, data.evals["eval"]
probe_accuracy(pretrained_encoder("runs/full"), tokenizer, train, evaluation)          # 84.4 (percent)
probe_accuracy(random_encoder(model_section, seed=1), tokenizer, train, evaluation)    # 70.0
```
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, StratifiedKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from kbert.finetuning import pretrained
from kbert.finetuning.encoding import PairEncoder
from kbert.finetuning.examples import Examples
from kbert.modeling import BertEncoder
from kbert.runtime.sections import ModelConfig

# Inverse L2 strengths the cross-validation chooses from, on standardised features.
PROBE_CS = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0)
_FOLDS = 5
_BATCH = 128


def pretrained_encoder(model_dir: str) -> BertEncoder:
    """The encoder of a pretraining run (a kbert model_dir's newest checkpoint, or an MSLT run's last stage
    export), built with the model config that came with it."""
    prefix = pretrained.resolve_checkpoint(model_dir)
    encoder = BertEncoder(pretrained.bert_config_for(ModelConfig(bert=""), prefix))
    pretrained.load_encoder(encoder, prefix)
    return encoder


def random_encoder(model: Mapping[str, Any], seed: int) -> BertEncoder:
    """A random-init encoder of a pretraining config's `model` section, initialised as pretraining starts (BERT's
    truncated normal) from `seed`."""
    config = ModelConfig()
    config.override(dict(model))
    keras.utils.set_random_seed(seed)
    return BertEncoder(config.bert_config())


def mean_features(encoder: BertEncoder, tokenizer: PairEncoder, examples: Examples) -> np.ndarray:
    """The mean of the final-layer outputs over each example's real tokens ([CLS] and [SEP] included), float64
    `[len(examples), hidden_size]`."""
    columns = [examples.text_a] + ([examples.text_b] if examples.text_b is not None else [])
    features = []
    for start in range(0, len(examples), _BATCH):
        batch = tokenizer.encode(*(tf.constant(column[start : start + _BATCH]) for column in columns))
        hidden = tf.cast(encoder(batch, training=False)["sequence_output"], tf.float32)
        mask = tf.cast(batch["input_mask"], tf.float32)[:, :, None]
        features.append((tf.reduce_sum(hidden * mask, axis=1) / tf.reduce_sum(mask, axis=1)).numpy())
    return np.concatenate(features).astype(np.float64)


def probe_accuracy(encoder: BertEncoder, tokenizer: PairEncoder, train: Examples, evaluation: Examples) -> float:
    """The eval accuracy (percent) of the probe (see the module docstring) fitted on the encoder's features of
    `train`; both sets are labelled with class ids."""
    # Standardised within each fold, as the final fit on the whole training set is; refitted with the best C.
    probe = GridSearchCV(
        make_pipeline(StandardScaler(), LogisticRegression(max_iter=3000)),
        {"logisticregression__C": list(PROBE_CS)},
        scoring="accuracy",
        cv=StratifiedKFold(_FOLDS),
    )
    train_features, eval_features = (mean_features(encoder, tokenizer, e) for e in (train, evaluation))
    # One BLAS thread: on matrices this small, BLAS threads only spin against TensorFlow's for the cores, which made
    # the fits 40 times slower on 2 cores (the scores are the same).
    with threadpool_limits(limits=1, user_api="blas"):
        probe.fit(train_features, train.labels)
        predicted = probe.predict(eval_features)
    return 100.0 * float(np.mean(predicted == np.asarray(evaluation.labels)))
