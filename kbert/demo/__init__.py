"""kbert end to end on one machine with no downloads: `python -m kbert.demo` (or `bash tools/demo.sh`).

Standard-library docstring corpus (or your text) -> WordPiece vocabulary -> TFRecords (train + held-out) -> a tiny
BERT pretrained with LAMB, then an MSLT plan on the same data and steps -> held-out evaluation of both -> both
encoders and random-init ones measured on a downstream task built from the corpus (which package a docstring comes
from) by a frozen-encoder probe (and fine-tuning, if asked) -> a table, PNG plots and a last line saying whether
pretraining beat random init.
"""
