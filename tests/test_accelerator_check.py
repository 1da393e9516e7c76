"""tools/accelerator_check.py --smoke: every phase runs at tiny sizes on the CPU and reports ok, and the JSON holds
the figures docs/accelerators.md describes, so the check cannot rot between the rare runs on a GPU or TPU host."""

import json
import os
import sys

import forkserver
import pytest
from training_fixtures import ROOT, cli_env

PHASES = ["report", "numerics", "replicas", "resume", "throughput", "memory"]


@pytest.mark.spawns
def test_smoke_run_reports_every_phase_ok_with_its_figures(tmp_path):
    # What an earlier check left in the same --work_dir: a finished run's log would signal the new run at once.
    (tmp_path / "resume").mkdir()
    (tmp_path / "resume" / "sigterm.log").write_text("step 99/100 | loss 1.0\n")
    # The check, its phases' process and the resume phase's kbert-pretrain runs: children of the fork server.
    result = forkserver.run(
        [
            sys.executable,
            os.path.join(ROOT, "tools/accelerator_check.py"),
            "--smoke",
            f"--work_dir={tmp_path}",
            f"--json={tmp_path / 'check.json'}",
        ],
        env=cli_env(**{forkserver.FORK_SUBPROCESSES: "1"}),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    phases = json.loads((tmp_path / "check.json").read_text())["phases"]
    assert list(phases) == PHASES
    assert {name: r["status"] for name, r in phases.items()} == dict.fromkeys(PHASES, "ok"), result.stdout[-4000:]
    table = result.stdout[result.stdout.index("phase       status") :]
    assert [line.split()[:2] for line in table.splitlines()[1:7]] == [[p, "ok"] for p in PHASES]

    report = phases["report"]
    assert report["report_line"].startswith("devices: CPU x1 | OneDeviceStrategy, 1 replica | host accelerators: ")
    assert report["first_matmul_seconds"] > 0 and report["refusal"] is None

    numerics = phases["numerics"]
    assert set(numerics["losses"]) == {"bf16", "bf16_xla"} and numerics["fp16"] == "skipped (GPU only)"
    assert all(numerics["checks"].values()) and numerics["xla_relative_gap"] < 0.02

    replicas = phases["replicas"]
    assert len(replicas["devices"]) == 2 and replicas["max_abs_weight_diff"] < 1e-4

    resume = phases["resume"]
    assert resume["killed_mid_run"] and resume["bit_identical"] and resume["sigterm_exit_code"] == 42
    assert resume["exit_codes"]["killed"] == -9

    throughput = phases["throughput"]
    assert throughput["micro_batch"] >= 4 and throughput["mfu"] is None  # no bf16 peak is known for a CPU
    assert all(rate > 0 for rate in throughput["sequences_per_second"].values())
    assert set(throughput["sequences_per_second"]) == {"no_xla", "xla"}
    assert 0 < throughput["lamb_update_share"] < 1
    assert set(throughput["input_sequences_per_second"]) == {"static", "dynamic"}

    memory = phases["memory"]
    needed = memory["accumulation"]["bert_large_lamb_phase2.yaml"]["gradient_accumulation_steps"]
    assert memory["micro_batch"] >= 2 and 32768 % needed == 0 and needed * memory["micro_batch"] >= 32768
