"""Pooling-bias lab: simulated sparse labels stay inside the pool and respect m; known false-negative shares."""

from __future__ import annotations

import polars as pl
import pytest

from dagster_ir.negatives.pooling import (
    LabelCounts,
    PoolingConfig,
    false_negative_analysis,
    false_negative_plot,
    simulate_sparse_labels,
)
from dagster_ir.schemas import FALSE_NEGATIVES, QRELS, RUN


def run_of(name: str, ranking: dict[str, list[str]]) -> pl.DataFrame:
    rows = [(q, d, -float(r), r, name) for q, docs in ranking.items() for r, d in enumerate(docs, start=1)]
    return pl.DataFrame(rows, schema=RUN, orient="row")


def qrels_of(rows: list[tuple[str, str, int]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=QRELS, orient="row")


# q1: relevant d2, d4 (inside bm25's top 5), d7 (rank 7) and d12 (not retrieved); d3 judged non-relevant.
# q2: its only relevant document is at rank 6, below a pool of 5. q3 has relevant pooled documents but is not asked for.
BM25 = run_of("bm25", {"q1": [f"d{i}" for i in range(1, 11)], "q2": [f"e{i}" for i in range(1, 7)], "q3": ["g1"]})
DENSE = run_of("dense", {"q1": ["d4", "d7", "d2", "d1", "d3", "d5", "d6", "d8", "d9", "d10"]})
DENSE_QRELS = qrels_of([
    ("q1", "d2", 2), ("q1", "d4", 1), ("q1", "d7", 1), ("q1", "d12", 1), ("q1", "d3", 0),
    ("q2", "e6", 1), ("q3", "g1", 1),
])  # fmt: skip


def test_labels_are_pooled_relevant_documents_only() -> None:
    sparse = simulate_sparse_labels(BM25, DENSE_QRELS, ["q1", "q2"], PoolingConfig(pool_depth=5, max_labels=5))
    assert sparse.qrels.schema == pl.Schema(QRELS)
    assert sparse.qrels.rows() == [("q1", "d2", 2), ("q1", "d4", 1)]  # d7 is at rank 7, d12 unretrieved
    assert sparse.counts == LabelCounts(queries=2, labelled_queries=1, labels=2, relevant=5, pooled_relevant=2)
    deeper = simulate_sparse_labels(BM25, DENSE_QRELS, ["q1", "q2"], PoolingConfig(pool_depth=10, max_labels=5))
    assert deeper.qrels.rows() == [("q1", "d2", 2), ("q1", "d4", 1), ("q1", "d7", 1), ("q2", "e6", 1)]


def test_at_most_m_labels_top_or_seeded_random() -> None:
    top = simulate_sparse_labels(BM25, DENSE_QRELS, ["q1"], PoolingConfig(pool_depth=10, max_labels=2, selection="top"))
    assert top.qrels["doc_id"].to_list() == ["d2", "d4"]  # the two highest ranked
    chosen = {
        seed: simulate_sparse_labels(BM25, DENSE_QRELS, ["q1"], PoolingConfig(pool_depth=10, seed=seed))
        .qrels["doc_id"]
        .to_list()
        for seed in range(30)
    }
    assert all(len(docs) == 1 and docs[0] in {"d2", "d4", "d7"} for docs in chosen.values())
    assert {docs[0] for docs in chosen.values()} == {"d2", "d4", "d7"}  # the seed matters
    again = simulate_sparse_labels(BM25.reverse(), DENSE_QRELS, ["q1"], PoolingConfig(pool_depth=10, seed=3))
    assert again.qrels["doc_id"].to_list() == chosen[3]  # row order does not


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="max_labels"):
        PoolingConfig(max_labels=0)
    with pytest.raises(ValueError, match="selection"):
        PoolingConfig(selection="first")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="several runs"):
        simulate_sparse_labels(pl.concat([BM25, DENSE]), DENSE_QRELS, ["q1"])


def test_false_negative_share_on_a_known_toy_collection() -> None:
    labels = qrels_of([("q1", "d2", 2)])
    # Depth 5 minus the label d2: bm25 pools d1 d3 d4 d5 (one relevant: d4), dense pools d4 d7 d1 d3 (two).
    # Four negatives per label from a pool of four take the whole pool, so sampled = expected exactly.
    table = false_negative_analysis(pl.concat([BM25, DENSE]), labels, DENSE_QRELS, ["q1", "q2"], [5, 2], 4)
    assert table.schema == pl.Schema(FALSE_NEGATIVES)
    rows = {(r["run_name"], r["depth"]): r for r in table.iter_rows(named=True)}
    assert rows["bm25", 5]["false_negative_share"] == rows["bm25", 5]["expected_share"] == pytest.approx(0.25)
    assert rows["dense", 5]["false_negative_share"] == rows["dense", 5]["expected_share"] == pytest.approx(0.5)
    assert rows["dense", 2]["expected_share"] == pytest.approx(1.0)  # d4, d7: both relevant
    assert rows["bm25", 5]["recall"] == pytest.approx(2 / 4) and rows["dense", 5]["recall"] == pytest.approx(3 / 4)
    assert rows["bm25", 5]["queries"] == 1 and rows["bm25", 5]["negatives"] == 4  # q2 has no label


def test_expected_share_weights_queries_by_their_labels() -> None:
    run = run_of("r", {"a": ["a1", "a2", "a3"], "b": ["b1", "b2", "b3"]})
    dense = qrels_of([("a", "a1", 1), ("a", "a2", 1), ("a", "a3", 1), ("b", "b1", 1)])
    labels = qrels_of([("a", "a1", 1), ("a", "a2", 1), ("b", "b1", 1)])
    # pools: a -> {a3} (relevant), b -> {b2, b3} (none); a has two labels, b one: (2 * 1 + 1 * 0) / 3
    table = false_negative_analysis(run, labels, dense, ["a", "b"], [3], n_per_positive=1)
    assert table["expected_share"].item() == pytest.approx(2 / 3)
    assert table["negatives"].item() == 3


def test_false_negative_plot_draws_a_line_per_retriever() -> None:
    table = false_negative_analysis(pl.concat([BM25, DENSE]), qrels_of([("q1", "d2", 1)]), DENSE_QRELS, ["q1"], [2, 5])
    figure = false_negative_plot(table)
    share_ax = figure.axes[0]
    assert [line.get_label() for line in share_ax.get_lines()] == ["bm25", "dense"]
    assert share_ax.get_lines()[1].get_ydata().tolist() == pytest.approx([1.0, 0.5])
