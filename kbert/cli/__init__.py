"""absl-flags command-line entry points; `tools/*.py` are thin shims over these.

Importing this package keeps TensorFlow's own C++ logs (CUDA probing, oneDNN notices, per-op warnings) off the
console of kbert's commands, so their own lines show, unless the command line has `--verbose` or the user set
TF_CPP_MIN_LOG_LEVEL. It has to happen here: TensorFlow reads the variable once, when it is first imported.
"""

import os
import sys

if "--verbose" not in sys.argv[1:]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
