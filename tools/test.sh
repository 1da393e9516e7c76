#!/usr/bin/env bash
# Runs kbert's test suite on a fresh machine: makes .venv if absent, installs kbert[test], checks the code with
# `ruff check` and `ruff format --check` (settings in pyproject.toml), builds the documentation site with
# `mkdocs build --strict` (tools/docs.sh), runs pytest.
# Idempotent; extra arguments go to the first pytest run, under TensorFlow (e.g. `bash tools/test.sh -k lamb`); a
# second run tests what runs on every Keras backend (optimizers, model, model.fit pretraining, the accelerator check)
# under KERAS_BACKEND=jax on two logical CPU devices, unless the arguments pick tests (files or -k).
# Two pytest workers (KBERT_TEST_WORKERS): many tests start kbert-pretrain processes, whose single-threaded start
# (importing TensorFlow, tracing) leaves a core idle; two workers use it. --dist loadgroup keeps the tests marked
# with one xdist_group (those sharing an expensive module-scoped fixture) on one worker, which builds it once.
# One thread for each op's own work (TF's intra-op pool, oneDNN's OpenMP) in every test process: the tests' models
# are tiny, and with two workers each starting kbert processes, pools of a thread a core, spinning while idle, only
# fight over the cores (two MSLT and time-to-target test files, back to back: 105 s wall and 202 s of CPU, against
# 115 s and 220 s with the defaults). The inter-op pool keeps its default: ops that wait on one another, as two
# replicas' collectives do, must be able to run side by side.
# Two tiers, each on both backends, each timed in the log: the fast one, the tests that start no process and train no
# whole run (`-m "not spawns and not slow"`; tests/conftest.py fails an unmarked test that starts a process), then the
# slow one (`-m "spawns or slow"`); the last line gives the whole suite's seconds. `--fast` (first argument) runs the
# fast tier alone: the quick tier for working on the code.
set -euo pipefail
cd "$(dirname "$0")/.."
tiers=(fast slow)
if [ "${1:-}" = "--fast" ]; then
  shift
  tiers=(fast)
fi
source tools/_venv.sh
kbert_venv test
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
export TF_NUM_INTRAOP_THREADS=${TF_NUM_INTRAOP_THREADS:-1} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
status=0
.venv/bin/ruff check --quiet . || status=$?
.venv/bin/ruff format --check --quiet . || status=$?
bash tools/docs.sh --quiet || status=$?  # the documentation site, mkdocs build --strict
picked=0  # arguments that pick tests (files, -k) leave the JAX run out; a -m of their own replaces the tiers
for arg in "$@"; do
  case "$arg" in
    -k|-k*|[!-]*) picked=1 ;;
    -m|-m*) tiers=(picked) ;;
  esac
done
# The tests written for every Keras backend, run again under JAX (docs/jax.md); --dist loadfile keeps a file's shared
# fixtures (one compiled model) on one worker.
jax_files=(tests/test_optimizers_reference.py tests/test_optimizers_backends.py tests/test_model_backends.py
  tests/test_modeling.py tests/test_packed_model.py tests/test_fit_jax.py tests/test_accelerator_check_jax.py)
collected=0  # pytest runs that found a test to run (exit status 5: none did)
run() {
  local rc=0
  "$@" || rc=$?
  if [ "$rc" -ne 5 ]; then
    collected=$((collected + 1))
    [ "$rc" -eq 0 ] || status=$rc
  fi
}
suite_start=$SECONDS
for tier in "${tiers[@]}"; do
  case "$tier" in
    fast) marks=(-m "not spawns and not slow") ;;
    slow) marks=(-m "spawns or slow") ;;
    *) marks=() ;;
  esac
  start=$SECONDS
  run .venv/bin/python -m pytest -n "${KBERT_TEST_WORKERS:-2}" --dist loadgroup "${marks[@]}" "$@"
  if [ "$picked" -eq 0 ]; then
    run env KERAS_BACKEND=jax JAX_PLATFORMS=cpu XLA_FLAGS=--xla_force_host_platform_device_count=2 \
      .venv/bin/python -m pytest -n "${KBERT_TEST_WORKERS:-2}" --dist loadfile -q "${marks[@]}" "${jax_files[@]}"
  fi
  echo "kbert tests: the $tier tier took $((SECONDS - start)) s (TensorFlow, then JAX)"
done
echo "kbert tests: ${tiers[*]} in $((SECONDS - suite_start)) s"
if [ "$collected" -eq 0 ] && [ "$status" -eq 0 ]; then
  status=5  # as pytest: no test collected
fi
exit "$status"
