"""Packs pretraining TFRecords; see kbert/cli/pack_pretraining_data.py for the flags."""

from kbert.cli.pack_pretraining_data import run

if __name__ == "__main__":
    run()
