"""tools/accelerator_check_jax.py: its --smoke run on the CPU with TensorFlow blocked reports every phase ok with
its figures (so the check cannot rot between the rare runs on a lent GPU), and its pieces: the batch search, the
FLOP count, the float64 LAMB."""

import importlib.util
import json
import math
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

pytestmark = pytest.mark.skipif(keras.backend.backend() != "jax", reason="a JAX check: runs under KERAS_BACKEND=jax")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "tools", "accelerator_check_jax.py")
# Runs the script as __main__ with `import tensorflow` failing, as on a host without TensorFlow.
WITHOUT_TENSORFLOW = (
    "import runpy, sys; sys.modules['tensorflow'] = None; sys.argv[0] = sys.argv[1]; "
    "del sys.argv[1]; runpy.run_path(sys.argv[0], run_name='__main__')"
)
PHASES = [
    "devices",
    "matmul",
    "lamb_vs_float64",
    "kbert_lamb_32",
    "hub_lamb_32",
    "hub_adamw_32",
    "modern_lamb_32",
    "flash_off_32",
    "flash_on_32",
]


@pytest.fixture(scope="module")
def tool():
    """The script as a module, imported once (it defines absl flags)."""
    spec = importlib.util.spec_from_file_location("accelerator_check_jax", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.spawns
def test_smoke_run_without_tensorflow_reports_every_phase_ok(tmp_path):
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_TENSORFLOW, SCRIPT, "--smoke", f"--json={tmp_path / 'check.json'}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    report = json.loads((tmp_path / "check.json").read_text())
    phases = report["phases"]
    assert list(phases) == PHASES and report["ok"] and report["smoke"]
    assert {name: r["status"] for name, r in phases.items()} == dict.fromkeys(PHASES, "ok"), result.stdout[-4000:]
    table = result.stdout[result.stdout.index("phase            status") :].splitlines()[1 : len(PHASES) + 1]
    assert [line.split()[:2] for line in table] == [[name, "ok"] for name in PHASES]

    devices = phases["devices"]
    assert devices["platform"] == "cpu" and devices["tensorflow_imported"] is False
    assert devices["versions"]["backend"] == "jax"
    assert phases["matmul"]["measured_bf16_flops"] > 0 and phases["matmul"]["nominal_bf16_flops"] is None

    lamb = phases["lamb_vs_float64"]
    assert set(lamb["relative_errors"]) == {"kernel", "bias", "LayerNorm_gamma"}
    assert max(lamb["relative_errors"].values()) < lamb["tolerance"] == 1e-4

    for name in PHASES[3:]:
        rate = phases[name]
        assert math.isfinite(rate["sequences_per_second"]) and rate["sequences_per_second"] > 0, name
        assert rate["batch"] == 8 and rate["out_of_memory_at"] == [], name  # 256 tokens / seq 32
        assert math.isfinite(rate["loss_first"]) and math.isfinite(rate["loss_last"]), name
        assert 0 < rate["mfu_measured"] and rate["mfu_nominal"] is None, name
    # Dropout on the probabilities keeps the explicit softmax; without it (the modern model has none), XLA's
    # attention on a CPU.
    assert [phases[n]["attention"] for n in PHASES[3:]] == [["explicit softmax"]] * 3 + [["xla"]] * 3
    assert phases["modern_lamb_32"]["flops_per_sequence"] < phases["kbert_lamb_32"]["flops_per_sequence"]


def test_batch_search_halves_on_out_of_memory_only(tool, monkeypatch):
    monkeypatch.setattr(tool, "_release", lambda: None)  # nothing to free

    def run(batch):
        if batch > 4:
            raise RuntimeError(f"RESOURCE_EXHAUSTED: Out of memory while trying to allocate {batch} GiB")
        return {"batch": batch}

    assert tool._largest_batch(run, 32, 2) == {"batch": 4, "out_of_memory_at": [32, 16, 8]}
    with pytest.raises(RuntimeError, match="at every batch from 32 down to 8"):
        tool._largest_batch(run, 32, 8)

    def broken(batch):
        raise ValueError("not a memory problem")

    with pytest.raises(ValueError):
        tool._largest_batch(broken, 32, 2)


def test_float64_lamb_is_the_test_suites_reference(tool):
    from optimizer_reference import lamb

    rng = np.random.default_rng(3)
    names = ["dense/kernel", "dense/bias", "LayerNorm/gamma"]
    weights = [rng.normal(size=(6, 5)), rng.normal(size=5), 1 + rng.normal(size=5) * 0.1]
    grads = [[rng.normal(size=w.shape) for w in weights] for _ in range(4)]
    want, _ = lamb(weights, grads, names, lr=1e-2)
    got = tool.lamb_float64(weights, grads, [True, False, False], 1e-2)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=0)
