"""Blocking checks of the PHP group: pre-training examples that can teach (contrastive)."""

import dagster as dg
import polars as pl

from assets.defs.php.assets import php_baseline_examples, php_examples


@dg.asset_check(asset=php_examples, blocking=True)
def php_examples_are_contrastive(php_examples: pl.DataFrame) -> dg.AssetCheckResult:
    """No example lists its positive among its negatives, and every example of a stage has n negatives."""
    leaking = php_examples.filter(pl.col("neg_ids").list.contains(pl.col("pos_id")))
    widths = php_examples.group_by("stage").agg(pl.col("neg_ids").list.len().n_unique().alias("widths"))
    ragged = widths.filter(pl.col("widths") > 1)["stage"].to_list()
    return dg.AssetCheckResult(
        passed=leaking.height == 0 and not ragged,
        metadata={
            "positive_among_negatives": leaking.height,
            "stages_with_ragged_negatives": ", ".join(ragged) or "none",
        },
    )


@dg.asset_check(asset=php_baseline_examples, blocking=True)
def php_baseline_examples_are_contrastive(php_baseline_examples: pl.DataFrame) -> dg.AssetCheckResult:
    """Every example's preferred (query, document) differs from each of its other candidates, one width a method."""
    frame = php_baseline_examples.with_row_index("row")
    candidates = (
        frame.select("row", "queries", "docs")
        .explode("queries", "docs")
        .with_columns(position=pl.int_range(pl.len()).over("row"))
    )
    preferred = candidates.filter(pl.col("position") == 0).drop("position")
    others = candidates.filter(pl.col("position") > 0)
    same = others.join(preferred, on=["row", "queries", "docs"], how="semi")["row"].n_unique()
    widths = frame.group_by("method").agg(pl.col("docs").list.len().n_unique().alias("widths"))
    ragged = widths.filter(pl.col("widths") > 1)["method"].sort().to_list()
    return dg.AssetCheckResult(
        passed=same == 0 and not ragged,
        metadata={"preferred_among_others": same, "ragged_methods": ", ".join(ragged) or "none"},
    )


php_checks = [php_examples_are_contrastive, php_baseline_examples_are_contrastive]
