"""The demo's results: a table (printed and saved as Markdown), PNG plots of loss against step and time, and a
PNG of the downstream scores, every seed shown.

Example:

```python
runs = [RunResult("full", curve, 210.0, eval_metrics), RunResult("mslt", curve2, 120.0, eval2, [240, 480])]
downstream = [DownstreamScores("full", PROBE, [], [84.4]), DownstreamScores("mslt", PROBE, [], [81.9]),
              DownstreamScores("random", PROBE, [1, 2, 3], [70.0, 75.0, 67.5])]
print(results_table(runs, downstream))
plot_losses(runs, "out/loss_vs_step.png", "out/loss_vs_time.png")
plot_downstream(downstream, "out/downstream.png")
```
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from kbert.demo.history import LossCurve
from kbert.finetuning.seed_scores import format_scores, mean_and_spread

RANDOM_INIT = "random"
# The downstream measures: a frozen-encoder probe (kbert.finetuning.probe) and kbert-finetune; their column titles.
PROBE, FINETUNE = "probe", "finetune"
MEASURES = {PROBE: "probe acc %", FINETUNE: "fine-tuned acc %"}


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
    """Downstream eval accuracy (percent) of one encoder ("full", "mslt" or `RANDOM_INIT`) by one measure (`PROBE`
    or `FINETUNE`), the score of each seed in `seeds`; a pretrained encoder's probe is one score of no seed
    (`seeds` empty). `mean` and `spread` (sample standard deviation, 0 with one score) follow from `scores`."""

    encoder: str
    measure: str
    seeds: list[int]
    scores: list[float]
    mean: float = dataclasses.field(init=False)
    spread: float = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.mean, self.spread = mean_and_spread(self.scores)

    def __str__(self) -> str:
        """Every score, then with several their mean ± spread: `70.0, 75.0, 67.5 (70.8 ± 3.8)`."""
        each = ", ".join(f"{score:.1f}" for score in self.scores)
        return f"{each} ({format_scores(self.scores)})" if len(self.scores) > 1 else each


def results_table(runs: Sequence[RunResult], downstream: Sequence[DownstreamScores] = ()) -> str:
    """A Markdown table: steps, wall time, speed against the first run, final training loss, held-out MLM metrics
    and a column of downstream accuracy per measure in `downstream`, every seed shown (a last row for the
    random-init encoder)."""
    scores = {(d.encoder, d.measure): d for d in downstream}
    measures = _measures(downstream)
    header = "| run | steps | wall time (s) | speedup | final train loss | held-out MLM loss | held-out MLM acc |"
    rule = "|---|---:|---:|---:|---:|---:|---:|"
    for measure in measures:
        header += f" {MEASURES[measure]}{_seeds_note(scores.get((RANDOM_INIT, measure)))} |"
        rule += "---:|"
    rows = [header, rule]
    baseline = runs[0].wall_seconds
    for run in runs:
        e = run.eval
        rows.append(
            f"| {run.name} | {run.curve.steps[-1]} | {run.wall_seconds:.1f} | {baseline / run.wall_seconds:.2f}x "
            f"| {run.curve.losses[-1]:.4f} | {e['masked_lm_loss']:.4f} | {e['masked_lm_accuracy']:.4f} |"
            + "".join(_score_cell(scores.get((run.name, m))) for m in measures)
        )
    if any(encoder == RANDOM_INIT for encoder, _ in scores):
        rows.append(
            "| random init | 0 | | | | | |" + "".join(_score_cell(scores.get((RANDOM_INIT, m))) for m in measures)
        )
    return "\n".join(rows)


def _measures(downstream: Sequence[DownstreamScores]) -> list[str]:
    """The measures `downstream` has scores of, in `MEASURES` order: the table's columns and the plot's panels."""
    return [m for m in MEASURES if any(d.measure == m for d in downstream)]


def _seeds_note(scores: DownstreamScores | None) -> str:
    """`, seeds 1-5` for the seeds of a measure's runs (the random-init encoder has them all)."""
    if not scores or not scores.seeds:
        return ""
    seeds = scores.seeds
    return f", seed {seeds[0]}" if len(seeds) == 1 else f", seeds {seeds[0]}-{seeds[-1]}"


def _score_cell(scores: DownstreamScores | None) -> str:
    return f" {scores} |" if scores else " |"


def plot_losses(runs: Sequence[RunResult], step_png: str, time_png: str) -> None:
    """Writes training loss against optimizer step (MSLT stage ends dotted) and against wall-clock seconds."""
    import matplotlib

    matplotlib.use("Agg")  # files only: works without a display
    from matplotlib import pyplot as plt

    for path, axis, label in ((step_png, "steps", "optimizer step"), (time_png, "seconds", "wall time (s)")):
        fig, ax = plt.subplots(figsize=(6, 4), dpi=80)
        for run in runs:
            (line,) = ax.plot(getattr(run.curve, axis), run.curve.losses, marker=".", label=run.name)
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
    """Writes one panel per measure: a bar per encoder (its mean downstream accuracy) with each score as a dot."""
    import matplotlib

    matplotlib.use("Agg")  # files only: works without a display
    from matplotlib import pyplot as plt

    measures = _measures(downstream)
    fig, axes = plt.subplots(1, len(measures), figsize=(6 * len(measures), 4), dpi=80, squeeze=False)
    for ax, measure in zip(axes[0], measures):
        shown = [d for d in downstream if d.measure == measure]
        positions = range(len(shown))
        ax.bar(positions, [d.mean for d in shown], color=[f"C{i}" for i in positions], alpha=0.6)
        for i, d in zip(positions, shown):
            ax.plot([i] * len(d.scores), d.scores, "k.", label="one score (one per seed)" if i == 0 else None)
        ax.set_xticks(list(positions), [d.encoder for d in shown])
        ax.set_xlabel("encoder")
        ax.set_ylabel(f"{MEASURES[measure]} (eval)")
        ax.set_title(f"kbert demo: which package a docstring comes from ({measure})")
        ax.grid(alpha=0.3, axis="y")
        ax.legend()
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)
