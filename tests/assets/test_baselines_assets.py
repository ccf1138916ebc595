"""The baselines asset called directly on a tiny collection: protocol roles, the check, the config."""

import dagster as dg
import numpy as np
import polars as pl
import pytest

from assets.defs.baselines import NeuralBaselinesConfig, neural_baselines, neural_baselines_are_rerankings
from assets.defs.ghrm import Word2VecAssetConfig, word2vec
from assets.lib.resources import DataDirResource
from dagster_ir.methods.baselines import profile
from dagster_ir.neural.device import native_bf16
from dagster_ir.schemas import NEGATIVES, QRELS, QUERIES, QUERY_SPLITS, RUN

TOPICS = [
    "solar panel energy",
    "river fish species",
    "roman road empire",
    "coffee brew bean",
    "volcano ash lava",
    "chess opening theory",
    "tennis serve court",
    "piano chord melody",
    "glacier ice melt",
    "desert sand dune",
]
SPLITS = ["train/model"] * 6 + ["dev"] * 2 + ["test"] * 2


def _collection():
    rng = np.random.default_rng(0)
    filler = "the of and some many other more".split()
    docs, run, qrels, negatives = [], [], [], []
    for t, topic in enumerate(TOPICS):
        for j in range(4):
            words = topic.split() * (j + 1) + list(rng.choice(filler, 6))
            docs.append((f"d{t}-{j}", "", " ".join(rng.permutation(words))))
        qrels += [(f"q{t}", f"d{t}-2", 1), (f"q{t}", f"d{t}-3", 1)]
        negatives += [(f"q{t}", f"d{t}-{p}", f"d{(t + 1) % 10}-{n}", n + 1, n) for p in (2, 3) for n in range(2)]
    for t in range(len(TOPICS)):
        ranked = [f"d{t}-{j}" for j in range(4)] + [f"d{(t + 1) % 10}-{j}" for j in range(4)]
        run += [(f"q{t}", d, float(10 - r), r + 1, "bm25") for r, d in enumerate(ranked)]
    corpus = pl.DataFrame(docs, schema={"doc_id": pl.String, "title": pl.String, "text": pl.String}, orient="row")
    queries = pl.DataFrame({"query_id": [f"q{t}" for t in range(10)], "text": TOPICS}, schema=QUERIES)
    splits = pl.DataFrame(
        {"query_id": queries["query_id"], "split": SPLITS, "fold": [t % 5 for t in range(10)]}, schema=QUERY_SPLITS
    )
    return (
        corpus,
        queries,
        pl.DataFrame(qrels, schema=QRELS, orient="row"),
        splits,
        pl.DataFrame(run, schema=RUN, orient="row"),
        pl.DataFrame(negatives, schema=NEGATIVES, orient="row"),
    )


@pytest.mark.slow
def test_neural_baselines_train_on_train_choose_on_dev_and_score_test(tmp_path):
    corpus, queries, qrels, splits, run, negatives = _collection()
    data = DataDirResource(path=str(tmp_path))
    vectors = word2vec(
        context=dg.build_asset_context(partition_key="wiki-car"),
        config=Word2VecAssetConfig(source="trained", dim=8, epochs=2, min_count=1),
        data=data,
        corpus=corpus.lazy(),
    ).value
    config = NeuralBaselinesConfig(
        models=["knrm", "drmm"], epochs=2, query_words=3, doc_words=16, rerank_depth=6, threads=1
    )
    context = dg.build_asset_context(partition_key="wiki-car/seed-0")
    runs = neural_baselines(
        context=context,
        config=config,
        data=data,
        corpus=corpus.lazy(),
        queries=queries,
        qrels=qrels,
        query_splits=splits,
        candidate_runs=run,
        negatives=negatives,
        word2vec=vectors,
    ).value
    assert sorted(runs["run_name"].unique()) == ["drmm", "drmm+bm25", "knrm", "knrm+bm25"]
    assert sorted(runs["query_id"].unique()) == ["q8", "q9"]  # the test split only
    top6 = run.filter(pl.col("query_id").is_in(["q8", "q9"]) & (pl.col("rank") <= 6))
    for name in ("drmm", "knrm", "knrm+bm25"):
        mine = runs.filter(pl.col("run_name") == name)
        assert sorted(mine["doc_id"]) == sorted(top6["doc_id"])  # a reranking of the top 6, nothing else
    assert runs["seed"].unique().to_list() == [0] and runs["fold"].null_count() == runs.height
    assert neural_baselines_are_rerankings(runs).passed
    assert any((tmp_path / "files" / "neural_baselines").rglob("best"))  # the validation-chosen epoch's weights
    png = tmp_path / "files" / "neural_baselines" / "wiki-car" / "seed-0" / "training_curves.png"
    assert png.read_bytes()[:4] == b"\x89PNG"  # the per-epoch loss and validation curves

    broken = pl.concat([runs, runs.head(1)])
    assert not neural_baselines_are_rerankings(broken).passed
    with pytest.raises(ValueError, match="no candidate run 'dense'"):
        neural_baselines(
            context=context,
            config=NeuralBaselinesConfig(candidate_run="dense"),
            data=data,
            corpus=corpus.lazy(),
            queries=queries,
            qrels=qrels,
            query_splits=splits,
            candidate_runs=run,
            negatives=negatives,
            word2vec=vectors,
        )


@pytest.mark.slow
def test_rotated_folds_score_every_query_once(tmp_path):
    corpus, queries, qrels, splits, run, negatives = _collection()
    data = DataDirResource(path=str(tmp_path))
    vectors = word2vec(
        context=dg.build_asset_context(partition_key="wiki-car"),
        config=Word2VecAssetConfig(source="trained", dim=8, epochs=2, min_count=1),
        data=data,
        corpus=corpus.lazy(),
    ).value
    config = NeuralBaselinesConfig(
        models=["knrm"], epochs=1, query_words=3, doc_words=16, rerank_depth=6, threads=1, rotate_folds=True
    )
    runs = neural_baselines(
        context=dg.build_asset_context(partition_key="wiki-car/seed-0"),
        config=config,
        data=data,
        corpus=corpus.lazy(),
        queries=queries,
        qrels=qrels,
        query_splits=splits,
        candidate_runs=run,
        negatives=negatives,
        word2vec=vectors,
    ).value
    assert sorted(runs["run_name"].unique()) == ["knrm", "knrm+bm25"]
    folds = runs.group_by("query_id").agg(pl.col("fold").unique())
    assert folds.height == 10 and folds["fold"].list.len().max() == 1  # every query, by one rotation's model
    held = dict(zip(folds["query_id"], folds["fold"].list.first()))
    assert held == dict(zip(splits["query_id"], splits["fold"]))  # ... the one whose test fold held it
    assert runs["seed"].unique().to_list() == [0]


def test_config_maps_onto_the_profile():
    domain = NeuralBaselinesConfig(epochs=3, lr=0.5, rerank_depth=7).to_domain()
    assert (domain.epochs, domain.lr, domain.rerank_depth) == (3, 0.5, 7)
    assert domain.doc_words == profile("demo").doc_words  # None keeps the profile's value
    assert NeuralBaselinesConfig(profile="paper").to_domain().doc_words == 1000
    assert (domain.bert_threads, domain.threads) == (0, 1)  # demo: BERT on every core
    assert (
        NeuralBaselinesConfig(bf16=False, bert_threads=2).to_domain().bf16,
        NeuralBaselinesConfig(bf16=False, bert_threads=2).to_domain().bert_threads,
    ) == (False, 2)
    for name in ("demo", "paper"):  # BERT in bf16 where the device has it natively (emulated bf16 is slower)
        assert NeuralBaselinesConfig(profile=name, device="cpu").to_domain().bf16 is native_bf16("cpu")
    with pytest.raises(ValueError, match="unknown baselines profile"):
        NeuralBaselinesConfig(profile="huge").to_domain()
