import gzip
import json

import polars as pl
import pytest

from dagster_ir.collections.local import (
    CollectionFormatError,
    iter_corpus,
    load_local,
    read_corpus,
    read_topics,
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
    path.write_text(jsonl(
        {"doc_id": "a", "title": "T", "text": "x"},
        {"docno": "b", "contents": "y", "extra": 1},
        {"_id": 7, "body": "z"},
    ) + "\n")
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
        ("c.jsonl", jsonl({"doc_id": "a", "text": "x"}, {"id": "b", "text": "y"}), 2, "none of the keys ['doc_id', 'docno', '_id']"),
        ("c.jsonl", jsonl({"doc_id": "a"}), 1, "none of the keys ['text', 'contents', 'body']"),
        ("c.jsonl", jsonl({"doc_id": "a", "text": None}), 1, "text must be a string"),
        ("c.jsonl", jsonl({"doc_id": "", "text": "x"}), 1, "empty document id"),
        ("c.jsonl", "[1, 2]\n", 1, "expected a JSON object"),
        ("c.tsv", "d1\tx\nd2\tt\tx\n", 2, "expected 2 tab-separated columns"),
        ("c.tsv", "d1\n", 1, "found 1 columns"),
        ("c.tsv", "d1\tx\n\n\tx\n", 3, "empty document id"),
        ("c.tsv", "d1\tx\nd2\ty\n\nd1\tz\n", 4, "duplicate document id 'd1'; first at line 1"),
        ("c.jsonl", jsonl({"doc_id": "a", "text": "x"}, {"docno": 7, "text": "y"}, {"_id": "7", "text": "z"}), 3,
         "duplicate document id '7'; first at line 2"),
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
        ("<top>\n<num> 1\n<title> a\n</top>\n<top>\n<num> 1\n<title> b\n</top>\n", 5, "duplicate query id '1'; first at line 1"),
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
