"""A report or reranking `split` that selects no query fails loudly instead of giving an empty run."""

import dagster as dg
import polars as pl
import pytest

from assets.php import RerankSettings, reranked_runs
from dagster_ir.schemas import RUN


def test_reranking_a_misspelt_split_is_an_error():
    run = pl.DataFrame([("q1", "d1", 1.0, 1, "bm25")], schema=list(RUN), orient="row").cast(RUN)
    splits = pl.DataFrame({"query_id": ["q1"], "split": ["test"], "fold": [0]})
    with pytest.raises(ValueError, match="reranked_runs: no queries in split 'tset'"):
        reranked_runs(
            dg.build_asset_context(partition_key="wiki-car"), RerankSettings(split="tset"),
            cross_encoder=pl.DataFrame({"run_name": ["bert"], "path": ["unused"]}), candidate_runs=run,
            queries=pl.DataFrame({"query_id": ["q1"], "text": ["x"]}),
            corpus=pl.LazyFrame({"doc_id": ["d1"], "title": [""], "text": ["y"]}), query_splits=splits,
        )
