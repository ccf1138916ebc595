"""A tiny collection the GHRM protocol and sweep tests share."""

import numpy as np
import polars as pl
import pytest
from gensim.models import KeyedVectors

from dagster_ir.schemas import QRELS, QUERIES, QUERY_SPLITS, RUN

WORDS = [f"w{i}" for i in range(12)]


@pytest.fixture(scope="session")
def collection():
    """10 queries of two words, 40 documents, 2 relevant documents per query, a run of depth 8, 5 folds."""
    rng = np.random.default_rng(0)
    docs = {f"d{i}": " ".join(rng.choice(WORDS, size=10)) for i in range(40)}
    corpus = pl.DataFrame(
        {"doc_id": list(docs), "title": [""] * 40, "text": list(docs.values())},
        schema={"doc_id": pl.String, "title": pl.String, "text": pl.String},
    )
    queries = pl.DataFrame(
        {"query_id": [f"q{i}" for i in range(10)], "text": [f"w{i} w{i + 1}" for i in range(10)]}, schema=QUERIES
    )
    run_rows, qrel_rows = [], []
    for q in range(10):
        ranked = rng.permutation(40)[:8]
        run_rows += [(f"q{q}", f"d{d}", float(8 - r), r + 1, "bm25") for r, d in enumerate(ranked)]
        qrel_rows += [(f"q{q}", f"d{ranked[1]}", 1), (f"q{q}", f"d{ranked[4]}", 1), (f"q{q}", f"d{ranked[0]}", 0)]
    run = pl.DataFrame(run_rows, schema=RUN, orient="row")
    qrels = pl.DataFrame(qrel_rows, schema=QRELS, orient="row")
    splits = pl.DataFrame(
        {"query_id": queries["query_id"], "split": ["test"] * 10, "fold": [q // 2 for q in range(10)]},
        schema=QUERY_SPLITS,
    )
    vectors = KeyedVectors(vector_size=4)
    vectors.add_vectors(WORDS, rng.normal(size=(len(WORDS), 4)).astype(np.float32))
    return corpus, queries, qrels, run, splits, vectors
