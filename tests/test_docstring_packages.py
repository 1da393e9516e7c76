"""kbert.data.docstring_packages: every document of a docstring corpus is given the package it comes from."""

import pytest
from corpus_fixtures import fake_package

from kbert.data import docstring_corpus, docstring_packages


@pytest.mark.parametrize("max_bytes", [None, 2000])
def test_every_corpus_document_is_given_its_package(tmp_path, max_bytes):
    root = fake_package(tmp_path / "site", modules=5, functions=4)
    recorder = docstring_packages.DocumentSources([str(root)])
    stats = docstring_corpus.build_docstring_corpus(
        str(tmp_path / "corpus.txt"), [str(root)], max_bytes=max_bytes, progress=recorder
    )
    # Modules 0 and 3 are pkg_a.py, 1 and 4 pkg_b/, 2 pkg_c/, walked in name order: pkg_a.py, pkg_b/, pkg_c/.
    expected = ["pkg_a"] * 8 + ["pkg_b"] * 8 + ["pkg_c"] * 4
    assert stats.truncated == (max_bytes is not None)
    assert recorder.packages(stats.documents) == expected[: stats.documents]
    assert docstring_packages.package_of(str(root / "pkg_b" / "module_1.py"), [str(tmp_path), str(root)]) == "pkg_b"
