"""The demo's results: a table (printed and saved as Markdown) and PNG plots of loss against step and time.

Example:

```python
runs = [RunResult("full", curve, 210.0, eval_metrics), RunResult("mslt", curve2, 120.0, eval2, [240, 480])]
print(results_table(runs))
plot_losses(runs, "out/loss_vs_step.png", "out/loss_vs_time.png")
```
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from kbert.demo.history import LossCurve


@dataclasses.dataclass
class RunResult:
    """One pretraining run of the demo; `stage_ends` are the global steps where MSLT stages end."""

    name: str
    curve: LossCurve
    wall_seconds: float
    eval: dict[str, float]
    stage_ends: Sequence[int] = ()


def results_table(runs: Sequence[RunResult]) -> str:
    """A Markdown table: steps, wall time, speed against the first run, final training loss and held-out metrics."""
    rows = ["| run | steps | wall time (s) | speedup | final train loss | held-out MLM loss | held-out MLM acc "
            "| held-out NSP acc |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    baseline = runs[0].wall_seconds
    for run in runs:
        e = run.eval
        rows.append(
            f"| {run.name} | {run.curve.steps[-1]} | {run.wall_seconds:.1f} | {baseline / run.wall_seconds:.2f}x "
            f"| {run.curve.losses[-1]:.4f} | {e['masked_lm_loss']:.4f} | {e['masked_lm_accuracy']:.4f} "
            f"| {e['next_sentence_accuracy']:.4f} |")
    return "\n".join(rows)


def plot_losses(runs: Sequence[RunResult], step_png: str, time_png: str) -> None:
    """Writes training loss against optimizer step (MSLT stage ends dotted) and against wall-clock seconds."""
    import matplotlib

    matplotlib.use("Agg")  # files only: works without a display
    from matplotlib import pyplot as plt

    for path, axis, label in ((step_png, "steps", "optimizer step"), (time_png, "seconds", "wall time (s)")):
        fig, ax = plt.subplots(figsize=(6, 4), dpi=80)
        for run in runs:
            line, = ax.plot(getattr(run.curve, axis), run.curve.losses, marker=".", label=run.name)
            if axis == "steps":
                for end in run.stage_ends:
                    ax.axvline(end, color=line.get_color(), linestyle=":", linewidth=1)
        ax.set_xlabel(label)
        ax.set_ylabel("training loss (MLM + NSP)")
        ax.set_title(f"kbert demo: loss against {label}")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)
