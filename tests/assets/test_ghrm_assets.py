"""GHRM assets called directly on a tiny collection: word2vec manifest, ghrm_runs, the check, configs."""

import dagster as dg
import numpy as np
import polars as pl
import pytest

from assets.defs.ghrm import (
    GHRMAssetConfig,
    GHRMSweepsAssetConfig,
    Word2VecAssetConfig,
    ghrm_runs,
    ghrm_runs_are_complete,
    ghrm_sweeps,
    word2vec,
)
from assets.lib.resources import DataDirResource
from dagster_ir.methods.ghrm.model import PROFILES
from dagster_ir.methods.ghrm.sweeps import PROFILES as SWEEP_PROFILES
from dagster_ir.methods.ghrm.sweeps import SWEEP_RESULTS
from dagster_ir.methods.ghrm.text import TextConfig, tokens
from dagster_ir.methods.ghrm.word2vec import load_vectors
from dagster_ir.schemas import QRELS, QUERIES, QUERY_SPLITS, RUN
from dagster_ir.storage.parquet import frame_version

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


def _collection():
    rng = np.random.default_rng(0)
    filler = "the of and some many other more".split()
    docs, run, qrels = [], [], []
    for t, topic in enumerate(TOPICS):
        for j in range(4):
            words = topic.split() * (j + 1) + list(rng.choice(filler, 6))
            docs.append((f"d{t}-{j}", "", " ".join(rng.permutation(words))))
        qrels += [(f"q{t}", f"d{t}-2", 1), (f"q{t}", f"d{t}-3", 1)]
    for t in range(len(TOPICS)):
        ranked = [f"d{t}-{j}" for j in range(4)] + [f"d{(t + 1) % 10}-{j}" for j in range(4)]
        run += [(f"q{t}", d, float(10 - r), r + 1, "bm25") for r, d in enumerate(ranked)]
    corpus = pl.DataFrame(docs, schema={"doc_id": pl.String, "title": pl.String, "text": pl.String}, orient="row")
    queries = pl.DataFrame({"query_id": [f"q{t}" for t in range(10)], "text": TOPICS}, schema=QUERIES)
    splits = pl.DataFrame(
        {"query_id": queries["query_id"], "split": "test", "fold": [t % 5 for t in range(10)]}, schema=QUERY_SPLITS
    )
    return (
        corpus,
        queries,
        pl.DataFrame(qrels, schema=QRELS, orient="row"),
        splits,
        pl.DataFrame(run, schema=RUN, orient="row"),
    )


@pytest.mark.slow
def test_word2vec_then_ghrm_runs(tmp_path):
    corpus, queries, qrels, splits, run = _collection()
    data = DataDirResource(path=str(tmp_path))
    context = dg.build_asset_context(partition_key="wiki-car")
    manifest = word2vec(
        context=context,
        config=Word2VecAssetConfig(source="trained", dim=8, epochs=2, min_count=1),
        data=data,
        corpus=corpus.lazy(),
    ).value
    assert manifest["dim"].item() == 8 and manifest["words"].item() > 20
    assert len(load_vectors(manifest["path"].item())) == manifest["words"].item()

    config = GHRMAssetConfig(
        variants=["ghrm", "ghrm-nopool"],
        folds=[0, 1],
        min_count=1,
        epochs=2,
        batches_per_epoch=2,
        top_k=3,
        train_depth=8,
        rerank_depth=6,
    )
    output = ghrm_runs(
        context=dg.build_asset_context(partition_key="wiki-car"),
        config=config,
        data=data,
        corpus=corpus.lazy(),
        queries=queries,
        qrels=qrels,
        query_splits=splits,
        candidate_runs=run,
        word2vec=manifest,
    )
    runs = output.value
    assert sorted(runs["run_name"].unique()) == ["ghrm", "ghrm+bm25", "ghrm-nopool", "ghrm-nopool+bm25"]
    assert output.data_version == dg.DataVersion(frame_version(runs))  # by content (see assets.lib.staleness)
    assert runs.select(list(RUN)).schema == pl.Schema(RUN)
    # rotations 0 and 1 test folds 0 and 1: queries q0, q5 and q1, q6, six candidates each
    assert sorted(runs["query_id"].unique()) == ["q0", "q1", "q5", "q6"]
    assert runs.group_by("run_name", "query_id").len()["len"].unique().to_list() == [6]
    assert ghrm_runs_are_complete(runs).passed
    checkpoints = list((tmp_path / "files" / "ghrm" / "wiki-car").glob("v*/ghrm/fold-1/best/model.safetensors"))
    assert len(checkpoints) == 1

    # seeds: one run per seed, the offset seed's checkpoints under their own root, seed 0's reused
    seeded = ghrm_runs(
        context=dg.build_asset_context(partition_key="wiki-car"),
        config=config.model_copy(update={"seeds": [0, 2]}),
        data=data,
        corpus=corpus.lazy(),
        queries=queries,
        qrels=qrels,
        query_splits=splits,
        candidate_runs=run,
        word2vec=manifest,
    ).value
    assert sorted(seeded["seed"].unique()) == [0, 2]
    first = seeded.filter(pl.col("seed") == 0).drop("seed").sort("run_name", "query_id", "rank")
    assert first.equals(runs.drop("seed").sort("run_name", "query_id", "rank"))  # seed 0 = the run above, resumed
    roots = sorted((tmp_path / "files" / "ghrm" / "wiki-car").glob("v*"))
    assert len(roots) == 2
    assert ghrm_runs_are_complete(seeded).passed
    twice = pl.concat([seeded, seeded.filter(pl.col("seed") == 2)])
    assert not ghrm_runs_are_complete(twice).passed

    # wiki-car's unit (fixed split): trains on train/model, scores dev (folds 3) and never test
    fixed = splits.with_columns(
        split=pl.col("fold").replace_strict(
            {0: "train/model", 1: "train/model", 2: "train/model", 3: "dev", 4: "test"}, return_dtype=pl.String
        )
    )
    sweeps = ghrm_sweeps(
        context=dg.build_asset_context(partition_key="wiki-car/seed-0"),
        config=GHRMSweepsAssetConfig(
            min_count=1,
            epochs=1,
            batches_per_epoch=2,
            top_k=3,
            train_depth=8,
            rerank_depth=6,
            rates=[0.5, 1.0],
            blocks_grid=[],
            top_ks=[2],
        ),
        data=data,
        corpus=corpus.lazy(),
        queries=queries,
        qrels=qrels,
        query_splits=fixed,
        candidate_runs=run,
        word2vec=manifest,
    ).value
    assert sweeps.schema == pl.Schema({**SWEEP_RESULTS, "fold": pl.Int32, "seed": pl.Int64})
    assert sorted(set(sweeps.select("parameter", "value").iter_rows())) == [
        ("rate", 0.5),
        ("rate", 1.0),
        ("top_k", 2.0),
    ]
    assert sweeps["seed"].unique().to_list() == [0] and sweeps["fold"].null_count() == sweeps.height
    assert (
        len(list((tmp_path / "files" / "ghrm_sweeps" / "wiki-car" / "seed-0").glob("v*/*/best/model.safetensors"))) == 3
    )

    # vectors trained on other text settings than GHRM reads are refused, naming both
    raw = word2vec(
        context=context,
        config=Word2VecAssetConfig(source="trained", dim=8, epochs=1, min_count=1, lemmatize=False),
        data=data,
        corpus=corpus.lazy(),
    ).value
    with pytest.raises(ValueError, match="lemmatize"):
        ghrm_runs(
            context=dg.build_asset_context(partition_key="wiki-car"),
            config=config,
            data=data,
            corpus=corpus.lazy(),
            queries=queries,
            qrels=qrels,
            query_splits=splits,
            candidate_runs=run,
            word2vec=raw,
        )


def test_check_fails_on_duplicates_and_non_finite_scores():
    good = pl.DataFrame(
        {
            "query_id": ["q", "q"],
            "doc_id": ["a", "b"],
            "score": [1.0, 0.5],
            "rank": [1, 2],
            "run_name": ["ghrm", "ghrm"],
            "fold": [0, 0],
        }
    ).cast({"rank": pl.Int32, "fold": pl.Int32})
    assert ghrm_runs_are_complete(good).passed
    assert not ghrm_runs_are_complete(pl.concat([good, good.head(1)])).passed
    assert not ghrm_runs_are_complete(good.with_columns(score=pl.Series([1.0, float("nan")]))).passed


def test_one_thread_profiles_train_two_rotations_at_once_where_two_cores_are_free(monkeypatch):
    demo, paper = GHRMAssetConfig().to_domain(), GHRMAssetConfig(profile="paper").to_domain()
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    assert GHRMAssetConfig().training_workers(demo) == 2  # the demo trains on one thread
    assert GHRMAssetConfig().training_workers(paper) == 1  # the paper profile keeps torch's threads
    assert GHRMAssetConfig(workers=3).training_workers(paper) == 3
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0})
    assert GHRMAssetConfig().training_workers(demo) == 1
    with pytest.raises(ValueError, match="workers must be >= 1"):
        GHRMAssetConfig(workers=0).training_workers(demo)


def test_configs_map_onto_the_profiles():
    assert GHRMAssetConfig().to_domain() == PROFILES["demo"]
    assert GHRMAssetConfig(profile="paper").to_domain() == PROFILES["paper"]
    paper = GHRMAssetConfig(profile="paper", doc_words=500, query_words=5, rate=1.0).to_domain()
    assert (paper.inputs.doc_words, paper.inputs.query_words, paper.model.rate) == (500, 5, 1.0)
    with pytest.raises(ValueError, match="unknown"):
        GHRMAssetConfig(variants=["ghrm-hard"]).to_domain()
    with pytest.raises(ValueError, match="profile"):
        GHRMAssetConfig(profile="huge").to_domain()
    assert Word2VecAssetConfig(profile="paper").to_domain().dim == 300
    assert Word2VecAssetConfig(lemmatize=False).to_domain().text == TextConfig(lemmatize=False)
    overrides = GHRMAssetConfig(lemmatize=False, self_loop=1.0, schedule="linear", pairs_per_batch=8).to_domain()
    assert overrides.inputs.text == TextConfig(lemmatize=False) and overrides.inputs.self_loop == 1.0
    assert (overrides.training.schedule, overrides.training.pairs_per_batch) == ("linear", 8)
    assert GHRMSweepsAssetConfig().to_sweep() == SWEEP_PROFILES["demo"]
    assert GHRMSweepsAssetConfig(top_ks=[5], folds=[2]).to_sweep().top_k == (5,)
    with pytest.raises(ValueError, match="sweep profile"):
        GHRMSweepsAssetConfig(sweep_profile="huge").to_sweep()


def test_paper_profile_trains_as_the_authors():
    """No self-loops, stop words out and lemmas, MLP 64-32, constant Adam lr 1e-3, 32 batches of 16 queries."""
    paper = PROFILES["paper"]
    assert paper.inputs.self_loop == 0.0 and paper.inputs.text == TextConfig(remove_stopwords=True, lemmatize=True)
    assert paper.model.mlp_hidden == (64, 32) and (paper.model.blocks, paper.model.rate, paper.model.top_k) == (
        2,
        0.8,
        40,
    )
    training = paper.training
    assert (training.lr, training.schedule, training.epochs, training.batches_per_epoch, training.pairs_per_batch) == (
        1e-3,
        "constant",
        300,
        32,
        16,
    )


def test_query_and_document_words_come_from_the_collection_unless_given():
    from assets.defs.ghrm import fit_lengths

    corpus, queries, *_ = _collection()
    base = GHRMAssetConfig()
    domain, metadata = fit_lengths(base, base.to_domain(), queries, corpus.lazy())
    words = [len(tokens(t, TextConfig())) for t in queries["text"]]
    assert domain.inputs.query_words == int(np.ceil(np.percentile(words, 90)))  # not the profile's 4
    assert metadata["query_words"] == domain.inputs.query_words
    given = GHRMAssetConfig(query_words=2)
    domain, metadata = fit_lengths(given, given.to_domain(), queries, corpus.lazy())
    assert (
        domain.inputs.query_words == 2 and metadata["lengths from"].data["query_words"] == "config"
    )  # the override wins
    doc_words = [len(tokens(t, TextConfig())) for t in corpus["text"]]
    assert domain.inputs.doc_words == int(np.ceil(np.percentile(doc_words, 90)))
    kept = GHRMAssetConfig(lengths="profile")
    assert fit_lengths(kept, kept.to_domain(), queries, corpus.lazy())[0].inputs == kept.to_domain().inputs
    with pytest.raises(ValueError, match="neither 'collection' nor 'profile'"):
        bad = GHRMAssetConfig(lengths="robust04")
        fit_lengths(bad, bad.to_domain(), queries, corpus.lazy())


def test_word_vectors_come_from_minilm_by_default_and_the_manifest_says_so(tmp_path):
    corpus, *_ = _collection()
    data = DataDirResource(path=str(tmp_path))
    context = dg.build_asset_context(partition_key="wiki-car")
    manifest = word2vec(context=context, config=Word2VecAssetConfig(min_count=1), data=data, corpus=corpus.lazy()).value
    assert manifest["source"].item() == "minilm" and manifest["dim"].item() == 384
    vectors = load_vectors(manifest["path"].item())
    assert "volcano" in vectors.key_to_index and vectors.similarity("volcano", "lava") > vectors.similarity(
        "volcano", "chess"
    )
    glove = tmp_path / "mine.txt"
    glove.write_text("volcano 1 0\nlava 0.9 0.1\n", encoding="utf-8")
    loaded = word2vec(
        context=context, config=Word2VecAssetConfig(path=str(glove)), data=data, corpus=corpus.lazy()
    ).value
    assert loaded["source"].item() == str(glove) and loaded["words"].item() == 2  # a path alone: that file
    with pytest.raises(ValueError, match="source 'glove' is not one of"):
        word2vec(context=context, config=Word2VecAssetConfig(source="glove"), data=data, corpus=corpus.lazy())
