"""The baselines' torchrun job inputs: which documents travel, and the roles or folds it needs."""

import polars as pl
import pytest

from dagster_ir.methods.baselines import profile
from dagster_ir.methods.baselines.job import job_inputs
from dagster_ir.schemas import NEGATIVES, QRELS, RUN


def _inputs(models, **roles):
    corpus = pl.LazyFrame({"doc_id": ["a", "b", "c", "z"], "title": [""] * 4, "text": ["x", "y", "w", "unread"]})
    candidates = pl.DataFrame([("q", "a", 2.0, 1, "bm25"), ("q", "b", 1.0, 2, "bm25")], schema=RUN, orient="row")
    negatives = pl.DataFrame([("q", "a", "c", 1, 0)], schema=NEGATIVES, orient="row")
    return job_inputs(
        models,
        profile("demo"),
        corpus=corpus,
        queries=pl.DataFrame({"query_id": ["q"], "text": ["x"]}),
        qrels=pl.DataFrame([("q", "a", 1)], schema=QRELS, orient="row"),
        candidates=candidates,
        negatives=negatives,
        vectors="vectors.txt",
        remove_stopwords=True,
        lemmatize=False,
        checkpoint_root="ckpt",
        text_module="dagster_ir.methods.ghrm.text",
        vectors_module="dagster_ir.methods.ghrm.word2vec",
        **roles,
    )


def test_bert_models_alone_carry_only_the_documents_they_read():
    roles = {"roles": {"train": ["q"], "validation": [], "test": []}}
    values, frames = _inputs(["bert-firstp", "cedr-knrm"], **roles)
    assert sorted(frames["corpus"].collect()["doc_id"]) == ["a", "b", "c"]
    assert values["roles"]["train"] == ["q"] and values["text"] == {"remove_stopwords": True, "lemmatize": False}
    _, frames = _inputs(["knrm", "bert-firstp"], **roles)  # the interaction models' IDF reads every document
    assert sorted(frames["corpus"].collect()["doc_id"]) == ["a", "b", "c", "z"]


def test_a_job_needs_roles_or_the_splits_to_rotate_but_not_both():
    splits = pl.DataFrame({"query_id": ["q"], "split": ["test"], "fold": [0]})
    values, frames = _inputs(["knrm"], query_splits=splits)
    assert values["roles"] == {} and frames["query_splits"].equals(splits)
    with pytest.raises(ValueError, match="either roles or query_splits"):
        _inputs(["knrm"])
    with pytest.raises(ValueError, match="either roles or query_splits"):
        _inputs(["knrm"], roles={"train": ["q"]}, query_splits=splits)
