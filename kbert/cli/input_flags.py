"""The data tools' input flags: which files, in which format, the text in which column, cut by which language's
sentence rules.

Example:

```python
define_input_flags()  # at import, beside the tool's own flags
files, input_format = input_files_and_format()  # in main()
```
"""

from __future__ import annotations

from absl import flags

from kbert.data import input_files
from kbert.data.work_units import FORMATS, InputFormat

FLAGS = flags.FLAGS


def define_input_flags(sentences: bool = False) -> None:
    """--input_file, --input_format, --text_column, and with `sentences` --sentence_language."""
    flags.DEFINE_string("input_file", None, "Input: comma-separated list of globs (folders for hf_dataset).")
    flags.DEFINE_enum(
        "input_format",
        "text",
        list(FORMATS),
        "text: one sentence a line, a blank line between documents (BERT's format); jsonl, csv, "
        "parquet (needs kbert[parquet]), hf_dataset (a datasets.Dataset.save_to_disk folder; needs "
        "kbert[hf]): one document a record, its text in --text_column.",
    )
    flags.DEFINE_string("text_column", "text", "The column (JSON field) holding a record's text.")
    if sentences:
        flags.DEFINE_string(
            "sentence_language",
            "en",
            "Language code whose rules (sentencex) cut a record's lines into sentences, for sentence pairs.",
        )
    flags.mark_flag_as_required("input_file")


def input_files_and_format() -> tuple[list[str], InputFormat]:
    """The files (or dataset folders) the flags name, and their `InputFormat`."""
    language = FLAGS.sentence_language if "sentence_language" in FLAGS else "en"
    input_format = InputFormat(FLAGS.input_format, FLAGS.text_column, language)
    return input_files.expand_patterns(
        FLAGS.input_file, "--input_file", folders=FLAGS.input_format == "hf_dataset"
    ), input_format
