"""The demo's results: a table (printed and saved as Markdown), PNG plots of loss against step and time, and a
PNG of the downstream scores.

Example:

```python
runs = [RunResult("full", curve, 210.0, eval_metrics), RunResult("mslt", curve2, 120.0, eval2, [240, 480])]
downstream = [DownstreamScores("full", [1, 2, 3], [71.0, 72.5, 70.0]), ...]  # ... and "mslt", "random"
print(results_table(runs, downstream))
plot_losses(runs, "out/loss_vs_step.png", "out/loss_vs_time.png")
plot_downstream(downstream, "out/downstream.png")
```
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from kbert.demo.history import LossCurve
from kbert.finetuning.seed_scores import format_scores, mean_and_spread


@dataclasses.dataclass
class RunResult:
    """One pretraining run of the demo; `stage_ends` are the global steps where MSLT stages end."""

    name: str
    curve: LossCurve
    wall_seconds: float
    eval: dict[str, float]
    stage_ends: Sequence[int] = ()


@dataclasses.dataclass
class DownstreamScores:
    """Downstream eval accuracy (percent) of one encoder ("full", "mslt" or "random"), fine-tuned once per seed;
    `mean` and `spread` (sample standard deviation, 0 with one seed) follow from `scores`."""

    encoder: str
    seeds: list[int]
    scores: list[float]
    mean: float = dataclasses.field(init=False)
    spread: float = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.mean, self.spread = mean_and_spread(self.scores)

    def __str__(self) -> str:
        return format_scores(self.scores)


RANDOM_INIT = "random"


def results_table(runs: Sequence[RunResult], downstream: Sequence[DownstreamScores] = ()) -> str:
    """A Markdown table: steps, wall time, speed against the first run, final training loss, held-out metrics and,
    with `downstream`, each encoder's downstream accuracy (a last row for the random-init encoder)."""
    scores = {d.encoder: d for d in downstream}
    header = ("| run | steps | wall time (s) | speedup | final train loss | held-out MLM loss | held-out MLM acc "
              "| held-out NSP acc |")
    rule = "|---|---:|---:|---:|---:|---:|---:|---:|"
    if downstream:
        seeds = len(downstream[0].seeds)
        header += f" downstream acc % ({seeds} seed{'s' * (seeds > 1)}) |"
        rule += "---:|"
    rows = [header, rule]
    baseline = runs[0].wall_seconds
    for run in runs:
        e = run.eval
        rows.append(
            f"| {run.name} | {run.curve.steps[-1]} | {run.wall_seconds:.1f} | {baseline / run.wall_seconds:.2f}x "
            f"| {run.curve.losses[-1]:.4f} | {e['masked_lm_loss']:.4f} | {e['masked_lm_accuracy']:.4f} "
            f"| {e['next_sentence_accuracy']:.4f} |" + _score_cell(scores.get(run.name)))
    if RANDOM_INIT in scores:
        rows.append("| random init | 0 | | | | | | |" + _score_cell(scores[RANDOM_INIT]))
    return "\n".join(rows)


def _score_cell(scores: Optional[DownstreamScores]) -> str:
    return f" {scores} |" if scores else ""


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


def plot_downstream(downstream: Sequence[DownstreamScores], png: str) -> None:
    """Writes a bar per encoder (its mean downstream accuracy, the spread as an error bar) with each seed's score
    as a dot."""
    import matplotlib

    matplotlib.use("Agg")  # files only: works without a display
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=80)
    positions = range(len(downstream))
    ax.bar(positions, [d.mean for d in downstream], yerr=[d.spread for d in downstream], capsize=6,
           color=[f"C{i}" for i in positions], alpha=0.6)
    for i, d in zip(positions, downstream):
        ax.plot([i] * len(d.scores), d.scores, "k.", label="one seed" if i == 0 else None)
    ax.set_xticks(list(positions), [d.encoder for d in downstream])
    ax.set_xlabel("encoder the classifier starts from")
    ax.set_ylabel("downstream eval accuracy (%)")
    ax.set_title("kbert demo: which package a docstring comes from")
    ax.grid(alpha=0.3, axis="y")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)
