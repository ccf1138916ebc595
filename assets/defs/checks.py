"""Asset checks for the collection and retrieval assets: the invariants training and evaluation rely on."""

import dagster as dg
import polars as pl

from assets.defs.retrieval import candidate_runs, negatives
from assets.lib.partitions import collection_partitions


def _result(problems: dict[str, int]) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        passed=not any(problems.values()),
        metadata={name: dg.MetadataValue.int(count) for name, count in problems.items()},
    )


# Partitioned like their assets: a check reads the collection it checks, not every collection's table.
@dg.asset_check(asset=candidate_runs, blocking=True, partitions_def=collection_partitions)
def candidate_runs_are_valid(candidate_runs: pl.DataFrame) -> dg.AssetCheckResult:
    """No duplicate (run, query, doc), finite scores, ranks 1..n without gaps per (run, query)."""
    duplicates = candidate_runs.select(pl.struct("run_name", "query_id", "doc_id").is_duplicated().sum()).item()
    non_finite = candidate_runs.select((~pl.col("score").is_finite()).sum()).item()
    gaps = (
        candidate_runs.group_by("run_name", "query_id")
        .agg(ok=(pl.col("rank").sort() == pl.int_range(1, pl.len() + 1)).all())
        .select((~pl.col("ok")).sum())
        .item()
    )
    return _result({"duplicate_rows": duplicates, "non_finite_scores": non_finite, "rank_gaps": gaps})


@dg.asset_check(
    asset=negatives, blocking=True, partitions_def=collection_partitions, additional_ins={"qrels": dg.AssetIn()}
)
def negatives_are_not_positives(negatives: pl.DataFrame, qrels: pl.DataFrame) -> dg.AssetCheckResult:
    """No sampled negative is a labelled positive of its query."""
    positives = qrels.filter(pl.col("relevance") > 0).select("query_id", neg_doc_id="doc_id")
    overlap = negatives.join(positives, on=["query_id", "neg_doc_id"], how="semi").height
    return _result({"negatives_labelled_relevant": overlap})


collection_checks = [candidate_runs_are_valid, negatives_are_not_positives]
