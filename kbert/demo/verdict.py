"""The demo's last line: did pretraining beat random init downstream, and if not, the likely cause.

The goal, on the frozen-encoder probe (the demo's measure of pretraining): every pretrained encoder's score is
above every random-init seed's, and at least `MARGIN_POINTS` above their mean.

Example:

```python
verdict(runs, probe_scores).line
# 'Pretraining beat random init (probe): full +9.9 points, mslt +12.8 points; goal: 5 points over the random-init
#  mean and above each of its 5 seeds (65.4% at best): met.'
```
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from kbert.demo.report import RANDOM_INIT, DownstreamScores, RunResult

MARGIN_POINTS = 5.0


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Whether every pretrained encoder met the goal, and the line that says so (or why not)."""

    passed: bool
    line: str


def verdict(runs: Sequence[RunResult], scores: Sequence[DownstreamScores]) -> Verdict:
    """The verdict on one measure's `scores` (the random-init encoder's among them) of the pretraining `runs`."""
    floor = next(s for s in scores if s.encoder == RANDOM_INIT)
    pretrained = [s for s in scores if s.encoder != RANDOM_INIT]
    gains = ", ".join(f"{s.encoder} {s.mean - floor.mean:+.1f} points" for s in pretrained)
    missed = [s for s in pretrained if s.mean - floor.mean < MARGIN_POINTS or min(s.scores) <= max(floor.scores)]
    goal = (
        f"goal: {MARGIN_POINTS:.0f} points over the random-init mean and above each of its "
        f"{len(floor.scores)} seeds ({max(floor.scores):.1f}% at best)"
    )
    measure = pretrained[0].measure
    if not missed:
        return Verdict(True, f"Pretraining beat random init ({measure}): {gains}; {goal}: met.")
    return Verdict(
        False,
        f"PRETRAINING DID NOT BEAT RANDOM INIT ({measure}): {gains}; {goal}: missed by "
        f"{', '.join(s.encoder for s in missed)}. Likely cause: {_cause(runs, missed)}",
    )


def _cause(runs: Sequence[RunResult], missed: Sequence[DownstreamScores]) -> str:
    """Too little pretraining: at the demo's scale nothing else moved the probe as much (docs/demo.md)."""
    by_name = {run.name: run for run in runs}
    reached = ", ".join(
        f"{s.encoder} {by_name[s.encoder].curve.steps[-1]:,} steps to held-out MLM accuracy "
        f"{by_name[s.encoder].eval['masked_lm_accuracy']:.3f}"
        for s in missed
    )
    return (
        f"too little pretraining ({reached}): an encoder that has learned little more than which words are "
        "frequent holds no more of the task than a random one. Raise --steps (on the standard-library corpus "
        "the probe's gain over random init appears between 3,000 and 4,500 steps; docs/demo.md)."
    )
