"""Predictions for a TSV/CSV/JSONL file from a fine-tuning run or its SavedModel; see kbert/cli/predict.py."""

from kbert.cli.predict import run

run()
