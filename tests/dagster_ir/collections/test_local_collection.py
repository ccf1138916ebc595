import gzip
import json

import polars as pl
import pytest

from dagster_ir.collections import LocalSpec, collection_layout, load_collection
from dagster_ir.collections.local import (
    CollectionFormatError,
    corpus_layout,
    detect_layout,
    iter_corpus,
    load_local,
    qrels_layout,
    read_corpus,
    read_local_qrels,
    read_topics,
    topics_layout,
)
from dagster_ir.retrieval.trec import TrecFormatError
from dagster_ir.schemas import CORPUS, QRELS, QUERIES

ROBUST_TOPICS = """
<top>
<num> Number: 301
<title> International Organized Crime

<desc> Description:
Identify organizations that participate in international criminal
activity.

<narr> Narrative:
A relevant document must as a minimum identify the organization.
</top>

<top>
<num> Number: 302 </num>
<title> Poliomyelitis and Post-Polio </title>
<desc> Description:
Is the disease of Poliomyelitis under control?
</top>
"""


def jsonl(*records) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


# --- corpus -------------------------------------------------------------------------------------


def test_jsonl_corpus_accepts_each_key_variant(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text(
        jsonl(
            {"doc_id": "a", "title": "T", "text": "x"},
            {"docno": "b", "contents": "y", "extra": 1},
            {"_id": 7, "body": "z"},
        )
        + "\n"
    )
    frame = read_corpus(path)
    assert frame.rows() == [("a", "T", "x"), ("b", "", "y"), ("7", "", "z")]
    assert frame.schema == CORPUS


def test_jsonl_gz_corpus(tmp_path):
    path = tmp_path / "corpus.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write(jsonl({"_id": "a", "title": "", "text": "é\r inside"}))
    assert read_corpus(path).rows() == [("a", "", "é\r inside")]


def test_corpus_streams_in_batches(tmp_path):
    path = tmp_path / "c.tsv"
    path.write_text("".join(f"d{i}\ttext {i}\n" for i in range(7)))
    sizes = [b.height for b in iter_corpus(path, batch_size=3)]
    assert sizes == [3, 3, 1]


def test_tsv_corpus_two_and_three_columns_bom_and_crlf(tmp_path):
    two, three = tmp_path / "two.tsv", tmp_path / "three.tsv"
    two.write_bytes("\ufeffd1\thello world\r\nd2\tbye\r\n".encode())
    three.write_text("d1\tTitle\thello\n\nd2\t\tbye\n")
    assert read_corpus(two).rows() == [("d1", "", "hello world"), ("d2", "", "bye")]
    assert read_corpus(three).rows() == [("d1", "Title", "hello"), ("d2", "", "bye")]


@pytest.mark.parametrize(
    ("name", "text", "line", "fragment"),
    [
        ("c.jsonl", jsonl({"doc_id": "a", "text": "x"}) + "{oops\n", 2, "invalid JSON"),
        (
            "c.jsonl",
            jsonl({"doc_id": "a", "text": "x"}, {"key": "b", "text": "y"}),
            2,
            "none of the keys ['doc_id', 'docno', '_id', 'id']",
        ),
        ("c.jsonl", jsonl({"doc_id": "a"}), 1, "none of the keys ['text', 'contents', 'body']"),
        ("c.jsonl", jsonl({"doc_id": "a", "text": None}), 1, "text must be a string"),
        ("c.jsonl", jsonl({"doc_id": "", "text": "x"}), 1, "empty document id"),
        ("c.jsonl", "[1, 2]\n", 1, "expected a JSON object"),
        ("c.tsv", "d1\tx\nd2\tt\tx\n", 2, "expected 2 tab-separated columns"),
        ("c.tsv", "d1\n", 1, "found 1 columns"),
        ("c.tsv", "d1\tx\n\n\tx\n", 3, "empty document id"),
        ("c.tsv", "d1\tx\nd2\ty\n\nd1\tz\n", 4, "duplicate document id 'd1'; first at line 1"),
        (
            "c.jsonl",
            jsonl({"doc_id": "a", "text": "x"}, {"docno": 7, "text": "y"}, {"_id": "7", "text": "z"}),
            3,
            "duplicate document id '7'; first at line 2",
        ),
    ],
)
def test_bad_corpus_names_file_and_line(tmp_path, name, text, line, fragment):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(CollectionFormatError) as error:
        read_corpus(path)
    assert str(error.value).startswith(f"{path}:{line}: ")
    assert fragment in str(error.value)


def test_a_repeated_id_is_found_across_batches(tmp_path):
    path = tmp_path / "c.tsv"
    path.write_text("".join(f"d{i}\tx\n" for i in range(10)) + "d3\ty\n")
    batches = iter_corpus(path, batch_size=4)
    assert [b.height for b in (next(batches), next(batches))] == [4, 4]
    with pytest.raises(CollectionFormatError, match=r"c\.tsv:11: duplicate document id 'd3'; first at line 4"):
        list(batches)


def test_invalid_utf8_names_line(tmp_path):
    path = tmp_path / "c.tsv"
    path.write_bytes(b"d1\tok\nd2\t\xff\n")
    with pytest.raises(CollectionFormatError, match=r"c\.tsv:2: not valid UTF-8"):
        read_corpus(path)


# --- topics -------------------------------------------------------------------------------------


def test_trec_topics_title_by_default(tmp_path):
    path = tmp_path / "topics.301-302"
    path.write_text(ROBUST_TOPICS)
    frame = read_topics(path)
    assert frame.rows() == [("301", "International Organized Crime"), ("302", "Poliomyelitis and Post-Polio")]
    assert frame.schema == QUERIES


def test_trec_topics_other_field(tmp_path):
    path = tmp_path / "topics.txt"
    path.write_text(ROBUST_TOPICS)
    assert read_topics(path, field="desc")["text"].to_list() == [
        "Identify organizations that participate in international criminal activity.",
        "Is the disease of Poliomyelitis under control?",
    ]


def test_trec_topic_missing_the_chosen_field_names_its_top_line(tmp_path):
    path = tmp_path / "topics.txt"
    path.write_text(ROBUST_TOPICS)
    with pytest.raises(CollectionFormatError, match=r"topics\.txt:14: topic 302 has no `<narr>` text"):
        read_topics(path, field="narr")


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("<top>\n<num> Number: 1\n<title> a\n", 1, "never closed"),
        ("<top>\n<title> a\n</top>\n", 1, "without a `<num>`"),
        ("<top>\n<num> 1\n<title> a\n</top>\nstray\n", 5, "text outside"),
        ("<top>\n<num> 1\n<title> a\n<top>\n", 4, "inside the topic opened at line 1"),
        ("</top>\n", 1, "without `<top>`"),
        (
            "<top>\n<num> 1\n<title> a\n</top>\n<top>\n<num> 1\n<title> b\n</top>\n",
            5,
            "duplicate query id '1'; first at line 1",
        ),
    ],
)
def test_bad_trec_topics(tmp_path, text, line, fragment):
    path = tmp_path / "t.txt"
    path.write_text(text)
    with pytest.raises(CollectionFormatError) as error:
        read_topics(path)
    assert str(error.value).startswith(f"{path}:{line}: ")
    assert fragment in str(error.value)


def test_tsv_topics(tmp_path):
    path = tmp_path / "q.tsv"
    path.write_text("1\twhat is a wing\n2\tlift\n")
    assert read_topics(path).rows() == [("1", "what is a wing"), ("2", "lift")]
    path.write_text("1\twhat is a wing\n2\tlift\textra\n")
    with pytest.raises(CollectionFormatError, match=r"q\.tsv:2: expected `qid<TAB>text`"):
        read_topics(path)


# --- everything together ------------------------------------------------------------------------


def test_load_local_reads_all_three(tmp_path):
    (tmp_path / "c.jsonl").write_text(jsonl({"doc_id": "d1", "text": "x"}))
    (tmp_path / "t.tsv").write_text("1\tq\n")
    (tmp_path / "qrels").write_text("1 0 d1 1\n")
    batches, queries, qrels = load_local(tmp_path / "c.jsonl", tmp_path / "t.tsv", tmp_path / "qrels")
    assert pl.concat(list(batches)).rows() == [("d1", "", "x")]
    assert queries.rows() == [("1", "q")]
    assert qrels.rows() == [("1", "d1", 1)] and qrels.schema == QRELS


def test_load_local_qrels_errors_are_strict(tmp_path):
    (tmp_path / "c.jsonl").write_text(jsonl({"doc_id": "d1", "text": "x"}))
    (tmp_path / "t.tsv").write_text("1\tq\n")
    (tmp_path / "qrels").write_text("1 0 d1 1.0\n")
    with pytest.raises(TrecFormatError, match=r"qrels:1: relevance '1\.0'"):
        load_local(tmp_path / "c.jsonl", tmp_path / "t.tsv", tmp_path / "qrels")


# --- the layouts users have on disk: Pyserini and BEIR ------------------------------------------


def write_pyserini(folder):
    """A collection as Pyserini indexes it: JSONL `id`/`contents`, TSV topics, TREC qrels."""
    folder.mkdir()
    (folder / "docs.jsonl").write_text(jsonl({"id": "d1", "contents": "wing lift"}, {"id": 2, "contents": "drag"}))
    (folder / "topics.tsv").write_text("q1\twing\nq2\tdrag\n")
    (folder / "qrels.txt").write_text("q1 0 d1 1\nq2 0 2 2\n")
    return folder


def write_beir(folder):
    """A collection as BEIR ships it: corpus.jsonl, queries.jsonl, qrels/test.tsv with its header."""
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(
        jsonl(
            {"_id": "d1", "title": "Wings", "text": "wing lift", "metadata": {}},
            {"_id": "d2", "title": "", "text": "drag"},
        )
    )
    (folder / "queries.jsonl").write_text(
        jsonl({"_id": "q1", "text": "wing", "metadata": {}}, {"_id": "q2", "text": "drag"})
    )
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t2\n")
    return folder


def test_a_pyserini_collection_loads_and_says_so(tmp_path):
    folder = write_pyserini(tmp_path / "pyserini")
    batches, queries, qrels = load_local(folder / "docs.jsonl", folder / "topics.tsv", folder / "qrels.txt")
    assert pl.concat(list(batches)).rows() == [("d1", "", "wing lift"), ("2", "", "drag")]
    assert queries.rows() == [("q1", "wing"), ("q2", "drag")]
    assert qrels.rows() == [("q1", "d1", 1), ("q2", "2", 2)]
    assert detect_layout(folder / "docs.jsonl", folder / "topics.tsv", folder / "qrels.txt") == (
        "corpus: Pyserini JSONL (id, contents); topics: TSV topics (qid, text); qrels: TREC qrels (qid iter docid rel)"
    )


def test_a_beir_collection_loads_through_the_config_and_says_so(tmp_path):
    folder = write_beir(tmp_path / "beir")
    spec = LocalSpec("beir", folder / "corpus.jsonl", folder / "queries.jsonl", folder / "qrels" / "test.tsv")
    corpus, queries, qrels = load_collection(spec)
    assert pl.concat(list(corpus)).rows() == [("d1", "Wings", "wing lift"), ("d2", "", "drag")]
    assert queries.rows() == [("q1", "wing"), ("q2", "drag")] and queries.schema == QUERIES
    assert qrels.rows() == [("q1", "d1", 1), ("q2", "d2", 2)] and qrels.schema == QRELS
    assert collection_layout(spec) == (
        "corpus: BEIR JSONL (_id, title, text); topics: JSONL queries (BEIR: _id, text); "
        "qrels: BEIR qrels TSV (query-id, corpus-id, score)"
    )


def test_jsonl_is_recognised_by_content_whatever_the_name(tmp_path):
    path = tmp_path / "docs.txt"
    path.write_text(jsonl({"id": "a", "contents": "x"}))
    assert corpus_layout(path) == "Pyserini JSONL (id, contents)"
    assert read_corpus(path).rows() == [("a", "", "x")]
    tsv = tmp_path / "docs.tsv"
    tsv.write_text("a\tTitle\tx\n")
    assert corpus_layout(tsv) == "TSV (doc_id, title, text)"
    assert topics_layout(tmp_path / "docs.txt") == "JSONL queries (BEIR: _id, text)"


def test_trec_layouts_are_named(tmp_path):
    topics, qrels = tmp_path / "topics.301-302", tmp_path / "qrels"
    topics.write_text(ROBUST_TOPICS)
    qrels.write_text("301 0 d1 1\n")
    assert topics_layout(topics, "desc") == "TREC topics (<desc>)"
    assert qrels_layout(qrels) == "TREC qrels (qid iter docid rel)"


def test_beir_qrels_without_header(tmp_path):
    path = tmp_path / "test.tsv"
    path.write_text("q1\td1\t0\nq1\td2\t1\n")
    assert read_local_qrels(path).rows() == [("q1", "d1", 0), ("q1", "d2", 1)]


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("query-id\tcorpus-id\tscore\nq1\td1\t1.5\n", 2, "score '1.5' is not an integer"),
        ("q1\td1\t1\nq1\td1\n", 2, "expected `query-id<TAB>corpus-id<TAB>score`"),
        ("q1\td1\t1\n\nq1\td1\t0\n", 3, "duplicate judgment ('q1', 'd1'); first at line 1"),
        ("q1\td1\t1\nquery-id\tcorpus-id\tscore\n", 2, "score 'score' is not an integer"),
    ],
)
def test_bad_beir_qrels_name_file_and_line(tmp_path, text, line, fragment):
    path = tmp_path / "test.tsv"
    path.write_text(text)
    with pytest.raises(CollectionFormatError) as error:
        read_local_qrels(path)
    assert str(error.value).startswith(f"{path}:{line}: ")
    assert fragment in str(error.value)


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        (jsonl({"_id": "q1", "text": "a"}) + "{nope\n", 2, "invalid JSON"),
        (
            jsonl({"_id": "q1", "text": "a"}, {"name": "q2", "text": "b"}),
            2,
            "none of the keys ['_id', 'id', 'query_id', 'qid']",
        ),
        (jsonl({"_id": "q1", "text": 3}), 1, "query text must be a string"),
        (jsonl({"_id": "q1", "text": "a"}, {"_id": "q1", "text": "b"}), 2, "duplicate query id 'q1'; first at line 1"),
    ],
)
def test_bad_jsonl_queries_name_file_and_line(tmp_path, text, line, fragment):
    path = tmp_path / "queries.jsonl"
    path.write_text(text)
    with pytest.raises(CollectionFormatError) as error:
        read_topics(path)
    assert str(error.value).startswith(f"{path}:{line}: ")
    assert fragment in str(error.value)


def test_an_unknown_topic_format_is_refused(tmp_path):
    path = tmp_path / "q.tsv"
    path.write_text("1\ta\n")
    with pytest.raises(ValueError, match="format must be 'trec', 'tsv' or 'jsonl', got 'xml'"):
        read_topics(path, format="xml")


def test_an_unterminated_string_says_where_once(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"doc_id": "a", "text": "x}\n', encoding="utf-8")
    with pytest.raises(
        Exception, match=r"c.jsonl:1: invalid JSON at column 25: Unterminated string starting at$"
    ) as info:
        read_corpus(path)
    assert "at at" not in str(info.value)
