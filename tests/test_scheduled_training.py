"""A step function of one's own, trained on kbert's held-out sample schedule: evaluated at the samples a
kbert-pretrain run is, stopped at the target."""

from kbert.bench.scheduled_training import train_on_schedule
from kbert.training.eval_schedule import EvalSchedule


def _metrics(accuracy: float) -> dict[str, float]:
    return {
        "loss": 1.0,
        "masked_lm_loss": 1.0,
        "masked_lm_accuracy": accuracy,
        "next_sentence_loss": 0.7,
        "next_sentence_accuracy": 0.5,
        "sequences": 16.0,
    }


class Peer:
    """Trains `batch` samples a step; its held-out accuracy is `accuracies[k]` at its k-th evaluation."""

    def __init__(self, batch: int, accuracies=(0.1,) * 100):
        self.batch, self.accuracies = batch, list(accuracies)
        self.loops: list[int] = []
        self.evaluated = 0

    def train(self, steps: int) -> int:
        self.loops.append(steps)
        return self.batch * sum(self.loops)

    def evaluate(self) -> dict[str, float]:
        self.evaluated += 1
        return _metrics(self.accuracies[self.evaluated - 1])


def _schedule(peer: Peer, interval: int, target=None) -> EvalSchedule:
    return EvalSchedule(interval, target, peer.evaluate, print_fn=lambda *a, **k: None)


def test_evaluations_land_where_kbert_pretrains_do():
    # tests/test_time_to_target.py: kbert-pretrain at batch 8, loops of 2 steps, 6 steps, interval 20 -> 32, 48
    peer = Peer(batch=8)
    result = train_on_schedule(peer.train, until_step=6, steps_per_loop=2, schedule=_schedule(peer, 20))
    assert [e["samples"] for e in result["evaluations"]] == [32, 48]
    assert [e["step"] for e in result["evaluations"]] == [4, 6]
    assert result["global_step"] == 6 and result["sequences_trained"] == 48 and result["time_to_target"] is None


def test_a_run_ending_between_two_evaluations_evaluates_at_its_end():
    peer = Peer(batch=4)
    result = train_on_schedule(peer.train, until_step=7, steps_per_loop=3, schedule=_schedule(peer, 12))
    assert [(e["samples"], e["step"]) for e in result["evaluations"]] == [(12, 3), (24, 6), (28, 7)]


def test_loops_end_on_multiples_of_the_loop_length_and_at_the_last_step():
    peer = Peer(batch=4)
    train_on_schedule(peer.train, until_step=7, steps_per_loop=3, schedule=_schedule(peer, 1000))
    assert peer.loops == [3, 3, 1]


def test_training_stops_at_the_first_evaluation_that_reaches_the_target():
    peer = Peer(batch=10, accuracies=[0.1, 0.3, 0.5, 0.6])
    result = train_on_schedule(peer.train, until_step=100, steps_per_loop=1, schedule=_schedule(peer, 10, 0.4))
    assert result["time_to_target"]["samples"] == 30 and result["time_to_target"]["step"] == 3
    assert result["global_step"] == 3 and sum(peer.loops) == 3
    assert [e["masked_lm_accuracy"] for e in result["evaluations"]] == [0.1, 0.3, 0.5]
    assert all(e["seconds"] >= 0 for e in result["evaluations"])


def test_nothing_trained_since_the_schedule_started_is_not_evaluated():
    """A run with no steps to train, and a finished run started again, time nothing: no evaluation."""
    peer = Peer(batch=4)
    result = train_on_schedule(peer.train, until_step=0, steps_per_loop=3, schedule=_schedule(peer, 12))
    assert result["evaluations"] == [] and peer.evaluated == 0
    restarted = EvalSchedule(12, 0.05, peer.evaluate, print_fn=lambda *a, **k: None, samples_done=28)
    restarted.finish(7, 28)
    assert restarted.history == [] and restarted.reached is None and peer.evaluated == 0
