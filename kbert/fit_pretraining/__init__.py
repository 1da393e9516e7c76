"""BERT pretraining with `model.fit` on any Keras backend, made for JAX under `keras.distribution` (docs/jax.md).

`fit_pretraining` is the recipe; its parts serve a `model.fit` call of one's own: `fit_dataset` (kbert's tf.data
pipeline, the same batches for a seed, any already trained skipped), `FitCheckpoint` (a checkpoint every N
batches), `StateOnTheMesh` (one compilation of the step on a mesh of one device) and
`kbert.fit_pretraining.checkpoints` (write, find and restore them, dropout RNG states included).
TensorFlow reads the records only. (kbert-pretrain is the other way to pretrain: kbert's own engine,
`kbert.training`, on `tf.distribute`.)

Example:

```python
def build_model():
    model = BertPretrainer(BertConfig.load("bert_tiny"))
    model.compile(optimizer=LAMB(1e-3))
    return model

model, history = fit_pretraining(build_model, "data/train.tfrecord-*", 128, 20, global_batch_size=256,
                                 total_steps=1000, checkpoint_dir="runs/tiny")   # a rerun resumes
```
"""

from kbert.fit_pretraining.callback import FitCheckpoint, StateOnTheMesh
from kbert.fit_pretraining.checkpoints import Progress, newest_checkpoint, restore_checkpoint, write_checkpoint
from kbert.fit_pretraining.inputs import fit_dataset
from kbert.fit_pretraining.recipe import fit_pretraining

__all__ = [
    "FitCheckpoint",
    "Progress",
    "StateOnTheMesh",
    "fit_dataset",
    "fit_pretraining",
    "newest_checkpoint",
    "restore_checkpoint",
    "write_checkpoint",
]
