"""A training run's loss curve, read back from the TensorBoard scalars that `kbert-pretrain` writes.

Example:

```python
curve = read_loss_curve("/tmp/run", start_time=launched_at)
curve.steps, curve.seconds, curve.losses
```
"""

from __future__ import annotations

import dataclasses
import os

import tensorflow as tf
from tensorflow.core.util import event_pb2


@dataclasses.dataclass
class LossCurve:
    """Training loss by optimizer step; `seconds` since `start_time` (when each value was written)."""

    steps: list[int]
    seconds: list[float]
    losses: list[float]


def _train_event_files(model_dir: str) -> list[str]:
    """The event files of every `train` folder under `model_dir`, at any depth, sorted."""
    return sorted(
        os.path.join(folder, name)
        for folder, _, names in tf.io.gfile.walk(model_dir)
        if os.path.basename(folder.rstrip("/")) == "train"
        for name in names
        if name.startswith("events.out.tfevents.")
    )


def read_loss_curve(model_dir: str, start_time: float, tag: str = "loss") -> LossCurve:
    """Reads scalar `tag` from every `train` event directory under `model_dir` (MSLT writes one per stage), on any
    TensorFlow file system.

    Raises FileNotFoundError naming `model_dir` if no training summaries are there.
    """
    paths = _train_event_files(model_dir)
    points: dict[int, tuple[float, float]] = {}
    for path in paths:
        for record in tf.data.TFRecordDataset(path):
            event = event_pb2.Event.FromString(record.numpy())
            for value in event.summary.value:
                if value.tag == tag:
                    points[event.step] = (event.wall_time - start_time, float(tf.make_ndarray(value.tensor)))
    if not points:
        raise FileNotFoundError(
            f"No '{tag}' training summaries under {model_dir}; did the run write any (train.summary_interval)?"
        )
    steps = sorted(points)
    return LossCurve(steps, [points[s][0] for s in steps], [points[s][1] for s in steps])
