import polars as pl

from assets.defs.checks import candidate_runs_are_valid, negatives_are_not_positives
from dagster_ir.schemas import QRELS, RUN


def _run(rows):
    return pl.DataFrame(rows, schema=list(RUN), orient="row").cast(RUN)


def test_candidate_run_check_catches_duplicates_nan_and_rank_gaps():
    good = _run([("q1", "a", 2.0, 1, "bm25"), ("q1", "b", 1.0, 2, "bm25"), ("q1", "a", 0.3, 1, "dense")])
    assert candidate_runs_are_valid(good).passed
    bad = _run([("q1", "a", 2.0, 1, "bm25"), ("q1", "a", float("nan"), 3, "bm25")])
    result = candidate_runs_are_valid(bad)
    assert not result.passed
    meta = {k: v.value for k, v in result.metadata.items()}
    assert meta == {"duplicate_rows": 2, "non_finite_scores": 1, "rank_gaps": 1}


def test_negatives_check_catches_a_positive_sampled_as_negative():
    qrels = pl.DataFrame({"query_id": ["q1", "q1"], "doc_id": ["a", "b"], "relevance": [1, 0]}).cast(QRELS)
    negatives = pl.DataFrame({"query_id": ["q1"], "pos_doc_id": ["a"], "neg_doc_id": ["b"]})
    assert negatives_are_not_positives(negatives, qrels).passed
    clash = pl.DataFrame({"query_id": ["q1"], "pos_doc_id": ["b"], "neg_doc_id": ["a"]})
    assert not negatives_are_not_positives(clash, qrels).passed


def test_every_check_of_a_partitioned_asset_checks_one_partition():
    """A check without the asset's partitions loads every partition of it: with several training units
    it fails on the units not materialized yet (as `cet_runs`' check did on Cranfield's five folds)."""
    from assets.definitions import defs

    graph = defs.resolve_asset_graph()
    for checks in defs.asset_checks or []:
        for spec in checks.check_specs:
            asset = graph.get(spec.asset_key)
            if asset.partitions_def is not None:
                assert spec.partitions_def == asset.partitions_def, f"{spec.name} on {spec.asset_key.to_user_string()}"
