"""What a preemption is (SIGTERM, or GCE's maintenance event on a GCE host), and what `check` does then: save the
current step and raise Preempted. The exit status and the multi-worker agreement are tested end to end in
test_training_distributed.py."""

import os
import signal
import time

import pytest
import tensorflow as tf

from kbert.runtime import preemption


@pytest.fixture
def manager(tmp_path):
    return tf.train.CheckpointManager(tf.train.Checkpoint(v=tf.Variable(1.0)), str(tmp_path / "ckpt"), max_to_keep=2)


def _wait_for(condition, seconds=10.0):
    deadline = time.time() + seconds
    while not condition():
        assert time.time() < deadline
        time.sleep(0.01)


@pytest.mark.parametrize("product, gce", [("Google Compute Engine\n", True), ("Standard PC (Q35)\n", False)])
def test_a_gce_host_is_told_by_its_dmi_product_name(tmp_path, product, gce):
    (tmp_path / "product_name").write_text(product)
    assert preemption.on_gce(str(tmp_path / "product_name")) is gce
    assert preemption.on_gce(str(tmp_path / "absent")) is False


@pytest.mark.parametrize(
    "strategy",
    [tf.distribute.OneDeviceStrategy("/cpu:0"), tf.distribute.MirroredStrategy(["/cpu:0"])],
    ids=["one_device", "mirrored"],
)
def test_on_gce_the_maintenance_event_saves_the_step_and_stops(manager, strategy):
    """A GCE GPU host or a Cloud TPU VM: the event is what the metadata server says; SIGTERM is tested below."""
    event = {"maintenance": False}
    with preemption.PreemptionWatcher(
        strategy, gce=True, notice=lambda: event["maintenance"], poll_seconds=0.01
    ) as watcher:
        watcher.check(manager, 3)
        assert manager.latest_checkpoint is None
        event["maintenance"] = True
        _wait_for(lambda: watcher.reason is not None)
        with pytest.raises(
            preemption.Preempted, match=r"^preempted \(GCE maintenance event\): saved .*ckpt-7 at step 7"
        ):
            watcher.check(manager, 7)
    assert manager.latest_checkpoint.endswith("ckpt-7")


def test_off_gce_no_metadata_server_is_asked(manager):
    def asked():
        raise AssertionError("the GCE metadata server was asked off GCE")

    with preemption.PreemptionWatcher(
        tf.distribute.get_strategy(), gce=False, notice=asked, poll_seconds=0.01
    ) as watcher:
        time.sleep(0.05)
        watcher.check(manager, 1)
    assert manager.latest_checkpoint is None


def test_sigterm_is_caught_while_watching_and_the_previous_handler_comes_back(manager):
    previous = signal.getsignal(signal.SIGTERM)
    with preemption.PreemptionWatcher(tf.distribute.get_strategy(), gce=False) as watcher:
        os.kill(os.getpid(), signal.SIGTERM)
        _wait_for(lambda: watcher.reason == "SIGTERM")
        with pytest.raises(preemption.Preempted, match=r"^preempted \(SIGTERM\)"):
            watcher.check(manager, 2)
    assert signal.getsignal(signal.SIGTERM) is previous
    assert preemption.PREEMPTED_EXIT_CODE == 42


def test_a_signal_during_the_workers_agreement_waits_for_the_next_check(manager, monkeypatch):
    """Every worker must decide from the all-reduced flags alone: one that also read a signal arriving during the
    all-reduce would save and exit while the others train on, and the cluster would hang."""
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with preemption.PreemptionWatcher(strategy, gce=False) as watcher:
        watcher._agree = True  # as under MultiWorkerMirroredStrategy, whose other workers all sent 0
        reduce = strategy.reduce

        def signal_arrives_meanwhile(*args, **kwargs):
            watcher.reason = "SIGTERM"
            return reduce(*args, **kwargs)

        monkeypatch.setattr(strategy, "reduce", signal_arrives_meanwhile)
        watcher.check(manager, 4)
        assert manager.latest_checkpoint is None
        with pytest.raises(preemption.Preempted, match=r"^preempted \(SIGTERM\)"):
            watcher.check(manager, 5)
