"""Builds the embedded default corpus from the docstrings of the installed Python packages.

    python tools/build_docstring_corpus.py --output_file=corpus.txt --max_bytes=4000000

One sentence per line, a blank line between documents (one document per module, class or function docstring):
the input format of kbert-build-vocab and kbert-create-pretraining-data. Same machine, same bytes.
"""

from __future__ import annotations

import os
import time

from absl import flags

from kbert.cli import entry
from kbert.data import docstring_corpus

FLAGS = flags.FLAGS
flags.DEFINE_string("output_file", None, "Where to write the corpus (its directory is created if absent).")
flags.DEFINE_list("roots", None, "Directories to walk for .py files; default: the standard library and site-packages.")
flags.DEFINE_integer("max_bytes", 8 << 20, "Stop before the first document that would take the corpus past this size.")
flags.DEFINE_integer("min_words", 8, "Skip docstrings with fewer prose words than this.")
flags.mark_flag_as_required("output_file")


def main(argv: list[str]) -> None:
    del argv
    roots = FLAGS.roots or docstring_corpus.default_roots()
    os.makedirs(os.path.dirname(os.path.abspath(FLAGS.output_file)), exist_ok=True)
    start = time.time()
    print(f"reading docstrings under {', '.join(roots)}")

    def progress(stats: docstring_corpus.CorpusStats) -> None:
        if (stats.files + stats.files_skipped) % 200 == 0:
            print(
                f"\r{stats.files:,} files, {stats.documents:,} documents, {stats.bytes / 1e6:,.1f} MB",
                end="",
                flush=True,
            )

    stats = docstring_corpus.build_docstring_corpus(
        FLAGS.output_file, roots, max_bytes=FLAGS.max_bytes, min_words=FLAGS.min_words, progress=progress
    )
    print()
    print(format_summary(stats, time.time() - start, FLAGS.output_file))


def format_summary(stats: docstring_corpus.CorpusStats, seconds: float, output_file: str) -> str:
    """The one-line closing summary of a corpus build."""
    cap = " (stopped at --max_bytes)" if stats.truncated else ""
    return (
        f"corpus: {stats.documents:,} documents, {stats.sentences:,} sentences, {stats.bytes:,} bytes{cap} from "
        f"{stats.files:,} files ({stats.files_skipped:,} skipped: not Python text or too large); docstrings skipped: "
        f"{stats.docstrings_not_text:,} not text, {stats.docstrings_too_short:,} too short; {seconds:,.1f} s "
        f"-> {output_file}"
    )


def run() -> None:
    entry.run(main, "kbert-build-docstring-corpus")


if __name__ == "__main__":
    run()
