"""The docstring corpus builder: exact output on a fake package tree, determinism, skips, size cap."""

import textwrap

import pytest

from kbert.data import docstring_corpus


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")


@pytest.fixture
def package_tree(tmp_path):
    root = tmp_path / "site"
    _write(
        root / "alpha" / "__init__.py",
        '''
        """Alpha parses tiny files quickly. It never imports anything, e.g. a plugin.

        Example::

            alpha.parse("x")  # a literal block, dropped

        The second paragraph follows the block!
        """


        class Reader:
            """Reads one record at a time from an open file.

            >>> Reader(open("f")).read()
            'a record'

            Args:
              path: the file to read from, opened in binary mode.

            ```python
            reader = Reader(path)
            ```
            """

            def short(self):
                """Too short to keep."""
        ''',
    )
    _write(
        root / "alpha" / "control.py",
        '''
        def weird():
            """Looks like text at first \\x00\\x01\\x02 but carries control bytes inside it, many of them."""
        ''',
    )
    _write(
        root / "alpha" / "symbols.py",
        '''
        def table():
            """+---+---+---+---+ | 1 | 2 | 3 | 4 | +---+---+---+---+ ==== ---- ==== #### ****"""
        ''',
    )
    (root / "alpha" / "latin1.py").write_bytes(
        b'"""Caf\xe9 has a byte that is not UTF-8 in a file without a cookie."""\n'
    )
    (root / "alpha" / "blob.py").write_bytes(bytes(range(256)) * 4)
    _write(
        root / "alpha" / "tests" / "test_alpha.py",
        '''
        """A test module whose docstring must never reach the corpus at all."""
        ''',
    )
    _write(
        root / "beta.py",
        '''
        async def fetch():
            """Fetches a page over the network. Returns the body as bytes, or None on a timeout."""
        ''',
    )
    (root / "notes.txt").write_text("Not a Python file, so it is never read by the builder.\n")
    return root


EXPECTED = (
    "Alpha parses tiny files quickly.\n"
    "It never imports anything, e.g. a plugin.\n"
    "The second paragraph follows the block!\n"
    "\n"
    "Reads one record at a time from an open file.\n"
    "path: the file to read from, opened in binary mode.\n"
    "\n"
    "Fetches a page over the network.\n"
    "Returns the body as bytes, or None on a timeout.\n"
    "\n"
)


def test_fake_tree_gives_exact_corpus_and_counts(package_tree, tmp_path):
    out = tmp_path / "corpus.txt"
    stats = docstring_corpus.build_docstring_corpus(str(out), [str(package_tree)], max_bytes=None)
    assert out.read_text(encoding="utf-8") == EXPECTED
    assert stats == docstring_corpus.CorpusStats(
        files=4,
        files_skipped=2,
        documents=3,
        sentences=7,
        bytes=len(EXPECTED.encode()),
        docstrings_not_text=2,
        docstrings_too_short=1,
        truncated=False,
    )


def test_two_runs_are_byte_identical(package_tree, tmp_path):
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    docstring_corpus.build_docstring_corpus(str(first), [str(package_tree)])
    docstring_corpus.build_docstring_corpus(str(second), [str(package_tree)])
    assert first.read_bytes() == second.read_bytes()


def test_format_one_sentence_a_line_blank_line_between_documents(package_tree, tmp_path):
    out = tmp_path / "corpus.txt"
    docstring_corpus.build_docstring_corpus(str(out), [str(package_tree)])
    text = out.read_text(encoding="utf-8")
    assert text.endswith("\n\n") and "\n\n\n" not in text
    for document in text.strip("\n").split("\n\n"):
        for line in document.split("\n"):
            assert line == line.strip() and len(line.split()) >= 2
            assert not line.startswith((">>>", "```", "..")) and "alpha.parse" not in line


def test_max_bytes_keeps_whole_documents(package_tree, tmp_path):
    out = tmp_path / "corpus.txt"
    cap = len(EXPECTED.split("\n\n")[0]) + 2 + 10
    stats = docstring_corpus.build_docstring_corpus(str(out), [str(package_tree)], max_bytes=cap)
    assert stats.truncated and stats.documents == 1
    assert out.read_text(encoding="utf-8") == EXPECTED.split("\n\n")[0] + "\n\n"


def test_bad_arguments_fail_before_writing(package_tree, tmp_path):
    with pytest.raises(FileNotFoundError, match="no_such_dir"):
        docstring_corpus.build_docstring_corpus(str(tmp_path / "c.txt"), [str(tmp_path / "no_such_dir")])
    with pytest.raises(FileNotFoundError, match="Output directory"):
        docstring_corpus.build_docstring_corpus(str(tmp_path / "missing" / "c.txt"), [str(package_tree)])
    with pytest.raises(ValueError, match="max_bytes"):
        docstring_corpus.build_docstring_corpus(str(tmp_path / "c.txt"), [str(package_tree)], max_bytes=0)
    assert not list(tmp_path.glob("*.txt*"))


@pytest.mark.parametrize(
    "paragraph, sentences",
    [
        ("One thing. Two things! Three? 4 is a number.", ["One thing.", "Two things!", "Three?", "4 is a number."]),
        ("Use :func:`len` here, i.e. the builtin. Then ``stop``.", ["Use len here, i.e. the builtin.", "Then stop."]),
        ("version 1.2.3 is fine. ok", ["version 1.2.3 is fine. ok"]),
    ],
)
def test_split_sentences(paragraph, sentences):
    assert docstring_corpus.split_sentences(paragraph) == sentences
