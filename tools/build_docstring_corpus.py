"""Builds the docstring corpus; see kbert/cli/build_docstring_corpus.py for the flags."""

from kbert.cli.build_docstring_corpus import run

run()
