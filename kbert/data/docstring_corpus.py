"""An embedded default corpus: the docstrings of the installed Python packages, in BERT's pretraining text format.

Every machine with Python has a few megabytes of English prose in its docstrings. This module walks the source
trees (the standard library and site-packages by default; `stdlib_root` and `stdlib_modules` for the standard
library alone, the same on every machine with the same CPython release) in sorted order, parses every ``.py`` file
with `ast` (nothing is imported, so no third-party code runs and the result depends only on the files), and writes
one document per module, class and function docstring: one sentence per line, a blank line between documents.
Doctests, code fences, literal blocks, section headers and code-like lines are dropped; docstrings that are not
text (control characters, replacement characters, mostly symbols) or too short are skipped and counted.

Example:

```python
from kbert.data import docstring_corpus
stats = docstring_corpus.build_docstring_corpus("corpus.txt", max_bytes=4 << 20)
print(stats.documents, stats.sentences, stats.bytes)
# The standard library only: what the demo reads
docstring_corpus.build_docstring_corpus("stdlib.txt", [docstring_corpus.stdlib_root()], max_bytes=None,
                                        modules=docstring_corpus.stdlib_modules())
```
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re
import sys
import sysconfig
import unicodedata
import warnings
from collections.abc import Callable, Iterator, Sequence, Set
from typing import BinaryIO

from kbert.data import outputs
from kbert.errors import ConfigError, MissingFileError

# Directories that are never library prose: tests are full of throwaway docstrings, and a stdlib tree may contain
# the site-packages tree, which would otherwise be read twice.
SKIPPED_DIRS = frozenset({"__pycache__", "test", "tests", "site-packages", "dist-packages", "node_modules"})
# Standard-library packages that Linux distributions ship as packages of their own (Debian: python3-tk,
# idle-python3.11, python3-distutils, python3-lib2to3, python3.11-venv; Fedora: python3-tkinter, python3-idle) or
# trim (Debian's ctypes has no macholib), so a python3.11 may lack them: the standard-library corpus leaves them out.
DISTRIBUTION_SPLIT = frozenset(
    {"ctypes", "distutils", "ensurepip", "idlelib", "lib2to3", "tkinter", "turtle", "turtledemo"}
)
# Generated sources (protobuf stubs, tables) can be megabytes of code with no prose; parsing them only costs time.
MAX_FILE_BYTES = 2 << 20

_SECTION_HEADERS = frozenset(
    "args arguments attributes example examples methods note notes parameters raises references returns todo "
    "warning warnings yields".split()
    + ["keyword args", "keyword arguments", "other parameters", "see also"]
)
_CODE_LINE = re.compile(
    r"^(def |class |import |from \S+ import |return\b|raise |yield\b|if .*:$|for .*:$|while .*:$|with .*:$|try:$"
    r"|except\b|else:$|elif |@\w|#|\$ |[\w.\[\]]+\s*[-+*/]?=\s*\S|[\w.]+\(.*\)$|[{}\[\]()<>]+$)"
)
_BULLET = re.compile(r"^([-*+•]|\d+[.)]|\(\w\))\s+")
_RST_ROLE = re.compile(r":[\w:.-]+:`([^`<]*?)(?:\s*<[^>]*>)?`")
_BACKTICKS = re.compile(r"`+([^`]*)`+")
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")
_ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "cf.", "Dr.", "Mr.", "Mrs.", "No.", "approx.", "resp.", "al.")


@dataclasses.dataclass
class CorpusStats:
    """What `build_docstring_corpus` read, wrote and skipped."""

    files: int = 0
    files_skipped: int = 0
    documents: int = 0
    sentences: int = 0
    bytes: int = 0
    docstrings_not_text: int = 0
    docstrings_too_short: int = 0
    truncated: bool = False


def default_roots() -> list[str]:
    """The standard library and site-packages directories of the running interpreter, existing ones only."""
    paths = sysconfig.get_paths()
    roots: list[str] = []
    for key in ("stdlib", "purelib", "platlib"):
        path = os.path.realpath(paths[key])
        if os.path.isdir(path) and path not in roots:
            roots.append(path)
    return roots


def stdlib_root() -> str:
    """The running interpreter's standard-library directory (sysconfig's "stdlib"), whatever site-packages or
    `sys.path` hold; a site-packages folder inside it is never walked (`SKIPPED_DIRS`)."""
    return os.path.realpath(sysconfig.get_paths()["stdlib"])


def stdlib_modules() -> frozenset[str]:
    """The top-level modules the standard-library corpus reads: `sys.stdlib_module_names` (compiled into the
    interpreter, so a distribution's additions such as sitecustomize.py are not in it) less `DISTRIBUTION_SPLIT`."""
    return frozenset(sys.stdlib_module_names) - DISTRIBUTION_SPLIT


def iter_source_files(roots: Sequence[str], modules: Set[str] | None = None) -> Iterator[str]:
    """Yields every ``.py`` file under `roots` once, in module order (files and packages sorted together by name),
    without following symlinked directories. With `modules`, only the top-level modules (``NAME.py``) and packages
    (``NAME/``) of a root that `modules` names are walked."""
    seen: set[str] = set()

    def walk(directory: str, top: bool) -> Iterator[str]:
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            if top and modules is not None and entry.name.removesuffix(".py") not in modules:
                continue
            if entry.is_dir(follow_symlinks=False):
                if entry.name not in SKIPPED_DIRS and not entry.name.startswith("."):
                    yield from walk(entry.path, False)
            elif entry.name.endswith(".py") and entry.is_file():
                real = os.path.realpath(entry.path)
                if real not in seen:
                    seen.add(real)
                    yield entry.path

    for root in roots:
        yield from walk(root, True)


def docstrings_in_source(source: bytes) -> list[str]:
    """The module, class and function docstrings of a Python source, in source order.

    Raises `SyntaxError` or `ValueError` when the bytes are not Python source (binary data, another encoding than
    the one declared, null bytes, Python 2 syntax).
    """
    with warnings.catch_warnings():
        # Invalid escape sequences in old sources warn (SyntaxWarning from 3.12) but parse; they are not our news.
        warnings.simplefilter("ignore")
        tree = ast.parse(source)
    found: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            text = ast.get_docstring(node, clean=True)
            if text:
                found.append(text)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def is_text(docstring: str) -> bool:
    """True for prose: no control or replacement characters, and letters make up most of the non-space text."""
    if any(c == "\ufffd" or (unicodedata.category(c) in ("Cc", "Cs", "Co") and c not in "\n\t") for c in docstring):
        return False
    visible = [c for c in docstring if not c.isspace()]
    return bool(visible) and sum(c.isalpha() for c in visible) >= 0.5 * len(visible)


def prose_paragraphs(docstring: str) -> list[str]:
    """The prose of a cleaned docstring as paragraph chunks: code, doctests and markup removed, one chunk per
    paragraph or list item, each still to be split into sentences."""
    chunks: list[list[str]] = [[]]
    literal_indent: int | None = None  # inside the indented literal block after a "::" line
    in_doctest = in_fence = False  # a doctest runs to the next blank line
    for raw in docstring.splitlines():
        line = raw.strip()
        indent = len(raw) - len(raw.lstrip())
        if line.startswith("```"):
            in_fence = not in_fence
            chunks.append([])
            continue
        if in_fence:
            continue
        if literal_indent is not None and (not line or indent > literal_indent):
            continue
        literal_indent = None
        in_doctest = bool(line) and (in_doctest or line.startswith(">>>"))
        if not line or in_doctest:
            chunks.append([])
            continue
        if line.endswith("::"):
            literal_indent = indent
            line = line[:-1]
        if line.startswith("..") or _looks_like_code(line) or line.rstrip(":").lower() in _SECTION_HEADERS:
            chunks.append([])
            continue
        if _BULLET.match(line):
            chunks.append([])
            line = _BULLET.sub("", line)
        chunks[-1].append(line)
    return [" ".join(chunk) for chunk in chunks if chunk]


def _looks_like_code(line: str) -> bool:
    visible = line.replace(" ", "")
    letters = sum(c.isalpha() for c in visible)
    return bool(_CODE_LINE.match(line)) or letters < 0.6 * len(visible)


def split_sentences(paragraph: str) -> list[str]:
    """Splits a paragraph into sentences at ``.``, ``!`` or ``?`` followed by a capital or a digit.

    A simple splitter: common abbreviations (e.g., i.e., etc.) never end a sentence.
    """
    text = _BACKTICKS.sub(r"\1", _RST_ROLE.sub(r"\1", paragraph))
    text = re.sub(r"\s+", " ", text).strip()
    sentences: list[str] = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        if text[: match.start()].endswith(_ABBREVIATIONS):
            continue
        sentences.append(text[start : match.start()].strip())
        start = match.end()
    sentences.append(text[start:].strip())
    return [s for s in sentences if s]


def document_sentences(docstring: str) -> list[str]:
    """The prose sentences of one docstring, one per item; sentences of a single word are dropped."""
    return [s for chunk in prose_paragraphs(docstring) for s in split_sentences(chunk) if len(s.split()) >= 2]


def build_docstring_corpus(
    output_path: str,
    roots: Sequence[str] | None = None,
    max_bytes: int | None = 8 << 20,
    min_words: int = 8,
    progress: Callable[[CorpusStats], None] | None = None,
    modules: Set[str] | None = None,
) -> CorpusStats:
    """Writes the docstring corpus of `roots` (default: `default_roots()`) to `output_path`.

    The same files give the same bytes: files are walked in sorted order and nothing depends on time, hashing or
    imports. Writing stops before the first document that would take the output past `max_bytes` (None: no cap).
    The file is written under a temporary name and renamed at the end, so an interrupted run leaves nothing partial.

    Args:
      output_path: the corpus file, one sentence per line, a blank line between documents.
      roots: directories to walk for ``.py`` files.
      max_bytes: size cap of the output in bytes.
      min_words: docstrings with fewer prose words are skipped (counted in `docstrings_too_short`).
      progress: called with the running stats after every file.
      modules: the top-level modules and packages of each root to read (`iter_source_files`); None: all.

    Returns:
      The `CorpusStats` of the run.
    """
    if max_bytes is not None and max_bytes <= 0:
        raise ConfigError(f"max_bytes={max_bytes}: give a positive size in bytes, or None for no cap.")
    roots = list(roots) if roots is not None else default_roots()
    missing = [r for r in roots if not os.path.isdir(r)]
    if missing:
        raise MissingFileError(f"Source roots {missing} are not directories; give existing package directories.")
    parent = os.path.dirname(os.path.abspath(output_path))
    if not os.path.isdir(parent):
        raise MissingFileError(f"Output directory {parent} does not exist; create it or choose another output file.")
    outputs.check_outputs([output_path], {})
    stats = CorpusStats()
    with outputs.staged(output_path) as temp, open(temp, "wb") as out:
        _write_documents(out, iter_source_files(roots, modules), max_bytes, min_words, progress, stats)
    return stats


def _write_documents(
    out: BinaryIO,
    paths: Iterator[str],
    max_bytes: int | None,
    min_words: int,
    progress: Callable[[CorpusStats], None] | None,
    stats: CorpusStats,
) -> None:
    for path in paths:
        for document in _file_documents(path, min_words, stats):
            data = ("\n".join(document) + "\n\n").encode("utf-8")
            if max_bytes is not None and stats.bytes + len(data) > max_bytes:
                stats.truncated = True
                return
            out.write(data)
            stats.documents += 1
            stats.sentences += len(document)
            stats.bytes += len(data)
        if progress is not None:
            progress(stats)


def _file_documents(path: str, min_words: int, stats: CorpusStats) -> Iterator[list[str]]:
    try:
        if os.path.getsize(path) > MAX_FILE_BYTES:
            raise ValueError("too large")
        with open(path, "rb") as f:
            docstrings = docstrings_in_source(f.read())
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        stats.files_skipped += 1
        return
    stats.files += 1
    for docstring in docstrings:
        if not is_text(docstring):
            stats.docstrings_not_text += 1
            continue
        sentences = document_sentences(docstring)
        if sum(len(s.split()) for s in sentences) < min_words:
            stats.docstrings_too_short += 1
            continue
        yield sentences
