"""What kbert pretrains: each module one model and its objective, as the engine's `PretrainingTask`
(`kbert.training.task`)."""

from kbert.tasks.bert import BertPretrainingTask

__all__ = ["BertPretrainingTask"]
