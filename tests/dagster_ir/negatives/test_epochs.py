"""Per-epoch resampling: fresh negatives each epoch, the same ones for the same (seed, epoch)."""

from __future__ import annotations

import polars as pl
import pytest

from dagster_ir.negatives.sampling import NegativeConfig, epoch_seed, for_epoch, sample_negatives
from dagster_ir.schemas import QRELS, RUN

QUERIES = [f"q{i}" for i in range(10)]
# A ten-query pooled run: 30 candidates each, the label at rank 1.
RUN_ROWS = pl.DataFrame(
    [(q, f"{q}d{r}", float(-r), r, "dense") for q in QUERIES for r in range(1, 31)], schema=RUN, orient="row"
)
LABELS = pl.DataFrame([(q, f"{q}d1", 1) for q in QUERIES], schema=QRELS, orient="row")
CONFIG = NegativeConfig("random", depth=30, n_per_positive=2, seed=7)


def draw(config: NegativeConfig) -> list[tuple[str, str]]:
    return list(
        sample_negatives(RUN_ROWS, LABELS, QUERIES, config).negatives.select("query_id", "neg_doc_id").iter_rows()
    )


def test_each_epoch_draws_other_negatives_and_the_same_seed_the_same_ones() -> None:
    epochs = [draw(for_epoch(CONFIG, e)) for e in range(4)]
    assert len({tuple(e) for e in epochs}) == 4  # every epoch its own draw
    assert draw(for_epoch(CONFIG, 2)) == epochs[2]  # reproducible per (seed, epoch)
    other_seed = NegativeConfig("random", depth=30, n_per_positive=2, seed=8)
    assert draw(for_epoch(other_seed, 2)) != epochs[2]
    for negatives in epochs:
        assert all(d != f"{q}d1" for q, d in negatives)  # never the label
    assert epoch_seed(7, 0) != epoch_seed(7, 1) != epoch_seed(8, 1) and epoch_seed(7, 3) == epoch_seed(7, 3)
    with pytest.raises(ValueError, match="epoch"):
        epoch_seed(7, -1)
