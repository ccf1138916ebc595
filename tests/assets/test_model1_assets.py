"""The Model 1 assets on a tiny collection written by the test, for its training unit (wiki-car's fixed
split, seed 0): EM tables and their check, the neural and BERT models (tiny backbone), the export, the
feature runs with lambda and p_self tuned on dev, and the fused Table 2 rows of the test queries."""

import dagster as dg
import polars as pl
import pytest

from assets.definitions import resources
from assets.defs.collections import collection
from assets.defs.model1 import model1_assets, model1_checks
from assets.defs.retrieval import retrieval_assets
from assets.defs.wiki import wiki_assets
from dagster_ir.neural.backbone import make_tiny_backbone
from dagster_ir.schemas import MODEL1_TABLE, QRELS, QUERY_SPLITS, RUN
from dagster_ir.storage.parquet import table_path, write_table

pytestmark = pytest.mark.slow

PARTITION = "wiki-car"
UNIT = "wiki-car/seed-0"
TOPICS = [
    "solar panel energy",
    "river fish species",
    "roman road building",
    "coffee brewing method",
    "volcano eruption ash",
    "chess opening theory",
    "honey bee colony",
    "glacier ice melting",
    "violin string music",
    "desert sand dune",
    "rocket engine fuel",
    "tea leaf harvest",
]
SPLITS = ["train/model"] * 6 + ["train/fusion"] * 2 + ["dev"] * 2 + ["test"] * 2


def collection_frames() -> dict[str, pl.DataFrame]:
    docs, qrels = [], []
    for i, words in enumerate(TOPICS):
        first, second, third = words.split()
        docs += [
            {"doc_id": f"d{i}a", "title": "", "text": f"the {first} {second} of a {third} and more text"},
            {"doc_id": f"d{i}b", "title": "", "text": f"{second} {third} notes about a {first}"},
            {"doc_id": f"d{i}c", "title": "", "text": f"a {first} story with nothing else"},
        ]
        qrels += [(f"q{i}", f"d{i}a", 1), (f"q{i}", f"d{i}b", 1)]
    corpus = pl.DataFrame(docs)
    queries = pl.DataFrame({"query_id": [f"q{i}" for i in range(len(TOPICS))], "text": TOPICS})
    rows = []
    for i in range(len(TOPICS)):  # every document a candidate; the query's own first
        order = [f"d{i}c", f"d{i}a", f"d{i}b"] + [d for d in corpus["doc_id"] if not d.startswith(f"d{i}")]
        rows += [(f"q{i}", d, float(100 - r), r + 1, "bm25") for r, d in enumerate(order)]
    runs = pl.DataFrame(rows, schema=RUN, orient="row")
    return {
        "corpus": corpus,
        "queries": queries,
        "qrels": pl.DataFrame(qrels, schema=QRELS, orient="row"),
        "query_splits": pl.DataFrame(
            {"query_id": queries["query_id"], "split": SPLITS, "fold": [0] * len(SPLITS)}, schema=QUERY_SPLITS
        ),
        "candidate_runs": runs,
    }


@pytest.fixture(scope="module")
def materialized(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    for name, frame in collection_frames().items():
        write_table(frame, table_path(root, [name], PARTITION), partition=PARTITION)
    tiny = str(make_tiny_backbone(tmp_path_factory.mktemp("backbone") / "tiny", hidden_size=16))
    training = {"backbone": tiny, "epochs": 1, "batch_size": 3}
    run_config = {
        "ops": {
            "model1_em": {"config": {"iterations": 2}},
            "neural_model1": {"config": training},
            "bert_model1": {"config": {**training, "max_steps": 2}},
            "bert_vanilla": {"config": {**training, "max_steps": 2}},
        }
    }
    everything = [*wiki_assets, collection, *retrieval_assets, *model1_assets, *model1_checks]
    names = ["model1_em", "neural_model1", "bert_model1", "bert_vanilla", "model1_export", "model1_runs", "fusion_runs"]
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            everything,
            selection=dg.AssetSelection.assets(*names),
            partition_key=UNIT,
            resources=resources(str(root)),
            instance=instance,
            run_config=run_config,
        )
    return root, result


def read(root, asset, partition=UNIT):
    return pl.read_parquet(table_path(root, [asset], partition)).drop("partition")


def test_em_tables_pass_their_check(materialized):
    root, result = materialized
    assert result.success
    [check] = result.get_asset_check_evaluations()
    assert check.passed and check.metadata["rows_not_summing_to_1"].value == 0
    assert check.metadata["vocabularies"].value == "wordpieces, words"
    tables = read(root, "model1_em")
    assert tables.select("vocabulary", *MODEL1_TABLE).schema == pl.Schema({"vocabulary": pl.String, **MODEL1_TABLE})
    assert tables["seed"].unique().to_list() == [0] and tables["fold"].null_count() == tables.height
    for kind in ("words", "wordpieces"):
        assert tables.filter(pl.col("vocabulary") == kind).height > 0
        assert (root / "files" / "model1" / UNIT / kind / "model1.t1.txt").is_file()
    words = tables.filter(pl.col("vocabulary") == "words")
    assert "the" not in words["src_token"].to_list()  # stop words are not in the words vocabulary


def test_neural_models_and_export(materialized):
    root, _ = materialized
    for asset in ("neural_model1", "bert_model1", "bert_vanilla"):
        manifest = read(root, asset)
        assert manifest["steps"][0] >= 1 and (root / "files" / asset / UNIT / "model").is_dir()
        assert not (root / "files" / asset / UNIT / "training").exists()  # checkpoints go once the model is saved
    exported = read(root, "model1_export")
    assert exported.select(*MODEL1_TABLE).schema == pl.Schema(MODEL1_TABLE) and exported.height > 0


def test_lambda_and_p_self_are_tuned_on_dev(materialized):
    root, result = materialized
    grid = pl.read_csv(root / "files" / "model1_runs" / UNIT / "tuning.csv")
    assert sorted(grid["vocabulary"].unique()) == ["wordpieces", "words"]
    for kind in ("words", "wordpieces"):
        rows = grid.filter(pl.col("vocabulary") == kind)
        assert rows.height == 9 and rows["chosen"].sum() == 1
        best = rows.filter(pl.col("chosen"))
        assert best["score"].item() == rows["score"].max()
        metadata = result.asset_materializations_for_node("model1_runs")[0].metadata
        assert metadata[f"{kind} lambda"].value == best["lam"].item()


def test_feature_and_fused_runs(materialized):
    root, _ = materialized
    features = read(root, "model1_runs")
    assert set(features["run_name"]) == {
        "bm25(words)",
        "bm25(wp)",
        "model1(words)",
        "model1(wp)",
        "nn-model1-exp",
        "nn-model1",
        "bert-model1",
        "bert-vanilla",
    }
    fused = read(root, "fusion_runs")
    assert set(fused["run_name"]) == {
        "bm25+bm25(words)",
        "bm25+bm25(wp)",
        "bm25+model1(words)",
        "bm25+model1(wp)",
        "bm25+nn-model1-exp",
        "bm25+nn-model1",
        "bert-model1",
        "bert-vanilla",
    }
    assert set(fused["query_id"]) == {"q10", "q11"}  # the test split only
    assert fused["seed"].unique().to_list() == [0]
    assert fused.select(pl.struct("run_name", "query_id", "doc_id").is_duplicated().sum()).item() == 0
    assert (root / "files" / "model1_runs" / UNIT / "explanations.md").read_text().count("| query token |") == 3
