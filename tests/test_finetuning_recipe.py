"""kbert.finetuning.recipe: every fine-tuning run of a comparison gets the same recipe and task, and kbert-finetune
reads it as written."""

import yaml

from kbert.finetuning.config import load_finetune_config
from kbert.finetuning.recipe import Recipe, finetune_config

TASK = {
    "name": "tsv",
    "train_file": "t.tsv",
    "eval_file": "e.tsv",
    "text_a_column": "text",
    "text_b_column": "",
    "label_column": "label",
}


def test_every_finetuning_run_of_a_comparison_gets_the_recipe_task_and_differs_only_in_init_and_seed():
    recipe = Recipe(TASK, "vocab.txt", seq_length=64, epochs=3, learning_rate=1e-3)
    pretrained = finetune_config(recipe, "runs/full", seed=1)
    random_init = finetune_config(recipe, "", {"bert": "bert_tiny"}, seed=2)
    assert pretrained["task"] == random_init["task"] == TASK and pretrained["task"] is not TASK
    assert (
        pretrained["schedule"]
        == random_init["schedule"]
        == {"peak_learning_rate": 1e-3, "warmup_fraction": 0.1, "power": 1.0}
    )
    assert (pretrained["train"]["init_checkpoint"], pretrained["train"]["seed"]) == ("runs/full", 1)
    assert (random_init["train"]["init_checkpoint"], random_init["train"]["seed"]) == ("", 2)
    assert {k: v for k, v in pretrained["train"].items() if k not in ("init_checkpoint", "seed")} == {
        k: v for k, v in random_init["train"].items() if k not in ("init_checkpoint", "seed")
    }
    assert "model" not in pretrained and random_init["model"] == {"bert": "bert_tiny"}


def test_kbert_finetune_loads_the_config_with_the_recipe_and_bert_defaults(tmp_path):
    path = tmp_path / "finetune.yaml"
    path.write_text(yaml.safe_dump(finetune_config(Recipe(TASK, "vocab.txt", 64, 2, 3e-4, batch_size=16), "runs/full")))
    loaded = load_finetune_config([str(path)])
    assert (loaded.train.epochs, loaded.train.global_batch_size, loaded.schedule.peak_learning_rate) == (2, 16, 3e-4)
    assert (loaded.optimizer.type, loaded.optimizer.weight_decay, loaded.train.seed) == ("adamw", 0.01, 12345)
