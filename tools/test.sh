#!/usr/bin/env bash
# Runs kbert's test suite on a fresh machine: makes .venv if absent, installs kbert[test], runs pytest.
# Idempotent; extra arguments go to pytest (e.g. `bash tools/test.sh -k lamb`).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.kbert-installed
if [ ! -f "$stamp" ] || [ setup.cfg -nt "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e ".[test]"
  touch "$stamp"
fi
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
exec .venv/bin/python -m pytest "$@"
