from typing import NamedTuple

import polars as pl
import pytest

from dagster_ir.collections import irds
from dagster_ir.collections.irds import IrdsError, generic_doc_fields, load_irds
from dagster_ir.schemas import CORPUS, QRELS, QUERIES


@pytest.fixture
def ir_datasets(tmp_path, monkeypatch):
    monkeypatch.setenv("IR_DATASETS_HOME", str(tmp_path / "irds_home"))
    import ir_datasets

    return ir_datasets


class FakeDataset:
    """What `ir_datasets.load` returns, reduced to the calls the loader makes."""

    def __init__(self, docs, queries, qrels):
        self._docs, self._queries, self._qrels = docs, queries, qrels

    def has_docs(self):
        return self._docs is not None

    def has_queries(self):
        return self._queries is not None

    def has_qrels(self):
        return self._qrels is not None

    def docs_iter(self):
        return iter(self._docs)

    def queries_iter(self):
        return iter(self._queries)

    def qrels_iter(self):
        return iter(self._qrels)


def serve(monkeypatch, ir_datasets, dataset_id: str, dataset: FakeDataset) -> None:
    def load(requested: str) -> FakeDataset:
        assert requested == dataset_id
        return dataset

    monkeypatch.setattr(ir_datasets, "load", load)


def test_msmarco_document_text_is_url_title_body(monkeypatch, ir_datasets):
    from ir_datasets.datasets.msmarco_document import MsMarcoDocument
    from ir_datasets.formats import GenericQuery, TrecQrel

    docs = [
        MsMarcoDocument("D1", "http://a.org/", "A title", "the body"),
        MsMarcoDocument("D2", "http://b.org/", "", "b"),
    ]
    dataset = FakeDataset(docs, [GenericQuery("q1", "what is a")], [TrecQrel("q1", "D1", 1, "0")])
    serve(monkeypatch, ir_datasets, "msmarco-document/dev", dataset)
    corpus, queries, qrels = load_irds("msmarco-document/dev")
    frame = pl.concat(list(corpus))
    assert frame.rows() == [("D1", "A title", "http://a.org/ A title the body"), ("D2", "", "http://b.org/ b")]
    assert frame.schema == CORPUS
    assert queries.rows() == [("q1", "what is a")] and queries.schema == QUERIES
    assert qrels.rows() == [("q1", "D1", 1)] and qrels.schema == QRELS


def test_passage_and_antique_use_text_only(monkeypatch, ir_datasets):
    from ir_datasets.formats import GenericDoc, GenericQuery, TrecQrel

    for dataset_id in ("msmarco-passage/dev/small", "antique/test"):
        dataset = FakeDataset([GenericDoc("7", "a passage")], [GenericQuery("1", "q")], [TrecQrel("1", "7", 2, "0")])
        serve(monkeypatch, ir_datasets, dataset_id, dataset)
        corpus, _, qrels = load_irds(dataset_id)
        assert pl.concat(list(corpus)).rows() == [("7", "", "a passage")]
        assert qrels["relevance"].to_list() == [2]


def test_cranfield_text_is_title_then_text(monkeypatch, ir_datasets):
    from ir_datasets.datasets.cranfield import CranfieldDoc
    from ir_datasets.formats import GenericQuery, TrecQrel

    doc = CranfieldDoc("1", "wing flow .", "wing flow .\n  an experiment", "smith", "j. ae.")
    serve(
        monkeypatch,
        ir_datasets,
        "cranfield",
        FakeDataset([doc], [GenericQuery("1", "q")], [TrecQrel("1", "1", -1, "0")]),
    )
    corpus, _, qrels = load_irds("cranfield")
    assert pl.concat(list(corpus)).rows() == [("1", "wing flow .", "wing flow . wing flow .\n  an experiment")]
    assert qrels["relevance"].to_list() == [-1]


def test_trec_topics_use_the_title(monkeypatch, ir_datasets):
    from ir_datasets.formats import GenericDoc, TrecQrel, TrecQuery

    topics = [TrecQuery("301", "International Organized Crime", "Identify ...", "A relevant ...")]
    serve(
        monkeypatch,
        ir_datasets,
        "disks45/nocr/trec-robust-2004",
        FakeDataset([GenericDoc("d", "x")], topics, [TrecQrel("301", "d", 1, "0")]),
    )
    _, queries, _ = load_irds("disks45/nocr/trec-robust-2004")
    assert queries.rows() == [("301", "International Organized Crime")]


def test_docs_are_streamed_in_batches_lazily(monkeypatch, ir_datasets):
    from ir_datasets.formats import GenericDoc, GenericQuery, TrecQrel

    pulled = []

    def docs():
        for i in range(5):
            pulled.append(i)
            yield GenericDoc(str(i), f"t{i}")

    dataset = FakeDataset(None, [GenericQuery("1", "q")], [TrecQrel("1", "0", 1, "0")])
    dataset.has_docs = lambda: True
    dataset.docs_iter = docs
    serve(monkeypatch, ir_datasets, "some/thing", dataset)
    corpus, _, _ = load_irds("some/thing", batch_size=2)
    assert pulled == []
    assert [b.height for b in corpus] == [2, 2, 1]


def test_missing_part_is_an_error(monkeypatch, ir_datasets):
    from ir_datasets.formats import GenericDoc, GenericQuery

    serve(
        monkeypatch, ir_datasets, "msmarco-passage", FakeDataset([GenericDoc("1", "x")], [GenericQuery("1", "q")], None)
    )
    with pytest.raises(IrdsError, match="'msmarco-passage' has no qrels"):
        load_irds("msmarco-passage")


class PaperDoc(NamedTuple):
    doc_id: str
    title: str
    abstract: str

    def default_text(self):
        return f"{self.title} {self.abstract}"


class BareDoc(NamedTuple):
    doc_id: str
    abstract: str


class TitleBodyDoc(NamedTuple):
    doc_id: str
    title: str
    body: str


def test_generic_fallback():
    assert generic_doc_fields(TitleBodyDoc("1", "T", "b")) == ("T", "T b")
    assert generic_doc_fields(PaperDoc("1", "T", "abs")) == ("T", "T abs")  # no text/body: default_text()
    with pytest.raises(IrdsError, match="BareDoc documents"):
        generic_doc_fields(BareDoc("1", "abs"))


def test_rule_is_chosen_by_the_first_id_component():
    assert irds.doc_rule("msmarco-document/trec-dl-2019") is irds.DOC_RULES["msmarco-document"]
    assert irds.doc_rule("beir/scifact") is generic_doc_fields
