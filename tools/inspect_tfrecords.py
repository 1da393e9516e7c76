"""Validates and summarises pretraining TFRecords; see kbert/cli/inspect_tfrecords.py for the flags."""

from kbert.cli.inspect_tfrecords import run

run()
