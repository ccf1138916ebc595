"""A report `split` that selects no query fails loudly instead of giving an empty run."""

import polars as pl
import pytest

from assets.defs.evaluation import restrict_to_split
from dagster_ir.schemas import QRELS, RUN


def test_a_misspelt_report_split_is_an_error():
    runs = pl.DataFrame([("q1", "d1", 1.0, 1, "bm25")], schema=list(RUN), orient="row").cast(RUN)
    qrels = pl.DataFrame([("q1", "d1", 1)], schema=list(QRELS), orient="row").cast(QRELS)
    splits = pl.DataFrame({"query_id": ["q1", "q2"], "split": ["test", "dev"], "fold": [0, 1]}).cast({"fold": pl.Int32})
    kept, _ = restrict_to_split(runs, qrels, splits, "test", "model_report")
    assert kept.height == 1
    with pytest.raises(
        ValueError, match=r"model_report: no queries in split 'tset' \(splits with queries: \['dev', 'test'\]"
    ):
        restrict_to_split(runs, qrels, splits, "tset", "model_report")
