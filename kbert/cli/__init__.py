"""absl-flags command-line entry points; `tools/*.py` are thin shims over these."""
