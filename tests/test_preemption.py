"""What a preemption is on each platform, and how the run exits: SIGTERM or GCE's maintenance event, status 42."""

import pytest
from tensorflow.python.distribute.failure_handling import failure_handling_util as util

from kbert.training import preemption

PLATFORMS = util.PlatformDevice


@pytest.mark.parametrize("platform", [PLATFORMS.GCE_GPU, PLATFORMS.GCE_TPU, PLATFORMS.GCE_CPU])
def test_on_gce_sigterm_and_the_maintenance_event_both_end_the_run(monkeypatch, platform):
    monkeypatch.setattr(util, "detect_platform", lambda: platform)
    event = {"maintenance": False}
    monkeypatch.setattr(util, "termination_watcher_function_gce", lambda: event["maintenance"])
    sigterm = {"raised": False}
    config = preemption.termination_config(lambda: sigterm["raised"])
    assert config.termination_watcher_fn() is False
    sigterm["raised"] = True  # a spot VM's or GKE's SIGTERM, which TF alone does not watch on GCE
    assert config.termination_watcher_fn() is True
    sigterm["raised"], event["maintenance"] = False, True
    assert config.termination_watcher_fn() is True
    with pytest.raises(SystemExit) as exit_:
        config.exit_fn()
    assert exit_.value.code == preemption.PREEMPTED_EXIT_CODE == 42


def test_elsewhere_only_sigterm_ends_the_run_and_no_metadata_server_is_asked(monkeypatch):
    monkeypatch.setattr(util, "detect_platform", lambda: PLATFORMS.INTERNAL_GPU)

    def asked():
        raise AssertionError("the GCE metadata server was asked off GCE")
    monkeypatch.setattr(util, "termination_watcher_function_gce", asked)
    sigterm = {"raised": False}
    config = preemption.termination_config(lambda: sigterm["raised"])
    assert config.termination_watcher_fn() is False
    sigterm["raised"] = True
    assert config.termination_watcher_fn() is True
