"""GHRM's sweeps (Figures 3-5): the grid, training once per setting, validation only, the choice."""

from __future__ import annotations

import dataclasses

import matplotlib.figure
import polars as pl
import pytest

from dagster_ir.methods.ghrm.inputs import InputConfig
from dagster_ir.methods.ghrm.model import GHRMConfig, ModelConfig, TrainingConfig
from dagster_ir.methods.ghrm.protocol import prepare_data
from dagster_ir.methods.ghrm.sweeps import (
    SWEEP_RESULTS,
    SweepConfig,
    choose,
    run_sweep,
    sweep_caption,
    sweep_figure,
    sweep_settings,
)
from dagster_ir.methods.ghrm.text import RAW

CONFIG = GHRMConfig(
    inputs=InputConfig(doc_words=8, query_words=2, min_count=1, window=3, text=RAW),
    model=ModelConfig(top_k=3, mlp_hidden=(4,)),
    training=TrainingConfig(epochs=2, batches_per_epoch=2, pairs_per_batch=4, train_depth=6, rerank_depth=5, seed=1),
)
SWEEP = SweepConfig(rate=(0.5, 0.8), blocks=(1, 2), top_k=())
TRAIN, VALIDATION = [f"q{i}" for i in range(4, 10)], ["q2", "q3"]  # rotation 0 of the five folds; q0, q1 its test


def test_grid_varies_one_parameter_at_a_time():
    settings = sweep_settings(CONFIG.model, SweepConfig(rate=(0.5, 1.0), blocks=(0,), top_k=(2, 3)))
    assert [(p, v) for p, v, _ in settings] == [
        ("rate", 0.5),
        ("rate", 1.0),
        ("blocks", 0.0),
        ("top_k", 2.0),
        ("top_k", 3.0),
    ]
    for parameter, value, model in settings:
        changed = {f.name for f in dataclasses.fields(model) if getattr(model, f.name) != getattr(CONFIG.model, f.name)}
        assert changed <= {parameter} and getattr(model, parameter) == value
    with pytest.raises(ValueError, match="repeat"):
        SweepConfig(rate=(0.5, 0.5))
    with pytest.raises(ValueError, match="empty"):
        SweepConfig(rate=(), blocks=(), top_k=())


def test_sweeps_train_each_setting_once(collection, tmp_path):
    corpus, queries, qrels, run, splits, vectors = collection
    data = prepare_data(corpus, queries, qrels, run, vectors, CONFIG)
    results = run_sweep(data, TRAIN, VALIDATION, CONFIG, SWEEP, tmp_path / "a")
    assert results.schema == pl.Schema(SWEEP_RESULTS)
    # 4 grid points x 2 measures; (rate 0.8, T 2) is the base, shared by both sweeps: 3 trainings
    assert results.height == 4 * 2
    assert len([p for p in tmp_path.joinpath("a").iterdir() if p.is_dir()]) == 3
    base = results.filter((pl.col("parameter") == "rate") & (pl.col("value") == 0.8)).drop("parameter", "value")
    same = results.filter((pl.col("parameter") == "blocks") & (pl.col("value") == 2.0)).drop("parameter", "value")
    assert base.equals(same)
    with pytest.raises(ValueError, match="validation"):
        run_sweep(data, TRAIN, [], CONFIG, SWEEP, tmp_path / "b")


def _flip(qrels: pl.DataFrame, run: pl.DataFrame, query_ids: list[str]) -> pl.DataFrame:
    """The qrels with `query_ids` relabelled: their top 3 relevant, nothing else."""
    chosen = pl.col("query_id").is_in(query_ids)
    return pl.concat(
        [
            qrels.filter(~chosen),
            run.filter(chosen).select("query_id", "doc_id", relevance=(pl.col("rank") <= 3).cast(pl.Int32)),
        ]
    )


def test_sweeps_read_validation_qrels_and_never_test_ones(collection, tmp_path):
    """Rotation 0 tests on fold 0 (q0, q1) and validates on fold 1 (q2, q3)."""
    corpus, queries, qrels, run, splits, vectors = collection
    one = SweepConfig(rate=(0.5,), blocks=(), top_k=())
    outcomes = {}
    for name, judged in (
        ("original", qrels),
        ("test flipped", _flip(qrels, run, ["q0", "q1"])),
        ("validation flipped", _flip(qrels, run, ["q2", "q3"])),
    ):
        data = prepare_data(corpus, queries, judged, run, vectors, CONFIG)
        outcomes[name] = run_sweep(data, TRAIN, VALIDATION, CONFIG, one, tmp_path / name)
    assert outcomes["test flipped"].equals(outcomes["original"])
    assert outcomes["validation flipped"]["validation"].to_list() != outcomes["original"]["validation"].to_list()


def test_choose_takes_the_best_mean_validation_value():
    """Two units (folds 0 and 1): the mean over them decides."""
    rows = [
        ("rate", 0.4, 0, "nDCG@20", 0.30, 1),
        ("rate", 0.4, 1, "nDCG@20", 0.40, 1),
        ("rate", 0.8, 0, "nDCG@20", 0.38, 1),
        ("rate", 0.8, 1, "nDCG@20", 0.36, 1),
        ("rate", 1.0, 0, "nDCG@20", 0.50, 1),
        ("rate", 1.0, 1, "nDCG@20", 0.10, 1),
        ("rate", 0.4, 0, "P@20", 0.9, 1),
        ("rate", 0.4, 1, "P@20", 0.9, 1),
        ("blocks", 1.0, 0, "nDCG@20", 0.2, 1),
        ("blocks", 2.0, 0, "nDCG@20", 0.2, 1),
    ]
    results = pl.DataFrame(
        [(p, v, m, x, e, f) for p, v, f, m, x, e in rows], schema={**SWEEP_RESULTS, "fold": pl.Int32}, orient="row"
    )
    assert choose(results, "nDCG@20") == {"rate": 0.8, "blocks": 1.0}  # means 0.35, 0.37, 0.30; a tie: the smaller
    assert choose(results, "P@20") == {"rate": 0.4}
    with pytest.raises(ValueError, match="MAP"):
        choose(results, "MAP")
    figure = sweep_figure(results, {"rate": 0.8}, ["nDCG@20", "P@20"])
    assert isinstance(figure, matplotlib.figure.Figure) and len(figure.axes) == 2
    assert "mean of 2 training unit(s)" in sweep_caption(results, {"rate": 0.8}, "nDCG@20", ["nDCG@20"])


def test_a_sweep_point_equals_training_and_reranking_that_setting_alone(collection, tmp_path):
    """The sweep scores validation batches built once for all settings: each row equals that setting trained with
    `train_ghrm` and its validation queries reranked with `rerank`, batches made anew."""
    from dagster_ir.evaluation import evaluate_run
    from dagster_ir.methods.ghrm.protocol import rerank, train_ghrm

    corpus, queries, qrels, run, splits, vectors = collection
    data = prepare_data(corpus, queries, qrels, run, vectors, CONFIG)
    results = run_sweep(
        data, TRAIN, VALIDATION, CONFIG, SweepConfig(rate=(0.5,), blocks=(), top_k=()), tmp_path / "sweep"
    )
    alone = dataclasses.replace(CONFIG, model=dataclasses.replace(CONFIG.model, rate=0.5))
    model, result, _, _ = train_ghrm(data, alone, "ghrm", TRAIN, VALIDATION, tmp_path / "alone", keep_start=False)
    reranked = rerank(model, data, VALIDATION, CONFIG.training.rerank_depth, "ghrm", CONFIG.training.eval_batch_size)
    means = evaluate_run(reranked, qrels.filter(pl.col("query_id").is_in(VALIDATION)), list(SweepConfig().measures))
    expected = dict(means.group_by("measure").agg(pl.col("value").mean()).iter_rows())
    assert dict(results.select("measure", "validation").iter_rows()) == expected
    assert results["best_epoch"].unique().to_list() == [result.best_epoch]


def test_a_sweep_in_worker_processes_equals_one_in_this_process(collection, tmp_path):
    corpus, queries, qrels, run, splits, vectors = collection
    data = prepare_data(corpus, queries, qrels, run, vectors, CONFIG)
    here = run_sweep(data, TRAIN, VALIDATION, CONFIG, SWEEP, tmp_path / "here")
    there = run_sweep(data, TRAIN, VALIDATION, CONFIG, SWEEP, tmp_path / "there", workers=2)
    assert there.equals(here)
    assert sorted(p.name for p in (tmp_path / "there").iterdir()) == sorted(
        p.name for p in (tmp_path / "here").iterdir()
    )
    with pytest.raises(ValueError, match="workers must be >= 1"):
        run_sweep(data, TRAIN, VALIDATION, CONFIG, SWEEP, tmp_path / "none", workers=0)
