"""Training driven by a step function of one's own on kbert's held-out sample schedule: for peers (Model Garden's
recipe) and studies that train outside `kbert.training.loop.train` but must be evaluated as a kbert-pretrain run
is, so their evaluation histories compare point for point.

Invariant: loops end where `kbert.training.loop.train`'s do (on multiples of `steps_per_loop`, and at
`until_step`), and the schedule evaluates at the first loop end whose sample count reaches its next multiple, and
at `until_step` if that is between two; so with the same batch, steps per loop and interval, a contestant is
evaluated at the same samples as a kbert-pretrain run. Training stops at the first evaluation that reaches the
schedule's target (none: at `until_step`).

Example:

```python
schedule = EvalSchedule(interval=3200, target=None, evaluate=evaluate_peer)
result = train_on_schedule(peer_steps, until_step=1000, steps_per_loop=50, schedule=schedule)
result["evaluations"][-1]["masked_lm_accuracy"]
```
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kbert.training.eval_schedule import EvalSchedule


def train_on_schedule(
    train_steps: Callable[[int], int], *, until_step: int, steps_per_loop: int, schedule: EvalSchedule
) -> dict[str, Any]:
    """Calls `train_steps(n)` (trains n optimizer steps, returns the samples trained so far) loop by loop up to
    `until_step`, evaluating when `schedule` is due and at the end; seconds count from the schedule's start.

    Returns:
      `{"global_step", "sequences_trained"}` and the schedule's summary (`evaluations`, `time_to_target`, ...).
    """
    step, samples = 0, 0
    while step < until_step:
        steps = min(steps_per_loop - step % steps_per_loop, until_step - step)
        samples = train_steps(steps)
        step += steps
        if schedule.due(samples) and schedule(step, samples, schedule.seconds()):
            break
    schedule.finish(step, samples)
    return {"global_step": step, "sequences_trained": samples, **schedule.summary()}
