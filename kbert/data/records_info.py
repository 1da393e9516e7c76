"""Which tokenizer pretraining records were written with, kept beside them: `kbert_records.json` in each folder
kbert-create-pretraining-data writes records to, `{"tokenizer": FILE, "tokenizer_sha256": HEX, "vocab_size": N}`
(FILE: the tokenizer.json or the WordPiece vocabulary, as the run named it). kbert-pretrain compares the
tokenizer it is given (data.tokenizer or data.vocab_file) with it before training: records are never read nor
masked with another tokenizer's ids. One tokenizer a folder: a later run writing records to a folder replaces it.

The file is staged with the records (tfrecord_writer.ShardedWriter's `beside`) and moved into place after them, only
when they are. kbert's input globs never match it (input_files.py), so `data/*` still names only the records.

Example:

```python
with ShardedWriter(outputs, beside=records_info_files(outputs, checked)) as writer:
    ...
write_records_info(outputs, checked)  # after Beam wrote the records
tokenizer_mismatch("data/train.tfrecord-*", "data.train_files", "tokenizers/modernbert", "data.tokenizer")  # or None
```
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kbert.data import input_files, outputs, storage
from kbert.data.hf_tokenizer import tokenizer_file
from kbert.data.input_files import RECORDS_INFO
from kbert.data.storage import io_errors
from kbert.errors import InputDataError

if TYPE_CHECKING:  # its WordPiece tokenizer imports tensorflow_text, which kbert-pretrain needs not
    from kbert.data.tokenizer_source import CheckedTokenizer


def _info_paths(files: Sequence[str]) -> list[str]:
    """The records-info file of each folder holding one of `files`, in first-seen order."""
    return list(dict.fromkeys(posixpath.join(outputs.output_folder(f), RECORDS_INFO) for f in files))


def records_info_files(output_files: Sequence[str], tokenizer: CheckedTokenizer) -> dict[str, str]:
    """The records-info file of each folder of `output_files`: path -> its text (`ShardedWriter`'s `beside`)."""
    info = {"tokenizer": tokenizer.file, "tokenizer_sha256": tokenizer.sha256}
    text = json.dumps({**info, "vocab_size": tokenizer.special_ids.vocab_size}, indent=2) + "\n"
    return {path: text for path in _info_paths(output_files)}


def write_records_info(output_files: Sequence[str], tokenizer: CheckedTokenizer) -> None:
    """Writes the records-info files of `output_files`, each staged, for records another writer has moved into
    place (Beam's)."""
    for path, text in records_info_files(output_files, tokenizer).items():
        with outputs.staged(path) as temp, io_errors(temp, "--output_file"), storage.open(temp, "w") as f:
            f.write(text)


def tokenizer_mismatch(file_pattern: str, files_key: str, tokenizer: str, key: str) -> str | None:
    """What is wrong, in one line naming both files, when a folder of the records `file_pattern` (config key
    `files_key`) holds a records-info file whose tokenizer has another SHA-256 than `tokenizer` (a tokenizer.json,
    its directory or a vocabulary file: config key `key`); None when none does (records without one are taken as
    they are). A records-info file that is not one is an `InputDataError`."""
    given = tokenizer_file(tokenizer)
    digest = ""
    for path in _info_paths(input_files.match_files(file_pattern, files_key)):
        if not storage.exists(path):
            continue
        with io_errors(path, files_key), storage.open(path) as f:
            text = f.read()
        try:
            info = json.loads(text)
            recorded, recorded_sha256 = info["tokenizer"], info["tokenizer_sha256"]
        except (ValueError, TypeError, KeyError) as e:
            raise InputDataError(
                f"{files_key}: {path} is not a kbert records-info file ({type(e).__name__}: {e}); remove it, or "
                "write the records again with kbert-create-pretraining-data."
            ) from None
        digest = digest or storage.sha256(given, key)
        if recorded_sha256 != digest:
            return (
                f"{key}={tokenizer}: {given} (sha256 {digest[:12]}) is not the tokenizer the records beside {path} "
                f"were written with, {recorded} (sha256 {recorded_sha256[:12]}): give {key} that tokenizer, or "
                "write the records again with this one."
            )
    return None
