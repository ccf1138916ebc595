"""GHRM's fold protocol: training pairs, reranking, epoch selection on the validation fold only."""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl
import pytest
import torch

from dagster_ir.methods.ghrm import protocol
from dagster_ir.methods.ghrm.inputs import InputConfig
from dagster_ir.methods.ghrm.model import GHRM, GHRMConfig, ModelConfig, TrainingConfig
from dagster_ir.methods.ghrm.protocol import (
    fingerprint,
    fold_means,
    fold_run,
    load_ghrm,
    prepare_data,
    rerank,
    rerank_inputs,
    run_folds,
    run_variants,
    sample_batch,
    score_inputs,
    score_pairs,
    train_ghrm,
    training_pools,
)
from dagster_ir.methods.ghrm.text import RAW
from dagster_ir.schemas import RUN

CONFIG = GHRMConfig(
    inputs=InputConfig(doc_words=8, query_words=2, min_count=1, window=3, text=RAW),
    model=ModelConfig(top_k=3, mlp_hidden=(4,)),
    training=TrainingConfig(epochs=3, batches_per_epoch=2, pairs_per_batch=4, train_depth=6, rerank_depth=5, seed=1),
)


@pytest.fixture(scope="module")
def data(collection):
    corpus, queries, qrels, run, _, vectors = collection
    return prepare_data(corpus, queries, qrels, run, vectors, CONFIG)


def test_training_pools_come_from_the_given_queries_and_the_top_of_the_run(data, collection):
    _, _, qrels, run, _, _ = collection
    pools = training_pools(data, ["q0", "q3"], CONFIG)
    assert sorted(pools) == ["q0", "q3"]
    relevant = set(qrels.filter(pl.col("relevance") > 0).select("query_id", "doc_id").iter_rows())
    for query, (positives, negatives) in pools.items():
        top = run.filter((pl.col("query_id") == query) & (pl.col("rank") <= CONFIG.training.train_depth))["doc_id"]
        assert sorted([*positives, *negatives]) == sorted(top.to_list())  # every top document, once
        assert all((query, d) in relevant for d in positives) and not any((query, d) in relevant for d in negatives)
    # q0's relevant documents sit at ranks 2 and 5 (rank 1 is judged 0: a negative)
    assert pools["q0"][0] == sorted([_rank(run, "q0", 2), _rank(run, "q0", 5)])
    assert _rank(run, "q0", 1) in pools["q0"][1]
    shallow = dataclasses.replace(CONFIG, training=dataclasses.replace(CONFIG.training, train_depth=4))
    assert training_pools(data, ["q0"], shallow)["q0"][0] == [_rank(run, "q0", 2)]
    # a query with no relevant document in its top is not trained on
    assert (
        training_pools(
            data, ["q0"], dataclasses.replace(CONFIG, training=dataclasses.replace(CONFIG.training, train_depth=1))
        )
        == {}
    )


def test_training_pools_follow_the_rerank_depth_unless_told_and_read_only_the_training_queries(data, collection):
    _, _, _, run, _, _ = collection
    # train_depth None: pairs come from the depth reranked (rerank_depth 4: q0's relevant ranks 2 and 5 -> only 2)
    default = dataclasses.replace(
        CONFIG, training=dataclasses.replace(CONFIG.training, train_depth=None, rerank_depth=4)
    )
    assert default.training.pair_depth == 4
    assert training_pools(data, ["q0"], default)["q0"][0] == [_rank(run, "q0", 2)]
    assert sorted(sum(training_pools(data, ["q0"], default)["q0"], [])) == sorted(
        run.filter((pl.col("query_id") == "q0") & (pl.col("rank") <= 4))["doc_id"].to_list()
    )
    # only the queries given (the training fold's) get pools, though q3 has pairs in its top too
    assert list(training_pools(data, ["q0"], CONFIG)) == ["q0"] and "q3" in training_pools(data, ["q0", "q3"], CONFIG)
    with pytest.raises(ValueError, match="train_depth must be >= 1 or None"):
        TrainingConfig(train_depth=0)


def test_a_batch_holds_distinct_queries_with_one_pair_each():
    pools = {f"q{i}": ([f"p{i}a", f"p{i}b"], [f"n{i}a", f"n{i}b", f"n{i}c"]) for i in range(20)}
    rng = np.random.default_rng(0)
    for _ in range(50):
        batch = sample_batch(pools, 16, rng)
        assert len(batch) == 16 and len({q for q, _, _ in batch}) == 16
        for query, positive, negative in batch:
            assert positive in pools[query][0] and negative in pools[query][1]
    # every positive and negative is drawn in time
    drawn = [t for _ in range(200) for t in sample_batch(pools, 16, rng)]
    assert {p for _, p, _ in drawn} == {p for ps, _ in pools.values() for p in ps}
    assert {n for _, _, n in drawn} == {n for _, ns in pools.values() for n in ns}
    # fewer queries than the batch: drawn with replacement, still one pair per slot
    small = {q: pools[q] for q in ("q0", "q1", "q2")}
    batch = sample_batch(small, 16, rng)
    assert len(batch) == 16 and {q for q, _, _ in batch} == {"q0", "q1", "q2"}


def _rank(run: pl.DataFrame, query: str, rank: int) -> str:
    return run.filter((pl.col("query_id") == query) & (pl.col("rank") == rank))["doc_id"].item()


class _Constant(torch.nn.Module):
    def forward(self, batch):
        return torch.zeros(len(batch))


def test_rerank_keeps_depth_queries_and_breaks_ties_by_first_stage_rank(data, collection):
    run = collection[3]
    reranked = rerank(_Constant(), data, ["q2", "q7"], depth=5, run_name="x")
    assert reranked.columns == list(RUN) and reranked.schema == pl.Schema(RUN)
    assert sorted(reranked["query_id"].unique()) == ["q2", "q7"]
    for query in ("q2", "q7"):
        mine = reranked.filter(pl.col("query_id") == query).sort("rank")
        assert mine["rank"].to_list() == [1, 2, 3, 4, 5]
        assert (
            mine["doc_id"].to_list()
            == run.filter((pl.col("query_id") == query) & (pl.col("rank") <= 5)).sort("rank")["doc_id"].to_list()
        )


def test_rerank_orders_by_model_score(data):
    torch.manual_seed(0)
    model = GHRM(CONFIG.model, CONFIG.inputs.query_words).eval()
    reranked = rerank(model, data, ["q1"], depth=5, run_name="ghrm")
    with torch.no_grad():
        expected = score_pairs(model, data, list(zip(reranked["query_id"], reranked["doc_id"])))
    np.testing.assert_allclose(reranked["score"].to_numpy(), expected.double().numpy(), rtol=1e-6)
    assert reranked["score"].is_sorted(descending=True)


def test_folds_cover_every_query_once_with_disjoint_roles(data, collection, tmp_path):
    splits = collection[4]
    one_epoch = dataclasses.replace(CONFIG, training=dataclasses.replace(CONFIG.training, epochs=1))
    results = run_folds(data, splits, one_epoch, "ghrm", tmp_path)
    assert [r.fold for r in results] == [0, 1, 2, 3, 4]
    for r in results:
        roles = [set(r.train_queries), set(r.validation_queries), set(r.test_queries)]
        assert sum(map(len, roles)) == 10 and len(set.union(*roles)) == 10
        assert r.test_queries == [f"q{2 * r.fold}", f"q{2 * r.fold + 1}"]
        assert r.validation_queries == [f"q{2 * ((r.fold + 1) % 5)}", f"q{2 * ((r.fold + 1) % 5) + 1}"]
        assert len(r.result.dev_scores) == 1
        assert (r.checkpoint_dir / "best" / "model.safetensors").is_file()
    run = fold_run(results)
    assert run.group_by("query_id").agg(pl.col("fold").unique()).height == 10
    means = fold_means(run, data.qrels, "P@20")
    assert len(means) == 5
    for fold, mean in enumerate(means):  # fold i's mean is over its two test queries only
        part = run.filter(pl.col("fold") == fold)
        assert sorted(part["query_id"].unique()) == [f"q{2 * fold}", f"q{2 * fold + 1}"]
        hits = part.join(data.qrels.filter(pl.col("relevance") > 0), on=["query_id", "doc_id"]).height
        assert mean == pytest.approx(hits / 20 / 2)
    with pytest.raises(ValueError, match="more than one fold"):
        fold_means(
            pl.concat([run, run.filter(pl.col("query_id") == "q0").with_columns(fold=pl.lit(4, pl.Int32))]),
            data.qrels,
            "P@20",
        )
    assert run.filter(pl.col("query_id") == "q4")["fold"].unique().to_list() == [2]
    assert run.group_by("query_id").len()["len"].unique().to_list() == [5]


def test_test_queries_never_influence_training_or_epoch_choice(collection, tmp_path):
    """Change the test fold's qrels completely: the chosen epoch, curves and test scores stay the same."""
    corpus, queries, qrels, run, splits, vectors = collection
    test = pl.col("query_id").is_in(["q0", "q1"])  # fold 0 is the test fold of rotation 0
    flipped = pl.concat(
        [
            qrels.filter(~test),
            run.filter(test).select("query_id", "doc_id", relevance=(pl.col("rank") <= 3).cast(pl.Int32)),
        ]
    )
    outcomes = []
    for name, judged in (("original", qrels), ("flipped", flipped)):
        data = prepare_data(corpus, queries, judged, run, vectors, CONFIG)
        (result,) = run_folds(data, splits, CONFIG, "ghrm", tmp_path / name, folds=[0])
        outcomes.append(result)
    original, changed = outcomes
    assert original.result.dev_scores == changed.result.dev_scores
    assert original.result.loss_curve == changed.result.loss_curve
    assert original.result.best_epoch == changed.result.best_epoch
    assert original.test_run.equals(changed.test_run)


def test_validation_queries_do_choose_the_epoch(collection, tmp_path):
    """The counterpart: the validation fold's qrels are what the choice reads."""
    corpus, queries, qrels, run, splits, vectors = collection
    validation = pl.col("query_id").is_in(["q2", "q3"])  # fold 1 validates rotation 0
    flipped = pl.concat(
        [
            qrels.filter(~validation),
            run.filter(validation).select("query_id", "doc_id", relevance=(pl.col("rank") <= 3).cast(pl.Int32)),
        ]
    )
    scores = []
    for name, judged in (("original", qrels), ("flipped", flipped)):
        data = prepare_data(corpus, queries, judged, run, vectors, CONFIG)
        scores.append(run_folds(data, splits, CONFIG, "ghrm", tmp_path / name, folds=[0])[0].result.dev_scores)
    assert scores[0] != scores[1]


def test_load_ghrm_gives_the_chosen_weights(data, collection, tmp_path):
    (result,) = run_folds(data, collection[4], CONFIG, "ghrm-soft", tmp_path, folds=[2])
    model = load_ghrm(result.checkpoint_dir)
    assert model.config.rate == 1.0
    again = rerank(model, data, result.test_queries, CONFIG.training.rerank_depth, "ghrm-soft")
    assert again.equals(result.test_run.drop("fold"))


def test_prepare_data_wants_one_run(collection):
    corpus, queries, qrels, run, _, vectors = collection
    two = pl.concat([run, run.with_columns(run_name=pl.lit("ql"))])
    with pytest.raises(ValueError, match="one candidate run"):
        prepare_data(corpus, queries, qrels, two, vectors, CONFIG)


def test_fingerprint_follows_every_training_input(data, collection):
    corpus, queries, qrels, run, splits, vectors = collection
    same = prepare_data(corpus, queries, qrels, run, vectors, CONFIG)
    assert fingerprint(CONFIG, data, splits) == fingerprint(CONFIG, same, splits)
    fewer_qrels = prepare_data(corpus, queries, qrels.head(-1), run, vectors, CONFIG)
    assert fingerprint(CONFIG, fewer_qrels, splits) != fingerprint(CONFIG, data, splits)
    moved = splits.with_columns(fold=pl.when(pl.col("query_id") == "q0").then(4).otherwise(pl.col("fold")))
    assert fingerprint(CONFIG, data, moved) != fingerprint(CONFIG, data, splits)
    deeper = dataclasses.replace(CONFIG, model=dataclasses.replace(CONFIG.model, top_k=4))
    assert fingerprint(deeper, data, splits) != fingerprint(CONFIG, data, splits)


def test_collated_once_scores_equal_collated_at_every_scoring(data):
    """Validation batches collated once (kept across epochs) give exactly the scores of batches collated anew."""
    torch.manual_seed(3)
    model = GHRM(CONFIG.model, CONFIG.inputs.query_words).eval()
    queries = ["q0", "q3", "q8"]
    kept = rerank_inputs(data, queries, depth=5, batch_size=4)
    fresh = rerank_inputs(data, queries, depth=5, batch_size=4, cache_bytes=0)
    assert kept.batches is not None and len(kept.batches) == len(kept.chunks) == 4  # 15 pairs in batches of 4
    assert fresh.batches is None
    expected = rerank(model, data, queries, 5, "ghrm", batch_size=4)
    assert score_inputs(model, data, kept, "ghrm").equals(expected)
    assert score_inputs(model, data, fresh, "ghrm").equals(expected)
    too_big = rerank_inputs(data, queries, depth=5, batch_size=4, cache_bytes=64)
    assert too_big.batches is None and score_inputs(model, data, too_big, "ghrm").equals(expected)


def test_training_on_kept_validation_batches_chooses_as_without(data, collection, tmp_path):
    """train_ghrm scores the same validation batches every epoch: curves, choice and weights equal those of
    collating them at every epoch."""
    validation = ["q2", "q3"]
    train = [f"q{i}" for i in (4, 5, 6, 7, 8, 9)]
    outcomes = []
    for name, cache in (("kept", protocol.CACHE_BYTES), ("fresh", 0)):
        inputs = rerank_inputs(data, validation, CONFIG.training.rerank_depth, CONFIG.training.eval_batch_size, cache)
        assert (inputs.batches is None) == (cache == 0)
        model, result, _, _ = train_ghrm(data, CONFIG, "ghrm", train, validation, tmp_path / name, inputs)
        outcomes.append((result, rerank(model, data, ["q0", "q1"], 5, "ghrm")))
    (kept, kept_run), (fresh, fresh_run) = outcomes
    assert kept.dev_scores == fresh.dev_scores and kept.best_epoch == fresh.best_epoch
    assert kept.loss_curve == fresh.loss_curve
    assert kept_run.equals(fresh_run)


def test_variants_trained_in_worker_processes_equal_those_trained_here(data, collection, tmp_path):
    """Two spawned workers train the (variant, rotation) pairs: the same curves, choices and runs as one process."""
    splits = collection[4]
    here = run_variants(data, splits, CONFIG, ["ghrm", "ghrm-nopool"], tmp_path / "here", folds=[0, 3])
    there = run_variants(data, splits, CONFIG, ["ghrm", "ghrm-nopool"], tmp_path / "there", folds=[0, 3], workers=2)
    assert list(there) == ["ghrm", "ghrm-nopool"]
    for variant in here:
        assert [r.fold for r in there[variant]] == [0, 3]
        for mine, theirs in zip(here[variant], there[variant], strict=True):
            assert (
                theirs.result.dev_scores == mine.result.dev_scores
                and theirs.result.loss_curve == mine.result.loss_curve
            )
            assert theirs.result.best_epoch == mine.result.best_epoch
            assert theirs.test_run.equals(mine.test_run) and theirs.validation_run.equals(mine.validation_run)
            assert theirs.checkpoint_dir == tmp_path / "there" / variant / f"fold-{mine.fold}"
            assert (theirs.checkpoint_dir / "best" / "model.safetensors").is_file()
    with pytest.raises(ValueError, match="workers must be >= 1"):
        run_variants(data, splits, CONFIG, ["ghrm"], tmp_path / "none", workers=0)


@pytest.mark.parametrize("scripted", [(0.9, 0.5, 0.6, 0.4), (0.1, 0.5, 0.6, 0.4)])
def test_the_untrained_start_is_kept_on_validation_only_when_no_epoch_beats_it(scripted, data, tmp_path, monkeypatch):
    """The freshly initialised weights are scored first; kept (in memory and in `best/`, which load_ghrm reads)
    only when above every epoch, else the best epoch's."""
    calls = iter(scripted)
    monkeypatch.setattr(protocol, "mean_measure", lambda *args: next(calls))
    train = [f"q{i}" for i in (4, 5, 6, 7, 8, 9)]
    model, result, start_score, kept_start = train_ghrm(data, CONFIG, "ghrm", train, ["q2", "q3"], tmp_path)
    assert start_score == scripted[0] and result.dev_scores == list(scripted[1:])
    start = protocol.make_model(protocol.variant_config(CONFIG.model, "ghrm"), data.inputs.query_words, 1)
    loaded = load_ghrm(tmp_path)
    weights = dict(model.state_dict())
    assert all(torch.equal(weights[k], v) for k, v in loaded.state_dict().items())  # disk holds what was kept
    untouched = all(torch.equal(weights[k], v) for k, v in start.state_dict().items())
    assert kept_start == (scripted[0] > max(scripted[1:])) == untouched
    assert result.best_epoch == 1  # 0.6: the second epoch, whichever weights were kept
