"""kbert.data.text_corpus: BERT's text format read into documents, and written split into train and held-out
text."""

import pytest

from kbert.data.text_corpus import read_documents, write_split


def test_documents_are_runs_of_lines_between_blank_lines(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text("a one.\na two.\n\n\nb one.\n\n")
    assert list(read_documents([str(path)])) == [["a one.", "a two."], ["b one."]]


def test_what_the_split_writes_reads_back_as_the_same_documents(tmp_path):
    documents = [[f"doc {d} sentence {s} ." for s in range(3)] for d in range(8)]
    write_split(documents, str(tmp_path / "train.txt"), str(tmp_path / "heldout.txt"), heldout_every=4)
    assert list(read_documents([str(tmp_path / "train.txt"), str(tmp_path / "heldout.txt")])) == [
        documents[i] for i in (0, 1, 2, 4, 5, 6, 3, 7)
    ]


def test_user_text_is_resplit_and_held_out_at_a_stride(tmp_path):
    source = tmp_path / "notes.txt"
    source.write_text(
        "".join(f"Paragraph {i} starts here.\nIt wraps onto a second line. Then ends!\n\n" for i in range(8))
    )
    stats = write_split(
        read_documents([str(source)], resplit=True),
        str(tmp_path / "train.txt"),
        str(tmp_path / "heldout.txt"),
        heldout_every=4,
    )
    assert (stats.train_documents, stats.heldout_documents) == (6, 2)
    assert (tmp_path / "heldout.txt").read_text().split("\n\n")[0] == (
        "Paragraph 3 starts here.\nIt wraps onto a second line.\nThen ends!"
    )
    with pytest.raises(ValueError, match="at least 20"):
        write_split(
            read_documents([str(source)], resplit=True),
            str(tmp_path / "a.txt"),
            str(tmp_path / "b.txt"),
            heldout_every=20,
        )
