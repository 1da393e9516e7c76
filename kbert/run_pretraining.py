"""`python -m kbert.run_pretraining`: the same as `kbert-pretrain` (kbert/cli/pretrain.py), for the docs and scripts
that call it so."""

from kbert.cli.pretrain import run

if __name__ == "__main__":
    run()
