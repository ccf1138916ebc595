"""Every method asset under the `paper` profile, through the real code path, on a CPU budget.

The run carries the run-wide profile tag (`--profile paper`), so each asset resolves its settings as
a real run does; the paper backbone `bert-base-uncased` is loaded by name from a Hugging Face cache
that holds a tiny BERT under that name (offline); the overrides cut only the budget (steps, batch
sizes, EM iterations, word-vector size), so the paper-only branches run: loading by name, the
paper's sequence lengths and reranking depths, CET's sweeps and dev selection, Model 1's spooled EM
with the null word, GHRM's paper text settings and sweeps, the ten baselines at the papers' sizes.
"""

import shutil

import dagster as dg
import polars as pl
import pytest

from assets.definitions import resources
from assets.lib.resources import DataDirResource
from assets.lib.settings import PROFILE_TAG
from dagster_ir.neural.backbone import PAPER_BACKBONE, make_tiny_backbone

pytestmark = pytest.mark.slow
PAPER = {PROFILE_TAG: "paper"}
REVISION = "0" * 40


@pytest.fixture(scope="module", autouse=True)
def paper_backbone(tmp_path_factory):
    """A tiny BERT served offline as `bert-base-uncased` (the paper profiles' backbone, loaded by name)."""
    import huggingface_hub.constants as hub

    root = tmp_path_factory.mktemp("hub")
    tiny = make_tiny_backbone(root / "tiny", hidden_size=16)
    repo = root / "cache" / f"models--{PAPER_BACKBONE}"
    shutil.copytree(tiny, repo / "snapshots" / REVISION)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hub, "HF_HUB_CACHE", str(root / "cache"))
        patch.setenv("HF_HUB_OFFLINE", "1")
        yield


def _context(partition: str) -> dg.AssetExecutionContext:
    return dg.build_asset_context(partition_key=partition, run_tags=PAPER)


def test_the_fake_cache_serves_the_paper_backbone_by_name():
    from dagster_ir.neural.backbone import load_encoder

    assert load_encoder(PAPER_BACKBONE).config.hidden_size == 16  # the tiny model, not a download


def test_php_pretraining_fine_tuning_and_reranking(tmp_path):
    from test_php_assets import TOPICS, _upstream_assets, _upstream_tables

    from assets.defs.php import php_assets

    root = tmp_path / "data"
    _upstream_tables(root)
    budget = {"n_negatives": 2, "batch_size": 2, "max_steps": 2}  # paper: 24 negatives, batches of 24
    run_config = {
        "ops": {
            name: {"config": budget}
            for name in ("php_examples", "php_hp", "php_shp", "php_mrds", "php_baseline_examples", "php_baselines")
        }
    }
    tuning = {"ops": {"cross_encoder": {"config": {"batch_size": 2, "max_steps": 2, "epochs": 2}}}}
    everything = _upstream_assets() + php_assets
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("wiki_dump", ["dump"])
        pretrained = dg.materialize(
            everything,
            selection=[
                "php_examples",
                "php_hp",
                "php_shp",
                "php_mrds",
                "php_ablations",
                "php_baseline_examples",
                "php_baselines",
            ],
            resources=resources(str(root)),
            instance=instance,
            run_config=run_config,
            tags=PAPER,
        )
        assert pretrained.success
        hp = pretrained.asset_materializations_for_node("php_hp")[0].metadata
        assert hp["steps"].value == 2 and hp["device"].value == "cpu" and hp["precision"].value in ("bf16", "fp32")
        tuned = dg.materialize(
            everything,
            selection=["cross_encoder", "reranked_runs"],
            partition_key="wiki-car/seed-0",
            resources=resources(str(root)),
            instance=instance,
            run_config=tuning,
            tags=PAPER,
        )
        assert tuned.success
        rerank_metadata = tuned.asset_materializations_for_node("reranked_runs")[0].metadata
    manifest = tuned.asset_value("cross_encoder")
    assert manifest["run_name"].to_list() == ["bert", "php", "ict", "harp"]
    assert manifest["init"][0] == PAPER_BACKBONE  # the bert row starts from the paper backbone, by name
    assert manifest["dev_score"].is_not_null().all()  # selected on dev (depth 100)
    assert rerank_metadata["depth"].value == 100  # the paper's depth
    reranked = tuned.asset_value("reranked_runs")
    lengths = reranked.group_by("run_name").len()
    pure = {"bert", "php", "ict", "harp", "bi-encoder"}  # and each interpolated with BM25
    assert set(reranked["query_id"]) == {"g/q"} and set(lengths["run_name"]) == pure | {f"{n}+bm25" for n in pure}
    assert (lengths["len"] == len(TOPICS)).all()


def test_cet_lab_and_runs(tmp_path):
    from test_cet_assets import _collection

    from assets.defs.cet import CetConfig, CetRunsConfig, SparseQrelsConfig, cet, cet_runs, sparse_qrels

    c = _collection()
    labels = sparse_qrels(
        _context("wiki-car"), SparseQrelsConfig(pool_depth=2), c["candidate_runs"], c["qrels"], c["query_splits"]
    )
    trained = cet(
        _context("wiki-car/seed-0"),
        CetConfig(batch_size=2, max_steps=1),
        DataDirResource(path=str(tmp_path)),
        c["candidate_runs"],
        c["queries"],
        c["corpus"].lazy(),
        c["qrels"],
        labels,
        c["query_splits"],
    ).value
    sweeps = trained.filter(pl.col("sweep") != "")
    assert sorted(set(sweeps.filter(pl.col("sweep") == "eta")["sweep_value"])) == [0.5, 0.7, 0.8, 0.9, 0.95, 0.99]
    assert sorted(set(sweeps.filter(pl.col("sweep") == "tau")["sweep_value"])) == [0.25, 0.5, 1.0, 2.0, 4.0]
    assert trained.filter(pl.col("dev_mrr10").is_null() & (pl.col("run_name") != "bm25+bert")).height == 0
    runs = cet_runs(
        _context("wiki-car/seed-0"),
        CetRunsConfig(),
        trained,
        c["candidate_runs"],
        c["queries"],
        c["corpus"].lazy(),
        c["qrels"],
        c["query_splits"],
    ).value
    per_query = runs.filter(pl.col("run_name") == "cet").group_by("query_id").len()["len"].to_list()
    assert per_query == [8, 8]  # every candidate reranked (the paper's depth 1000 > 8)


def test_model1_methods(tmp_path):
    from test_model1_assets import PARTITION, UNIT, collection_frames

    from assets.defs.collections import collection
    from assets.defs.model1 import model1_assets, model1_checks
    from assets.defs.retrieval import retrieval_assets
    from assets.defs.wiki import wiki_assets
    from dagster_ir.storage.parquet import table_path, write_table

    for name, frame in collection_frames().items():
        write_table(frame, table_path(tmp_path, [name], PARTITION), partition=PARTITION)
    training = {"epochs": 1, "batch_size": 3, "max_steps": 2}
    run_config = {
        "ops": {
            "model1_em": {"config": {"iterations": 2}},
            "neural_model1": {"config": training},
            "bert_model1": {"config": training},
            "bert_vanilla": {"config": training},
            "fusion_runs": {"config": {"restarts": 1}},
        }
    }
    names = ["model1_em", "neural_model1", "bert_model1", "bert_vanilla", "model1_export", "model1_runs", "fusion_runs"]
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [*wiki_assets, collection, *retrieval_assets, *model1_assets, *model1_checks],
            selection=dg.AssetSelection.assets(*names),
            partition_key=UNIT,
            resources=resources(str(tmp_path)),
            instance=instance,
            run_config=run_config,
            tags=PAPER,
        )
    assert result.success
    assert result.asset_value("bert_model1")["backbone"].item() == PAPER_BACKBONE
    em = result.asset_materializations_for_node("model1_em")[0].metadata
    assert em["wordpieces config"].value["em"]["null_word"] is True  # the paper's EM
    assert result.asset_value("fusion_runs").height > 0


def test_ghrm_word2vec_runs_and_sweeps(tmp_path):
    from test_ghrm_assets import _collection

    from assets.defs.ghrm import (
        GHRMAssetConfig,
        GHRMSweepsAssetConfig,
        Word2VecAssetConfig,
        ghrm_runs,
        ghrm_sweeps,
        word2vec,
    )

    corpus, queries, qrels, splits, run = _collection()
    data = DataDirResource(path=str(tmp_path))
    vectors = word2vec(
        context=_context("wiki-car"),
        config=Word2VecAssetConfig(dim=8, epochs=1, min_count=1),
        data=data,
        corpus=corpus.lazy(),
    ).value
    assert vectors["lemmatize"].item() is True  # the paper's text settings
    budget = {"min_count": 1, "epochs": 1, "batches_per_epoch": 1, "pairs_per_batch": 2}
    runs = ghrm_runs(
        context=_context("wiki-car"),
        config=GHRMAssetConfig(folds=[0], **budget),
        data=data,
        corpus=corpus.lazy(),
        queries=queries,
        qrels=qrels,
        query_splits=splits,
        candidate_runs=run,
        word2vec=vectors,
    ).value
    assert runs.group_by("run_name", "query_id").len()["len"].unique().to_list() == [8]  # every candidate (depth 100)
    fixed = splits.with_columns(
        split=pl.col("fold").replace_strict(
            {0: "train/model", 1: "train/model", 2: "train/model", 3: "dev", 4: "test"}, return_dtype=pl.String
        )
    )
    sweeps = ghrm_sweeps(
        context=_context("wiki-car/seed-0"),
        config=GHRMSweepsAssetConfig(**budget),
        data=data,
        corpus=corpus.lazy(),
        queries=queries,
        qrels=qrels,
        query_splits=fixed,
        candidate_runs=run,
        word2vec=vectors,
    ).value
    from dagster_ir.methods.ghrm.sweeps import PROFILES as SWEEPS

    grid = {("rate", v) for v in SWEEPS["paper"].rate} | {("blocks", float(v)) for v in SWEEPS["paper"].blocks}
    assert grid <= set(sweeps.select("parameter", "value").iter_rows())  # the paper's grid


def test_neural_baselines_all_ten(tmp_path):
    from test_baselines_assets import _collection

    from assets.defs.baselines import NeuralBaselinesConfig, neural_baselines
    from assets.defs.ghrm import Word2VecAssetConfig, word2vec
    from dagster_ir.methods.baselines import MODELS

    corpus, queries, qrels, splits, run, negatives = _collection()
    data = DataDirResource(path=str(tmp_path))
    vectors = word2vec(
        context=dg.build_asset_context(partition_key="wiki-car"),
        config=Word2VecAssetConfig(dim=8, epochs=1, min_count=1),
        data=data,
        corpus=corpus.lazy(),
    ).value
    config = NeuralBaselinesConfig(
        models=list(MODELS),
        epochs=1,
        steps_per_epoch=1,
        batch_size=2,
        backbone=PAPER_BACKBONE,
        threads=1,
        lengths="profile",
    )  # DUET's paper pool needs 100+ words
    runs = neural_baselines(
        context=_context("wiki-car/seed-0"),
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
    assert sorted(runs["run_name"].unique()) == sorted([*MODELS, *(f"{m}+bm25" for m in MODELS)])
    assert runs.group_by("run_name", "query_id").len()["len"].unique().to_list() == [8]  # depth 100: every candidate
