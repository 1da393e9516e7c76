"""kbert end to end on one machine with no downloads: `python -m kbert.demo` (or `bash tools/demo.sh`).

Docstring corpus (or your text) -> WordPiece vocabulary -> TFRecords (train + held-out) -> a tiny BERT pretrained
with LAMB, then an MSLT plan on the same data and steps -> held-out evaluation of both -> both encoders and a
random-init one fine-tuned on a downstream task built from the corpus (which package a docstring comes from) -> a
table and PNG plots.
"""
