"""`python -m kbert.run_finetuning`: the same as `kbert-finetune` (kbert/cli/finetune.py), for the docs and scripts
that call it so."""

from kbert.cli.finetune import run

if __name__ == "__main__":
    run()
