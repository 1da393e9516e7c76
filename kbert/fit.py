"""The old name of `kbert.fit_pretraining` (BERT pretraining with Keras's `model.fit`), for code written before the
rename: `from kbert.fit import fit_pretraining` keeps working, with a DeprecationWarning naming the new module. The
submodules (`kbert.fit.checkpoints`, ...) have no old name: they are `kbert.fit_pretraining.<name>`."""

import warnings

from kbert.fit_pretraining import (
    FitCheckpoint,
    Progress,
    fit_dataset,
    fit_pretraining,
    newest_checkpoint,
    restore_checkpoint,
    write_checkpoint,
)

__all__ = [
    "FitCheckpoint",
    "Progress",
    "fit_dataset",
    "fit_pretraining",
    "newest_checkpoint",
    "restore_checkpoint",
    "write_checkpoint",
]

warnings.warn(
    "kbert.fit is now kbert.fit_pretraining: import fit_pretraining and its parts from there",
    DeprecationWarning,
    stacklevel=2,
)
