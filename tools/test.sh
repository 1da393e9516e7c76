#!/usr/bin/env bash
# Runs kbert's test suite on a fresh machine: makes .venv if absent, installs kbert[test], runs pytest.
# Idempotent; extra arguments go to pytest (e.g. `bash tools/test.sh -k lamb`).
# Two pytest workers (KBERT_TEST_WORKERS): many tests start kbert-pretrain processes, whose single-threaded start
# (importing TensorFlow, tracing) leaves a core idle; two workers use it.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/_venv.sh
kbert_venv test
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
exec .venv/bin/python -m pytest -n "${KBERT_TEST_WORKERS:-2}" "$@"
