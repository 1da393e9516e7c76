"""The fine-tuning recipe that every encoder of a comparison shares, written out as kbert-finetune's YAML config.

BERT's recipe is kbert-finetune's defaults (`kbert.finetuning.config`: AdamW with weight decay 0.01, warmup over
10% of the steps, linear decay, eval batches of 128); a `Recipe` adds the task, the vocabulary, the sequence length
and the peak rate, epochs and batch size that suit the comparison's models. Every value is written out, so a
config file holds the whole recipe and its run can be repeated by hand.

Invariant: the configs of one `Recipe` differ only in `train.init_checkpoint`, `train.seed` and the `model`
section (which a random init must give, and a pretrained encoder leaves to the run it comes from).

Example:

>>> recipe = Recipe({"name": "tsv", "train_file": "t.tsv", "eval_file": "e.tsv"}, "vocab.txt", seq_length=64,
...                 epochs=3, learning_rate=3e-4)
>>> config = finetune_config(recipe, "runs/full", seed=1)
>>> config["schedule"]
{'peak_learning_rate': 0.0003, 'warmup_fraction': 0.1, 'power': 1.0}
>>> config["train"]
{'epochs': 3, 'global_batch_size': 32, 'eval_batch_size': 128, 'init_checkpoint': 'runs/full', 'seed': 1}
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from kbert.finetuning.config import FinetuneConfig, FinetuneTrainConfig


@dataclasses.dataclass(frozen=True)
class Recipe:
    """What every fine-tuning run of a comparison shares; `task` is kbert-finetune's task section."""

    task: dict
    vocab_file: str
    seq_length: int
    epochs: int
    learning_rate: float
    batch_size: int = FinetuneTrainConfig.global_batch_size


def finetune_config(
    recipe: Recipe, init_checkpoint: str, model: Mapping[str, Any] | None = None, seed: int | None = None
) -> dict:
    """The kbert-finetune config of one run from `init_checkpoint` ("" for random init, which needs `model`, the
    pretraining runs' model section); without `seed`, kbert-finetune's default or the command line's."""
    bert = FinetuneConfig()  # BERT's recipe, as kbert-finetune's defaults hold it
    train = {
        "epochs": recipe.epochs,
        "global_batch_size": recipe.batch_size,
        "eval_batch_size": bert.train.eval_batch_size,
        "init_checkpoint": init_checkpoint,
    }
    return {
        "task": dict(recipe.task),
        # Left out for a pretrained encoder: kbert-finetune takes the model its checkpoint was trained as.
        **({"model": dict(model)} if model else {}),
        "data": {"vocab_file": recipe.vocab_file, "seq_length": recipe.seq_length},
        "optimizer": {"type": bert.optimizer.type, "weight_decay": bert.optimizer.weight_decay},
        "schedule": {
            "peak_learning_rate": recipe.learning_rate,
            "warmup_fraction": bert.schedule.warmup_fraction,
            "power": bert.schedule.power,
        },
        "train": {**train, **({} if seed is None else {"seed": seed})},
    }
