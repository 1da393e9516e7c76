"""kbert.data.storage: the same file operations on local paths (os, open) and URLs (tf.io.gfile, here TensorFlow's
in-memory ram://), and their errors as one-line KbertErrors."""

import errno
import os
import re
import uuid

import pytest

from kbert.data import input_files, outputs, storage
from kbert.data.wordpiece import vocab_file
from kbert.errors import InputDataError, KbertError, MissingFileError, OutputInUseError


@pytest.fixture(params=["local", "ram"])
def folder(request, tmp_path):
    return str(tmp_path) if request.param == "local" else f"ram://storage-{uuid.uuid4().hex}/data"


def test_files_are_written_read_found_moved_and_removed_alike(folder):
    storage.makedirs(f"{folder}/sub")
    storage.makedirs(f"{folder}/sub")  # no error when it exists
    with storage.open(f"{folder}/a.txt", "w") as f:
        f.write("één\r\ntwee\n")
    assert list(input_files.raw_lines(f"{folder}/a.txt")) == ["één\r\n".encode(), b"twee\n"]  # line ends as stored
    with storage.open(f"{folder}/.hidden.txt", "wb") as f:
        f.write(b"x\n")
    assert sorted(storage.glob(f"{folder}/*.txt")) == [f"{folder}/.hidden.txt", f"{folder}/a.txt"]
    assert storage.isdir(f"{folder}/sub") and not storage.isdir(f"{folder}/a.txt")
    storage.move(f"{folder}/a.txt", f"{folder}/.hidden.txt")  # over an existing file
    assert not storage.exists(f"{folder}/a.txt")
    with storage.open(f"{folder}/.hidden.txt", "rb") as f:
        assert f.read() == "één\r\ntwee\n".encode()
    storage.remove(f"{folder}/.hidden.txt")
    assert not storage.exists(f"{folder}/.hidden.txt")


def test_data_tools_read_and_write_either_kind_of_path(folder):
    storage.makedirs(folder)
    with outputs.staged(f"{folder}/out/vocab.txt") as temp, storage.open(temp, "w") as f:
        f.write("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nword\n")
    assert input_files.expand_patterns(f"{folder}/out/*.txt", "--vocab_file") == [f"{folder}/out/vocab.txt"]
    assert vocab_file.read_vocabulary(f"{folder}/out/vocab.txt")[-1] == "word"


def test_a_second_run_writing_the_same_output_refuses_and_leaves_the_first_ones_file(tmp_path):
    path = str(tmp_path / "out" / "train.tfrecord")
    with outputs.staged(path) as temp:
        with open(temp, "w") as f:
            f.write("the first run's records")
        in_use = f"^--output_file: {re.escape(path)} is being written by another run \\(it holds {re.escape(temp)}\\)"
        with pytest.raises(OutputInUseError, match=in_use):
            with outputs.staged(path):
                raise AssertionError("the second run must not start")
        with open(temp) as f:
            assert f.read() == "the first run's records"
    with open(path) as f:
        assert f.read() == "the first run's records"
    # The first run's lock went with it; a file a killed run left staged is emptied, not appended to.
    os.makedirs(os.path.dirname(outputs.staging_path(path)))
    with open(outputs.staging_path(path), "w") as f:
        f.write("a killed run's bytes")
    with outputs.staged(path) as temp, open(temp, "a") as f:
        f.write("again")
    with open(path) as f:
        assert f.read() == "again"
    assert not os.path.exists(os.path.dirname(outputs.staging_path(path)))


def test_missing_files_are_missing_file_errors_naming_flag_and_path(folder):
    with pytest.raises(MissingFileError, match=f"^--vocab_file: {folder}/none.txt: it does not exist"):
        vocab_file.read_vocabulary(f"{folder}/none.txt")


def test_local_errors_say_what_to_do():
    cases = [
        (IsADirectoryError(errno.EISDIR, "Is a directory"), KbertError, "a directory stands where a file"),
        (FileExistsError(errno.EEXIST, "File exists"), KbertError, "a directory stands .* or a file where"),
        (PermissionError(errno.EACCES, "Permission denied"), KbertError, "permission denied; fix"),
        (OSError(errno.ENOSPC, "No space left on device"), KbertError, "out of space"),
        (OSError(errno.EIO, "Input/output error"), KbertError, r"see the cause \(OSError: Input/output error\)"),
    ]
    for error, kind, fix in cases:
        with pytest.raises(kind, match=f"^--output_file: out.txt: {fix}"):
            with storage.io_errors("out.txt", "--output_file"):
                raise error


def test_kberts_own_errors_pass_through():
    error = MissingFileError("--input_file: no file matches 'x*'")  # a FileNotFoundError, so an OSError too
    with pytest.raises(MissingFileError) as raised, storage.io_errors("x", "--input_file"):
        raise error
    assert raised.value is error
    with pytest.raises(InputDataError, match="^bad$"), storage.io_errors("x", "--input_file"):
        raise InputDataError("bad")
