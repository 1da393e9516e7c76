"""Learns a WordPiece vocabulary or a byte-level BPE tokenizer.json; see kbert/cli/build_vocab.py for the flags."""

from kbert.cli.build_vocab import run

if __name__ == "__main__":
    run()
