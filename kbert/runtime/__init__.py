"""What every kbert run stands on, pretraining, MSLT and fine-tuning alike: the strategy (TPU set-up included), the
devices check, the model_dir lease, preemption, checkpoint files and the optimizer factory.

Knows no training loop: `kbert.training` (pretraining) and `kbert.finetuning` each build theirs on it.
"""
