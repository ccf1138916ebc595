from pathlib import Path

import polars as pl
import pytest

from dagster_ir.collections.cranfield import (
    CranfieldFormatError,
    read_cranfield,
    read_cranfield_docs,
    read_cranfield_qrels,
    read_cranfield_queries,
)
from dagster_ir.schemas import CORPUS, QRELS, QUERIES

SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "cranfield"


def write(tmp_path, name: str, data: bytes | str) -> Path:
    path = tmp_path / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


# --- the format's rules on tiny files --------------------------------------------------------------


def test_docs_fields_keep_inner_newlines_and_drop_author_and_bib(tmp_path):
    text = ".I 1\n.T\nwing in a\nslipstream .\n.A\nsmith\n.B\nj. ae.\n.W\n  line one\nline two  \n"
    path = write(tmp_path, "docs", text + ".I 2\n.T\nt\n.W\nw\n")
    assert read_cranfield_docs(path).rows() == [("1", "wing in a\nslipstream .", "line one\nline two"), ("2", "t", "w")]
    assert read_cranfield_docs(path).schema == CORPUS


def test_marker_line_rest_is_discarded_and_lines_before_markers_extend_the_id(tmp_path):
    # ir_datasets switches field on any line *starting* with a marker and appends pre-marker lines to the id
    path = write(tmp_path, "docs", ".I 7\n.Tignored\ntitle\n.Wignored too\ntext\n")
    assert read_cranfield_docs(path).rows() == [("7", "title", "text")]
    odd = write(tmp_path, "odd", ".I 7\nx\n.T\nt\n")
    assert read_cranfield_docs(odd)["doc_id"].to_list() == ["7\nx"]


def test_queries_are_renumbered_in_file_order_and_crlf_is_read(tmp_path):
    path = write(tmp_path, "qry", b".I 001\r\n.W\r\nwhat similarity\r\nlaws .\r\n.I 004\r\n.W\r\nheat .\r\n")
    frame = read_cranfield_queries(path)
    assert frame.rows() == [("1", "what similarity\nlaws ."), ("2", "heat .")]
    assert frame.schema == QUERIES


def test_qrels_keep_the_raw_codes(tmp_path):
    path = write(tmp_path, "qrel", "1 184 2 \n1 29 -1\n2 12 4")
    frame = read_cranfield_qrels(path)
    assert frame.rows() == [("1", "184", 2), ("1", "29", -1), ("2", "12", 4)]
    assert frame.schema == QRELS


@pytest.mark.parametrize(
    ("reader", "text", "expected"),
    [
        (read_cranfield_docs, "junk\n.I 1\n.W\nx\n", r"f:1: text before the first `\.I` record"),
        (read_cranfield_docs, ".I 1\n.I 2\n.W\nx\n", r"f:1: `\.I` record with no lines"),
        (read_cranfield_docs, ".I 1\n.W\nx\n.I 2\n", r"f:4: `\.I` record with no lines"),
        (read_cranfield_docs, ".I 1\n.W\nx\n.I 1\n.W\ny\n", r"f:4: duplicate id '1'; first at line 1"),
        (read_cranfield_qrels, "1 2 3\n1 2\n", r"f:2: expected 3 columns"),
        (read_cranfield_qrels, "1 2 3\n\n", r"f:2: expected 3 columns"),
        (read_cranfield_qrels, "1 2 3\n1 3 high\n", r"f:2: relevance code 'high'"),
        (read_cranfield_qrels, "1 2 3\n1 2 4\n", r"f:2: duplicate judgment \(1, 2\); first at line 1"),
    ],
)
def test_malformed_files_name_file_and_line(tmp_path, reader, text, expected):
    path = write(tmp_path, "f", text)
    with pytest.raises(CranfieldFormatError, match=str(tmp_path).replace(".", r"\.") + "/" + expected):
        reader(path)


# --- the real collection, against ir_datasets' own parser on the same files ------------------------

needs_data = pytest.mark.skipif(not SHARED.is_dir(), reason=f"Cranfield data not found at {SHARED}")


@pytest.fixture(scope="module")
def ours() -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    return read_cranfield(SHARED)


@pytest.fixture(scope="module")
def irds(tmp_path_factory):
    """ir_datasets' Cranfield classes reading the local files (its Cache reads a path that exists)."""
    home = tmp_path_factory.mktemp("ir_datasets_home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("IR_DATASETS_HOME", str(home))  # no docstore or cache is touched outside tmp
        from ir_datasets.datasets.cranfield import CranfieldDocs, CranfieldQrels, CranfieldQueries
        from ir_datasets.util import Cache

        docs = list(CranfieldDocs(Cache(None, SHARED / "cran.all.1400")).docs_iter())
        queries = list(CranfieldQueries(Cache(None, SHARED / "cran.qry")).queries_iter())
        qrels = list(CranfieldQrels(Cache(None, SHARED / "cranqrel")).qrels_iter())
    return docs, queries, qrels


@needs_data
def test_counts(ours):
    corpus, queries, qrels = ours
    assert (corpus.height, queries.height, qrels.height) == (1400, 225, 1837)
    assert queries["query_id"].to_list() == [str(i) for i in range(1, 226)]
    assert set(qrels["query_id"]) == set(queries["query_id"])
    assert qrels["relevance"].value_counts().sort("relevance").rows() == [
        (-1, 225),
        (1, 128),
        (2, 387),
        (3, 734),
        (4, 363),
    ]


@needs_data
def test_documents_equal_ir_datasets(ours, irds):
    assert ours[0].rows() == [(d.doc_id, d.title, d.text) for d in irds[0]]


@needs_data
def test_queries_equal_ir_datasets(ours, irds):
    assert ours[1].rows() == [(q.query_id, q.text) for q in irds[1]]


@needs_data
def test_qrels_equal_ir_datasets(ours, irds):
    assert ours[2].rows() == [(q.query_id, q.doc_id, q.relevance) for q in irds[2]]
