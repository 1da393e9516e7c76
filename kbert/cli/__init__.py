"""absl-flags command-line entry points; `tools/*.py` are thin shims over these.

Importing this package sets up TensorFlow's console for kbert's commands before TensorFlow loads (it reads its
variables once, when it is first imported): TF_CPP_MIN_LOG_LEVEL=2, so its INFO and WARNING lines (per-op notices,
start-up chatter) stay off and its errors still show, and on a host with no GPU or TPU no CUDA probing, whose failed
cuInit is an ERROR line (`kbert.runtime.console`). `entry.run` drops the one other ERROR line that is no error.
`--verbose` on the command line, or the user's own TF_CPP_MIN_LOG_LEVEL, keeps TensorFlow's logs as it prints them.
"""

from kbert.runtime import console

console.quiet_environment()
