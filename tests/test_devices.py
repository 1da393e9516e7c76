"""The device report and the refusal to train on the CPU beside a GPU or TPU (kbert.runtime.devices): the system
probes read a fake /sys, /proc and /dev tree; the decision is tested for every case a CPU-only machine can fake."""

import os
import types

import pytest
import tensorflow as tf
from cli_batch import run_batch
from training_fixtures import pretrain_command, write_config, write_train_and_eval

from kbert.errors import StrategyError
from kbert.runtime import accelerators, devices
from kbert.runtime.devices import Accelerators, Software

H100 = "NVIDIA H100 80GB HBM3"
# The Linux `tensorflow` wheel without kbert[gpu]: CUDA kernels, no CUDA libraries.
PLAIN_WHEEL = Software(cuda_build=True, cuda_libraries=False, tpu_build=False, cuda_visible_devices=None)


def _write(path, text=""):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def _pci(root, slot, vendor, device, pci_class):
    for name, value in (("vendor", vendor), ("device", device), ("class", pci_class)):
        _write(os.path.join(root, "sys/bus/pci/devices", slot, name), value + "\n")


def _nvidia_driver(root, gpus):
    for i in range(gpus):
        _write(
            os.path.join(root, f"proc/driver/nvidia/gpus/0000:00:0{i}.0/information"),
            f"Model: \t\t {H100}\nIRQ:   \t\t 42\n",
        )
        _write(os.path.join(root, f"dev/nvidia{i}"))
    _write(os.path.join(root, "dev/nvidiactl"))


@pytest.fixture(autouse=True)
def no_nvidia_smi(monkeypatch):
    """The probes must see only the fake tree, not this machine's nvidia-smi."""
    monkeypatch.setattr(accelerators, "_nvidia_smi_models", lambda: [])


def _strategy(kind, count=1):
    """A stand-in with what `check` and `report_line` read: the worker devices and the replica count."""
    names = tuple(f"/job:localhost/replica:0/task:0/device:{kind}:{i}" for i in range(count))
    return types.SimpleNamespace(extended=types.SimpleNamespace(worker_devices=names), num_replicas_in_sync=count)


# -- what the host has ---------------------------------------------------------------------------------------------


def test_gpus_are_found_from_the_driver_with_their_model(tmp_path):
    _nvidia_driver(str(tmp_path), gpus=2)
    assert devices.find_accelerators(str(tmp_path), {}) == Accelerators("GPU", 2, H100, driver_loaded=True)


def test_a_gpu_without_its_driver_is_found_on_the_pci_bus(tmp_path):
    _pci(str(tmp_path), "0000:00:04.0", "0x10de", "0x2330", "0x030200")
    _pci(str(tmp_path), "0000:00:05.0", "0x10de", "0x22a3", "0x068000")  # an NVSwitch: same vendor, not a GPU
    host = devices.find_accelerators(str(tmp_path), {})
    assert (host.kind, host.count, host.driver_loaded) == ("GPU", 1, False)


def test_tpu_chips_are_found_on_the_pci_bus_and_gvnic_is_not_a_tpu(tmp_path):
    _pci(str(tmp_path), "0000:00:03.0", "0x1ae0", "0x0042", "0x020000")  # gVNIC, Google's network card
    assert devices.find_accelerators(str(tmp_path), {}) == Accelerators()
    for i in range(4):
        _pci(str(tmp_path), f"0000:00:0{i + 4}.0", "0x1ae0", "0x0063", "0x120000")
    assert devices.find_accelerators(str(tmp_path), {}) == Accelerators("TPU", 4, "TPU v5e")


def test_a_tpu_named_only_by_the_environment_is_counted_from_dev(tmp_path):
    for i in range(8):
        _write(os.path.join(str(tmp_path), f"dev/vfio/{i}"))
    host = devices.find_accelerators(str(tmp_path), {"TPU_ACCELERATOR_TYPE": "v5litepod-8"})
    assert host == Accelerators("TPU", 8, "TPU v5litepod-8")


def test_nothing_is_found_on_a_bare_host(tmp_path):
    assert devices.find_accelerators(str(tmp_path), {}) == Accelerators()
    assert devices.find_accelerators(str(tmp_path), {}).describe() == "none"


def test_has_accelerators_agrees_with_the_full_probe(tmp_path):
    # kbert.runtime.console asks it before TensorFlow loads (no CUDA probing where it is False): it must not differ.
    def agrees(env=None):
        return accelerators.has_accelerators(str(tmp_path), env or {}) == bool(
            devices.find_accelerators(str(tmp_path), env or {}).kind
        )

    assert agrees() and not accelerators.has_accelerators(str(tmp_path), {})
    assert agrees({"TPU_ACCELERATOR_TYPE": "v5litepod-8"})
    _pci(str(tmp_path), "0000:00:05.0", "0x10de", "0x22a3", "0x068000")  # an NVSwitch alone: no GPU
    assert agrees()
    _pci(str(tmp_path), "0000:00:04.0", "0x10de", "0x2330", "0x030200")  # a GPU without its driver
    assert agrees() and accelerators.has_accelerators(str(tmp_path), {})
    _nvidia_driver(str(tmp_path), gpus=2)
    assert agrees()


# -- the decision ----------------------------------------------------------------------------------------------------

GPUS = Accelerators("GPU", 8, H100)
TPUS = Accelerators("TPU", 4, "TPU v5e")


def test_gpus_that_tensorflow_sees_are_used_without_a_word():
    assert devices.refusal(GPUS, "GPU", "auto", PLAIN_WHEEL) is None


@pytest.mark.parametrize(
    "host, software, cause",
    [
        (GPUS, PLAIN_WHEEL, "CUDA libraries (cuDNN, cuBLAS) are not installed: pip install 'kbert[gpu]'"),
        (GPUS, Software(False, False, True, None), "CPU-only build (tensorflow-cpu or tensorflow-tpu)"),
        (GPUS, Software(True, True, False, ""), "CUDA_VISIBLE_DEVICES='' hides them: unset it"),
        (GPUS, Software(True, True, False, "0,1"), "NVIDIA driver is probably older than the CUDA 12 runtime"),
        (Accelerators("GPU", 1, "NVIDIA GPU", driver_loaded=False), PLAIN_WHEEL, "kernel driver is not loaded"),
        (TPUS, PLAIN_WHEEL, "no TPU support: install tensorflow-tpu in place of tensorflow"),
        (TPUS, Software(False, False, True, None), "pass --strategy=tpu (with --tpu=local on a TPU VM)"),
    ],
)
def test_a_cpu_run_beside_an_accelerator_is_refused_naming_the_cause(host, software, cause):
    reason = devices.refusal(host, "CPU", "auto", software)
    assert reason.startswith(f"this host has {host.describe()} but TensorFlow would train on the CPU; likely cause:")
    assert cause in reason and reason.endswith("Pass --device=cpu to train on the CPU anyway.")
    assert "\n" not in reason


def test_device_cpu_allows_the_cpu_run_and_refuses_a_tpu_strategy():
    assert devices.refusal(GPUS, "CPU", "cpu", PLAIN_WHEEL) is None
    assert devices.refusal(TPUS, "CPU", "cpu", PLAIN_WHEEL) is None
    assert "--device=cpu, but the strategy trains on TPU" in devices.refusal(TPUS, "TPU", "cpu", PLAIN_WHEEL)


def test_a_cpu_run_on_a_bare_host_is_allowed():
    assert devices.refusal(Accelerators(), "CPU", "auto", PLAIN_WHEEL) is None


def test_check_raises_strategy_error_for_refusals_and_unknown_devices():
    with pytest.raises(StrategyError, match="likely cause"):
        devices.check(GPUS, _strategy("CPU"), "auto", PLAIN_WHEEL)
    devices.check(GPUS, _strategy("GPU", 8), "auto", PLAIN_WHEEL)
    with pytest.raises(StrategyError, match="--device=gpu: choose one of auto, cpu"):
        devices.check(GPUS, _strategy("GPU", 8), "gpu", PLAIN_WHEEL)


def test_report_line_names_kind_count_strategy_replicas_host_and_build():
    line = devices.report_line(GPUS, _strategy("GPU", 8))
    assert line.startswith(
        f"devices: GPU x8 ({H100}) | SimpleNamespace, 8 replicas | host accelerators: 8 {H100}s | "
        f"TensorFlow {tf.__version__}"
    )
    real = devices.report_line(Accelerators(), tf.distribute.OneDeviceStrategy("/cpu:0"))
    assert real.startswith("devices: CPU x1 | OneDeviceStrategy, 1 replica | host accelerators: none | ")


# -- kbert-pretrain --------------------------------------------------------------------------------------------------


def _fake_host(root) -> str:
    """`run_batch`'s set-up: kbert-pretrain's host probes read the fake tree `root`."""
    return (
        "from kbert.runtime import devices\n"
        "probe = devices.find_accelerators\n"
        f"devices.find_accelerators = lambda root='/', env=None: probe({str(root)!r}, {{}})\n"
    )


@pytest.mark.spawns
def test_kbert_pretrain_reports_devices_refuses_the_cpu_beside_gpus_and_trains_with_device_cpu(tmp_path):
    _nvidia_driver(str(tmp_path / "host"), gpus=2)
    train, _ = write_train_and_eval(str(tmp_path / "data"))
    config = write_config(str(tmp_path / "run.yaml"), train, train={"total_steps": 2, "steps_per_loop": 2})

    def flags(model_dir):
        return [arg for arg in pretrain_command(config, model_dir)[4:] if arg != "--device=cpu"]

    # Both commands in one process (one TensorFlow start-up), each with its own model_dir.
    refused, trained = run_batch(
        "pretrain",
        [flags(tmp_path / "refused"), flags(tmp_path / "run") + ["--device=cpu"]],
        setup=_fake_host(tmp_path / "host"),
        timeout=900,
    )
    assert refused.returncode == 1, refused.stderr[-2000:]
    assert refused.stdout.startswith(
        f"kbert-pretrain: devices: CPU x1 | OneDeviceStrategy, 1 replica | host accelerators: 2 {H100}s | "
    )
    error = refused.stderr.strip().splitlines()[-1]
    assert (
        error.startswith(
            f"kbert-pretrain: error: this host has 2 {H100}s but TensorFlow would train on the CPU; likely cause: "
        )
        and "--device=cpu" in error
    )
    assert not (tmp_path / "refused").exists()  # refused before anything was written
    assert trained.returncode == 0, trained.stderr[-2000:]
    assert "step 2/2" in trained.stdout
