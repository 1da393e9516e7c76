"""kbert.data.prepare_data: the user's text through the split, the vocabulary and the TFRecords; the default corpus
is the standard library's alone, whatever site-packages holds."""

import os
import random
import sysconfig

import pytest
from corpus_fixtures import WORDS

from kbert.data import docstring_corpus
from kbert.data.corpus_fingerprint import fingerprint
from kbert.data.prepare_data import DataSettings, prepare_data, write_docstring_corpus


def test_user_text_goes_through_the_data_steps(tmp_path):
    rng = random.Random(1)
    for part in range(2):
        (tmp_path / f"notes_{part}.txt").write_text(
            "".join(
                " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 12))).capitalize()
                + ". "
                + " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 12)))
                + ".\n\n"
                for _ in range(30)
            )
        )
    settings = DataSettings(
        text=[str(tmp_path / "notes_*.txt")],
        heldout_every=6,
        vocab_size=300,
        seq_length=32,
        max_predictions=5,
        num_workers=1,
    )
    prepared = prepare_data(settings, str(tmp_path / "data"), print_fn=lambda *a, **k: None)
    assert (tmp_path / "data" / "text.txt").read_text().count("\n\n") == 60
    assert prepared.train_instances > 0 and prepared.heldout_instances > 0
    assert prepared.vocab_size == len((tmp_path / "data" / "vocab.txt").read_text().splitlines())

    with pytest.raises(FileNotFoundError, match="--text"):
        prepare_data(
            DataSettings(text=[str(tmp_path / "missing_*.txt")]), str(tmp_path / "data2"), print_fn=lambda *a, **k: None
        )


def _stdlib_tree(root):
    """A fake standard library: two stdlib modules, a package distributions ship apart, a distribution's own
    addition, and the site-packages that pyenv and python.org builds nest inside it."""

    def module(path, text):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f'"""{text}"""\n')

    module(root / "email" / "__init__.py", "Email parses and writes messages with their headers and attachments.")
    module(root / "argparse.py", "Argparse turns the words of a command line into named and checked options.")
    module(root / "tkinter" / "__init__.py", "Tkinter draws windows, which some distributions ship on their own.")
    module(root / "sitecustomize.py", "A distribution's own start-up hook that is not part of the standard library.")
    return root / "site-packages"


def _fingerprint_of_stdlib(tmp_path, name):
    settings = DataSettings()
    corpus, sources = tmp_path / f"{name}.txt", tmp_path / f"{name}_sources.txt"
    write_docstring_corpus(settings, str(corpus), str(sources))
    return fingerprint(str(corpus)), sources.read_text().split()


def test_stdlib_corpus_fingerprint_is_independent_of_site_packages(tmp_path, monkeypatch):
    stdlib = tmp_path / "lib" / "python3.11"
    nested_site = _stdlib_tree(stdlib)
    paths = dict(sysconfig.get_paths(), stdlib=str(stdlib), purelib=str(nested_site), platlib=str(nested_site))
    monkeypatch.setattr(sysconfig, "get_paths", lambda *a, **k: paths)
    bare, bare_sources = _fingerprint_of_stdlib(tmp_path, "bare")

    # Packages installed into the nested site-packages and into a folder on sys.path, one named like a stdlib module.
    for site in (nested_site, tmp_path / "elsewhere"):
        for package in ("PIL", "email"):
            (site / package).mkdir(parents=True)
            (site / package / "__init__.py").write_text('"""Installed later: this docstring must never be in it."""\n')
    monkeypatch.syspath_prepend(str(tmp_path / "elsewhere"))
    installed, installed_sources = _fingerprint_of_stdlib(tmp_path, "installed")

    assert installed == bare and installed.documents == 2 and installed_sources == bare_sources == ["argparse", "email"]
    assert "Installed later" not in (tmp_path / "installed.txt").read_text()


def test_the_real_stdlib_walk_reads_the_stdlib_alone(tmp_path, monkeypatch):
    def walk():
        return list(
            docstring_corpus.iter_source_files([docstring_corpus.stdlib_root()], docstring_corpus.stdlib_modules())
        )

    files = walk()
    fake_site = tmp_path / "site-packages"
    (fake_site / "zz_extra").mkdir(parents=True)
    (fake_site / "zz_extra" / "__init__.py").write_text('"""An extra installed package."""\n')
    monkeypatch.syspath_prepend(str(fake_site))
    paths = dict(sysconfig.get_paths(), purelib=str(fake_site), platlib=str(fake_site))
    monkeypatch.setattr(sysconfig, "get_paths", lambda *a, **k: paths)
    assert walk() == files
    tops = {os.path.relpath(path, docstring_corpus.stdlib_root()).split(os.sep)[0] for path in files}
    assert {"email", "asyncio", "logging", "argparse.py"} <= tops
    assert not tops & {"site-packages", "dist-packages", "tkinter", "idlelib", "sitecustomize.py"}
