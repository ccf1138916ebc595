"""CET assets called directly on a tiny collection: sparse labels, false negatives, training, reranked runs."""

import dagster as dg
import polars as pl
import pytest

from assets.defs.cet import (
    CetConfig,
    CetRunsConfig,
    FalseNegativeConfig,
    SparseQrelsConfig,
    cet,
    cet_assets,
    cet_checks,
    cet_runs,
    cet_runs_rerank_the_same_candidates,
    false_negative_analysis,
    sparse_labels_are_relevant,
    sparse_qrels,
)
from assets.defs.collections import collection_assets
from assets.defs.retrieval import retrieval_assets
from assets.defs.wiki import wiki_assets
from assets.lib.resources import DataDirResource
from dagster_ir.neural.backbone import make_tiny_backbone
from dagster_ir.schemas import FALSE_NEGATIVES, QRELS, RUN

TOPICS = {
    "1": "solar panels energy",
    "2": "river fish species",
    "3": "ancient roman roads",
    "4": "coffee brewing methods",
    "5": "volcano eruption ash",
    "6": "chess opening theory",
}
SPLITS = {"1": "train/model", "2": "train/model", "3": "train/model", "4": "dev", "5": "test", "6": "test"}


def _collection() -> dict[str, pl.DataFrame]:
    corpus = [(f"d{q}{j}", "", f"{words} " * (j + 1) + "filler") for q, words in TOPICS.items() for j in range(4)]
    corpus += [(f"x{i}", "", f"unrelated words {i}") for i in range(6)]
    runs = []
    for name, order in [("bm25", [0, 1, 2, 3]), ("dense", [3, 2, 1, 0])]:
        for q in TOPICS:
            ranked = [f"d{q}{j}" for j in order] + [f"x{i}" for i in range(4)]
            runs += [(q, d, float(10 - r), r, name) for r, d in enumerate(ranked, start=1)]
    return {
        "corpus": pl.DataFrame(
            corpus, schema={"doc_id": pl.String, "title": pl.String, "text": pl.String}, orient="row"
        ),
        "queries": pl.DataFrame({"query_id": list(TOPICS), "text": list(TOPICS.values())}),
        "qrels": pl.DataFrame([(q, f"d{q}{j}", 1) for q in TOPICS for j in range(4)], schema=QRELS, orient="row"),
        "candidate_runs": pl.DataFrame(runs, schema=RUN, orient="row"),
        "query_splits": pl.DataFrame(
            {"query_id": list(SPLITS), "split": list(SPLITS.values()), "fold": [0] * len(SPLITS)},
            schema={"query_id": pl.String, "split": pl.String, "fold": pl.Int32},
        ),
    }


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return str(make_tiny_backbone(tmp_path_factory.mktemp("backbone") / "tiny", hidden_size=16))


def _context(key: str = "wiki-car") -> dg.AssetExecutionContext:
    return dg.build_asset_context(partition_key=key)


@pytest.mark.slow
def test_the_lab_runs_from_labels_to_reranked_runs(tiny, tmp_path) -> None:
    c = _collection()
    labels = sparse_qrels(
        _context(), SparseQrelsConfig(pool_depth=2), c["candidate_runs"], c["qrels"], c["query_splits"]
    )
    assert labels.schema == pl.Schema(QRELS)
    assert sorted(labels["query_id"]) == ["1", "2", "3", "4"]  # one label each, train and dev only
    assert set(labels["doc_id"].str.slice(2, 1)) <= {"0", "1"}  # inside bm25's top 2
    assert sparse_labels_are_relevant(labels, c["qrels"]).passed

    analysis = false_negative_analysis(
        _context(), FalseNegativeConfig(depths=[2, 4]), c["candidate_runs"], c["qrels"], labels, c["query_splits"]
    )
    assert analysis.schema == pl.Schema(FALSE_NEGATIVES) and analysis.height == 4
    dense_top2 = analysis.filter((pl.col("run_name") == "dense") & (pl.col("depth") == 2))
    assert dense_top2["expected_share"].item() == 1.0  # dense's top 2 are unlabelled relevant documents

    training = CetConfig(
        backbone=tiny, layers=0, max_length=32, batch_size=2, max_steps=2, negative_depth=4, taus=[2.0]
    )
    trained = cet(
        _context("wiki-car/seed-0"),
        training,
        DataDirResource(path=str(tmp_path)),
        c["candidate_runs"],
        c["queries"],
        c["corpus"].lazy(),
        c["qrels"],
        labels,
        c["query_splits"],
    ).value
    assert trained["run_name"].to_list() == [
        "naive",
        "zhan",
        "rocketqa-q0.5",
        "rocketqa-q0.9",
        "rance",
        "dml",
        "cet",
        "cet-tau2",
        "rocketqa",
        "bm25+bert",
    ]
    sweeps = trained.filter(pl.col("sweep") != "").select("run_name", "sweep", "sweep_value", "table").rows()
    assert sweeps == [
        ("rocketqa-q0.5", "eta", 0.5, False),
        ("rocketqa-q0.9", "eta", 0.9, False),
        ("cet", "tau", 1.0, True),
        ("cet-tau2", "tau", 2.0, False),
    ]
    assert trained.filter(pl.col("selection_path").is_not_null())["run_name"].to_list() == ["cet", "cet-tau2"]
    by_name = {row["run_name"]: row for row in trained.iter_rows(named=True)}
    assert by_name["naive"]["queries"] == 3 and by_name["naive"]["steps"] == 2  # 3 queries, batches of 2
    assert '"rejected"' in by_name["rocketqa"]["notes"] and by_name["rocketqa"]["queries"] <= 3
    assert (
        by_name["naive"]["false_negative_share"] == 1.0
    )  # dense's top 4 minus the label: all relevant (every negative is false)
    assert all(by_name[n]["dev_mrr10"] is not None for n in ("naive", "dml", "cet"))
    chosen = max(
        ("rocketqa-q0.5", "rocketqa-q0.9"), key=lambda n: (by_name[n]["dev_mrr10"], -by_name[n]["sweep_value"])
    )
    assert by_name["rocketqa"]["relevance_path"] == by_name[chosen]["relevance_path"]  # eta chosen on dev
    assert by_name["bm25+bert"]["relevance_path"] == by_name["zhan"]["relevance_path"]
    assert by_name["bm25+bert"]["candidates"] == "bm25" and by_name["naive"]["candidates"] == "dense"
    unit_dir = tmp_path / "files" / "cet" / "wiki-car" / "seed-0"
    assert all((unit_dir / n / "relevance" / "model.safetensors").is_file() for n in ("naive", "dml", "cet"))
    assert not list(unit_dir.glob("*/training_state"))  # the resumable states go once every ranker is saved

    runs = cet_runs(
        _context("wiki-car/seed-0"),
        CetRunsConfig(rerank_depth=3),
        trained,
        c["candidate_runs"],
        c["queries"],
        c["corpus"].lazy(),
        c["qrels"],
        c["query_splits"],
    ).value
    assert runs.schema == pl.Schema({**RUN, "seed": pl.Int64}) and set(runs["seed"]) == {0}
    table_rows = ["naive", "zhan", "rance", "dml", "cet", "rocketqa", "bm25+bert"]  # no sweep variants
    assert runs["run_name"].unique(maintain_order=True).to_list() == table_rows
    assert set(runs["query_id"]) == {"5", "6"} and runs.height == 7 * 2 * 3
    bm25_top3 = {(q, f"d{q}{j}") for q in ("5", "6") for j in range(3)}
    assert set(runs.filter(pl.col("run_name") == "bm25+bert").select("query_id", "doc_id").iter_rows()) == bm25_top3
    assert cet_runs_rerank_the_same_candidates(runs).passed


def test_under_cv_every_query_is_labelled_and_a_unit_trains_and_scores_its_own_folds(
    tiny, tmp_path, monkeypatch
) -> None:
    import assets.defs.cet
    import assets.lib.partitions
    from dagster_ir.collections import Protocol
    from dagster_ir.collections.protocol import training_units as units_of

    units = {u.key: u for u in units_of("wiki-car", Protocol("cv", (3,)), 3)}
    monkeypatch.setattr(assets.defs.cet, "training_units", lambda: units)
    monkeypatch.setattr(assets.lib.partitions, "training_units", lambda: units)
    c = _collection()
    folds = {"1": 0, "2": 0, "3": 1, "4": 1, "5": 2, "6": 2}  # fold 0 tests, 1 validates, 2 trains
    c["query_splits"] = c["query_splits"].with_columns(
        fold=pl.col("query_id").replace_strict(folds, return_dtype=pl.Int32)
    )
    labels = sparse_qrels(
        _context(), SparseQrelsConfig(pool_depth=2), c["candidate_runs"], c["qrels"], c["query_splits"]
    )
    assert sorted(labels["query_id"]) == list("123456")  # every query trains or validates in some fold

    training = CetConfig(
        backbone=tiny,
        layers=0,
        max_length=32,
        batch_size=2,
        max_steps=1,
        negative_depth=4,
        methods=["naive"],
        taus=[],
        eta_quantiles=[],
    )
    trained = cet(
        _context("wiki-car/fold-0/seed-3"),
        training,
        DataDirResource(path=str(tmp_path)),
        c["candidate_runs"],
        c["queries"],
        c["corpus"].lazy(),
        c["qrels"],
        labels,
        c["query_splits"],
    ).value
    naive = trained.row(by_predicate=pl.col("run_name") == "naive", named=True)
    assert naive["queries"] == 2 and naive["unit"] == "wiki-car/fold-0/seed-3" and naive["seed"] == 3
    assert naive["dev_mrr10"] is not None  # chosen on fold 1, not on the test fold
    assert (tmp_path / "files" / "cet" / "wiki-car" / "fold-0" / "seed-3").is_dir()
    runs = cet_runs(
        _context("wiki-car/fold-0/seed-3"),
        CetRunsConfig(rerank_depth=3),
        trained,
        c["candidate_runs"],
        c["queries"],
        c["corpus"].lazy(),
        c["qrels"],
        c["query_splits"],
    ).value
    assert set(runs["query_id"]) == {"1", "2"} and set(runs["seed"]) == {3}  # the test fold only
    with pytest.raises(ValueError, match="not a training unit"):
        cet_runs(
            _context("wiki-car/seed-0"),
            CetRunsConfig(rerank_depth=3),
            trained,
            c["candidate_runs"],
            c["queries"],
            c["corpus"].lazy(),
            c["qrels"],
            c["query_splits"],
        )


def test_the_definitions_load_and_configs_map_onto_the_profiles() -> None:
    upstream = [*wiki_assets, *collection_assets, *retrieval_assets]  # cet's inputs come from these
    defs = dg.Definitions(
        assets=[*upstream, *cet_assets], asset_checks=cet_checks, resources={"data": DataDirResource()}
    )
    dg.Definitions.validate_loadable(defs)
    demo = CetConfig().to_domain()
    assert demo.cet.ranker.layers is not None and demo.rerank_depth == 20
    assert demo.taus == (2.0,) and demo.eta is None and len(demo.eta_quantiles) == 2 and demo.resample
    overridden = CetConfig(profile="paper", layers=0, lr=1e-5, methods=["naive", "cet"], taus=[]).to_domain()
    assert overridden.cet.ranker.layers is None and overridden.cet.train.lr == 1e-5
    assert overridden.methods == ("naive", "cet") and overridden.taus == ()
    assert overridden.cet.max_weight is None  # the paper has no clamp
    assert CetConfig(max_weight=0).to_domain().cet.max_weight is None
    assert CetConfig(max_weight=50).to_domain().cet.max_weight == 50
    assert CetConfig(eta=0.2, resample=False).to_domain().eta == 0.2
    with pytest.raises(ValueError, match="profile 'nope'"):
        CetConfig(profile="nope").to_domain()


@pytest.mark.slow
def test_a_copied_data_directory_reranks_with_its_own_cet_models_once_the_original_is_gone(
    tiny, tmp_path, monkeypatch
) -> None:
    """`cet`'s manifest names its checkpoints (`relevance_path`); the IO manager stores them under the
    data directory, so `cet_runs` in a copy loads the copy's models, with the original deleted."""
    import shutil

    import assets.defs.cet
    import assets.lib.partitions
    from assets.lib.io_managers import PolarsParquetIOManager
    from dagster_ir.collections import Protocol
    from dagster_ir.collections.protocol import training_units as units_of

    units = {u.key: u for u in units_of("wiki-car", Protocol("cv", (3,)), 3)}
    monkeypatch.setattr(assets.defs.cet, "training_units", lambda: units)
    monkeypatch.setattr(assets.lib.partitions, "training_units", lambda: units)
    c = _collection()
    folds = {"1": 0, "2": 0, "3": 1, "4": 1, "5": 2, "6": 2}
    c["query_splits"] = c["query_splits"].with_columns(
        fold=pl.col("query_id").replace_strict(folds, return_dtype=pl.Int32)
    )
    labels = sparse_qrels(
        _context(), SparseQrelsConfig(pool_depth=2), c["candidate_runs"], c["qrels"], c["query_splits"]
    )
    unit = "wiki-car/fold-0/seed-3"
    training = CetConfig(
        backbone=tiny, layers=0, max_length=32, batch_size=2, max_steps=1, negative_depth=4, methods=["naive"]
    )
    given: dict[str, list[str]] = {}

    def defs(root):
        @dg.asset(name="cet")
        def trained() -> pl.DataFrame:
            data = DataDirResource(path=str(root))
            inputs = (c["candidate_runs"], c["queries"], c["corpus"].lazy(), c["qrels"], labels, c["query_splits"])
            return cet(_context(unit), training, data, *inputs).value.drop("seed", "unit")

        @dg.asset(deps=[trained])
        def reranked(cet: pl.DataFrame) -> pl.DataFrame:
            given["relevance_path"] = cet["relevance_path"].to_list()
            inputs = (c["candidate_runs"], c["queries"], c["corpus"].lazy(), c["qrels"], c["query_splits"])
            return cet_runs(_context(unit), CetRunsConfig(rerank_depth=3), cet, *inputs).value

        return [trained, reranked], {"io_manager": PolarsParquetIOManager(data_dir=str(root))}

    original, copy = tmp_path / "original", tmp_path / "copy"
    assets_of, resources = defs(original)
    assert dg.materialize(assets_of, resources=resources).success
    stored = pl.read_parquet(original / "tables" / "cet" / "data.parquet")["relevance_path"].to_list()
    assert stored and all(p.startswith("./files/cet/") for p in stored), stored
    shutil.copytree(original, copy)
    shutil.rmtree(original)
    (copy / "tables" / "reranked" / "data.parquet").unlink()
    assets_of, resources = defs(copy)
    assert dg.materialize(assets_of, selection=["reranked"], resources=resources).success
    assert given["relevance_path"] and all(p.startswith(f"{copy}/files/cet/") for p in given["relevance_path"])
    assert set(pl.read_parquet(copy / "tables" / "reranked" / "data.parquet")["query_id"]) == {"1", "2"}
