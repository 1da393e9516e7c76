#!/usr/bin/env bash
# kbert end to end on this machine, no downloads: standard-library docstring corpus -> vocabulary -> TFRecords ->
# tiny BERT with LAMB, then MSLT on the same data -> both and random-init encoders probed on which package a
# docstring comes from -> table, plots, and a last line saying whether pretraining beat random init. Makes .venv and
# installs kbert on the first run.
# Flags go to `python -m kbert.demo` (e.g. `bash tools/demo.sh --text=my.txt --out=/tmp/demo --steps=300`).
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/_venv.sh
kbert_venv bench
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
exec .venv/bin/python -m kbert.demo "$@"
