import polars as pl
import pytest

from dagster_ir.collections.wikicar import WikiCarConfig, build_wiki_car
from dagster_ir.schemas import CORPUS, QRELS, QUERIES, SEGMENTS, SchemaError, validate


def segments(rows: list[tuple[str, str, int, str, str]]) -> pl.DataFrame:
    return pl.DataFrame([(a, t, n, s, x, len(x.split())) for a, t, n, s, x in rows], schema=SEGMENTS, orient="row")


SEGMENTS_ROWS = [
    ("12", "Anarchism", 1, "", "lead text"),
    ("12", "Anarchism", 2, "History", "history one"),
    ("12", "Anarchism", 3, "History / Early life", "early"),
    ("12", "Anarchism", 4, "Thought/Practice", "slash heading"),
    ("12", "Anarchism", 5, "See Also", "links"),
    ("12", "Anarchism", 6, "REFERENCES / Notes", "refs"),
    ("12", "Anarchism", 7, "History", "a second History section"),
    ("7", "Autism", 2, "Causes", "causes"),
    ("7", "Autism", 1, "", "lead"),
]


@pytest.fixture
def built():
    return build_wiki_car(segments(SEGMENTS_ROWS))


def test_corpus_is_every_segment_without_title(built):
    corpus, _, _ = built
    validate(corpus, CORPUS, "corpus")
    assert corpus.columns == list(CORPUS)
    assert corpus.height == len(SEGMENTS_ROWS)
    assert corpus.filter(pl.col("doc_id") == "12/3").row(0) == ("12/3", "", "early")
    assert set(corpus["title"]) == {""}


def test_queries_are_title_and_top_level_heading(built):
    _, queries, _ = built
    validate(queries, QUERIES, "queries")
    assert queries.rows() == [
        ("12/History", "Anarchism History", "12"),
        ("12/Thought%2FPractice", "Anarchism Thought/Practice", "12"),
        ("7/Causes", "Autism Causes", "7"),
    ]


def test_qrels_mark_every_segment_of_the_section(built):
    _, _, qrels = built
    validate(qrels, QRELS, "qrels")
    assert qrels.rows() == [
        ("12/History", "12/2", 1),
        ("12/History", "12/3", 1),
        ("12/History", "12/7", 1),
        ("12/Thought%2FPractice", "12/4", 1),
        ("7/Causes", "7/2", 1),
    ]


def test_lead_and_boilerplate_segments_are_documents_but_never_relevant(built):
    corpus, _, qrels = built
    unjudged = set(corpus["doc_id"]) - set(qrels["doc_id"])
    assert unjudged == {"12/1", "12/5", "12/6", "7/1"}


def test_skip_headings_are_configurable():
    _, queries, _ = build_wiki_car(segments(SEGMENTS_ROWS), WikiCarConfig(skip_headings=("history",)))
    assert "12/History" not in queries["query_id"].to_list()
    assert "12/See%20Also" in queries["query_id"].to_list()


def test_query_ids_are_stable_under_row_order():
    once = build_wiki_car(segments(SEGMENTS_ROWS))
    again = build_wiki_car(segments(SEGMENTS_ROWS[::-1]))
    for a, b in zip(once, again, strict=True):
        assert a.equals(b)


def test_wrong_segments_schema_is_refused():
    bad = segments(SEGMENTS_ROWS).with_columns(pl.col("segment_no").cast(pl.Int64))
    with pytest.raises(SchemaError, match="segment_no"):
        build_wiki_car(bad)


def test_lazy_segments_give_the_same_collection_with_a_lazy_corpus():
    corpus, queries, qrels = build_wiki_car(segments(SEGMENTS_ROWS))
    lazy_corpus, lazy_queries, lazy_qrels = build_wiki_car(segments(SEGMENTS_ROWS).lazy())
    assert isinstance(lazy_corpus, pl.LazyFrame)
    assert lazy_corpus.collect().equals(corpus)
    assert lazy_queries.equals(queries) and lazy_qrels.equals(qrels)
