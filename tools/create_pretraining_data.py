"""Creates BERT pretraining TFRecords; see kbert/cli/create_pretraining_data.py for the flags."""

from kbert.cli.create_pretraining_data import run

if __name__ == "__main__":
    run()
