import polars as pl
import pytest

from dagster_ir.collections.config import CollectionConfigError, load_collections_config
from dagster_ir.collections.cranfield import read_cranfield
from dagster_ir.collections.known_ids import UnknownIdError, check_known_ids
from dagster_ir.retrieval.trec import read_qrels, read_run

QUERIES = pl.Series(["1", "2", "3"])
DOCS = pl.Series(["d1", "d2", "d3"])


def _qrels(tmp_path, text):
    path = tmp_path / "qrels.txt"
    path.write_text(text)
    return path, read_qrels(path)


def test_known_ids_pass_unchanged(tmp_path):
    path, qrels = _qrels(tmp_path, "1 0 d1 1\n2 0 d2 0\n3 0 d3 2\n")
    checked, found = check_known_ids(qrels, query_ids=QUERIES, doc_ids=DOCS, source=path, what="qrels")
    assert checked.equals(qrels) and found.rows_dropped == 0


def test_an_unknown_query_is_an_error_naming_file_line_and_id(tmp_path):
    path, qrels = _qrels(tmp_path, "1 0 d1 1\n2 0 d2 0\n41 0 d3 1\n3 0 d9 1\n")
    with pytest.raises(UnknownIdError) as raised:
        check_known_ids(qrels, query_ids=QUERIES, doc_ids=DOCS, source=path, what="qrels", collection="tiny")
    message = str(raised.value)
    assert message.startswith(f"{path}:3: qrels names unknown query id '41', not in the topics")
    assert "2 rows name unknown ids" in message and "on_unknown: drop" in message and "collections.tiny" in message
    assert "\n" not in message


def test_an_unknown_document_is_an_error_naming_its_line(tmp_path):
    path, qrels = _qrels(tmp_path, "1 0 d1 1\n2 0 nosuchdoc 1\n")
    lazy_corpus = pl.LazyFrame({"doc_id": DOCS, "text": ["a", "b", "c"]})  # as the corpus asset streams it
    with pytest.raises(
        UnknownIdError, match=r"qrels.txt:2: qrels names unknown document id 'nosuchdoc', not in the corpus"
    ):
        check_known_ids(qrels, query_ids=QUERIES, doc_ids=lazy_corpus, source=path, what="qrels")


def test_drop_removes_and_counts_the_rows(tmp_path):
    path, qrels = _qrels(tmp_path, "1 0 d1 1\n41 0 d1 1\n2 0 nosuchdoc 1\n3 0 d3 1\n")
    checked, found = check_known_ids(
        qrels, query_ids=QUERIES, doc_ids=DOCS, source=path, what="qrels", on_unknown="drop"
    )
    assert checked.rows() == [("1", "d1", 1), ("3", "d3", 1)]
    assert (found.rows_dropped, found.unknown_queries, found.unknown_documents) == (2, 1, 1)


def test_runs_are_checked_the_same_way(tmp_path):
    path = tmp_path / "ext.trec"
    path.write_text("1 Q0 d1 1 2.0 ext\n1 Q0 d7 2 1.0 ext\n")
    with pytest.raises(UnknownIdError, match=r"ext.trec:2: run 'ext' names unknown document id 'd7'"):
        check_known_ids(read_run(path), query_ids=QUERIES, doc_ids=DOCS, source=path, what="run 'ext'")


def test_on_unknown_is_read_per_collection(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(
        "collections:\n  a:\n    kind: irds\n    dataset: x\n    on_unknown: drop\n"
        "  b:\n    kind: irds\n    dataset: y\n"
    )
    specs = load_collections_config(config)
    assert specs["a"].on_unknown == "drop" and specs["b"].on_unknown == "error"
    config.write_text("collections:\n  a:\n    kind: irds\n    dataset: x\n    on_unknown: ignore\n")
    with pytest.raises(CollectionConfigError, match=r"collections.a.on_unknown: expected one of \['error', 'drop'\]"):
        load_collections_config(config)


def test_cranfield_names_only_known_ids(shared_cranfield):
    corpus, queries, qrels = read_cranfield(shared_cranfield)
    _, found = check_known_ids(
        qrels,
        query_ids=queries["query_id"],
        doc_ids=corpus["doc_id"],
        source=shared_cranfield / "cranqrel",
        what="qrels",
    )
    assert found.rows_dropped == 0


@pytest.fixture
def shared_cranfield():
    from pathlib import Path

    path = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "cranfield"
    if not path.is_dir():
        pytest.skip("../shared/data/cranfield is absent")
    return path
