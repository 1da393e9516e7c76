"""The WordPiece vocabulary: its file (vocab_file.py: the reserved tokens' layouts and the one reader), learning one
from text (vocab_learning.py, kbert-build-vocab) and tokenizing text with one for data creation (tokenizer.py, on
tensorflow-text).

The modules are imported by name and this package imports nothing, so kbert-build-vocab on local files imports no
TensorFlow (tests/test_vocab.py).
"""
