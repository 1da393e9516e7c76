"""The old name of `kbert.fit_pretraining` (BERT pretraining with Keras's `model.fit`), for code written before the
rename: `from kbert.fit import fit_pretraining` keeps working, with a DeprecationWarning naming the new module. The
submodules (`kbert.fit.checkpoints`, ...) have no old name: they are `kbert.fit_pretraining.<name>`."""

import warnings

import kbert.fit_pretraining
from kbert.fit_pretraining import *  # noqa: F403 - the package's names, under the old one

__all__ = kbert.fit_pretraining.__all__

warnings.warn(
    "kbert.fit is now kbert.fit_pretraining: import fit_pretraining and its parts from there",
    DeprecationWarning,
    stacklevel=2,
)
