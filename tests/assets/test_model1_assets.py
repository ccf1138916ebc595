"""The Model 1 assets on a tiny collection written by the test: EM tables and their check, the neural
and BERT models (tiny backbone), the export, the feature runs and the fused Table 2 rows."""

import dagster as dg
import polars as pl
import pytest

from assets.collections import collection
from assets.definitions import resources
from assets.model1 import model1_assets, model1_checks
from assets.retrieval import retrieval_assets
from assets.wiki import wiki_assets
from dagster_ir.neural.backbone import make_tiny_backbone
from dagster_ir.schemas import MODEL1_TABLE, NEGATIVES, QRELS, QUERY_SPLITS, RUN
from dagster_ir.storage.parquet import table_path, write_table

pytestmark = pytest.mark.slow

PARTITION = "wiki-car"
TOPICS = ["solar panel energy", "river fish species", "roman road building", "coffee brewing method",
          "volcano eruption ash", "chess opening theory", "honey bee colony", "glacier ice melting",
          "violin string music", "desert sand dune", "rocket engine fuel", "tea leaf harvest"]
SPLITS = ["train/model"] * 6 + ["train/fusion"] * 2 + ["dev"] * 2 + ["test"] * 2


def collection_frames() -> dict[str, pl.DataFrame]:
    docs, qrels = [], []
    for i, words in enumerate(TOPICS):
        first, second, third = words.split()
        docs += [{"doc_id": f"d{i}a", "title": "", "text": f"the {first} {second} of a {third} and more text"},
                 {"doc_id": f"d{i}b", "title": "", "text": f"{second} {third} notes about a {first}"},
                 {"doc_id": f"d{i}c", "title": "", "text": f"a {first} story with nothing else"}]
        qrels += [(f"q{i}", f"d{i}a", 1), (f"q{i}", f"d{i}b", 1)]
    corpus = pl.DataFrame(docs)
    queries = pl.DataFrame({"query_id": [f"q{i}" for i in range(len(TOPICS))], "text": TOPICS})
    rows = []
    for i in range(len(TOPICS)):  # every document a candidate; the query's own first
        order = [f"d{i}c", f"d{i}a", f"d{i}b"] + [d for d in corpus["doc_id"] if not d.startswith(f"d{i}")]
        rows += [(f"q{i}", d, float(100 - r), r + 1, "bm25") for r, d in enumerate(order)]
    runs = pl.DataFrame(rows, schema=RUN, orient="row")
    train = [f"q{i}" for i, s in enumerate(SPLITS) if s == "train/model"]
    negatives = pl.DataFrame([(q, f"d{q[1:]}{p}", f"d{q[1:]}c", 1, 0) for q in train for p in "ab"],
                             schema=NEGATIVES, orient="row")
    return {
        "corpus": corpus, "queries": queries, "qrels": pl.DataFrame(qrels, schema=QRELS, orient="row"),
        "query_splits": pl.DataFrame({"query_id": queries["query_id"], "split": SPLITS,
                                      "fold": [0] * len(SPLITS)}, schema=QUERY_SPLITS),
        "candidate_runs": runs, "negatives": negatives,
    }


@pytest.fixture(scope="module")
def materialized(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    for name, frame in collection_frames().items():
        write_table(frame, table_path(root, [name], PARTITION), partition=PARTITION)
    tiny = str(make_tiny_backbone(tmp_path_factory.mktemp("backbone") / "tiny", hidden_size=16))
    training = {"backbone": tiny, "epochs": 1, "batch_size": 3}
    em_config = {"ops": {"model1_em": {"config": {"iterations": 2}}}}
    models_config = {"ops": {"neural_model1": {"config": training},
                             "bert_model1": {"config": {**training, "max_steps": 2}}}}
    everything = [*wiki_assets, collection, *retrieval_assets, *model1_assets, *model1_checks]
    downstream = ["neural_model1", "bert_model1", "model1_export", "model1_runs", "fusion_runs"]
    steps = [(["model1_em"], f"{PARTITION}|words", em_config), (["model1_em"], f"{PARTITION}|wordpieces", em_config),
             (downstream, PARTITION, models_config)]
    results = {}
    with dg.instance_for_test() as instance:
        for names, key, run_config in steps:
            results[key] = dg.materialize(everything, selection=dg.AssetSelection.assets(*names), partition_key=key,
                                          resources=resources(str(root)), instance=instance, run_config=run_config)
    return root, results


def read(root, asset, partition=PARTITION):
    return pl.read_parquet(table_path(root, [asset], partition)).drop("partition")


def test_em_tables_pass_their_check(materialized):
    root, results = materialized
    for kind in ("words", "wordpieces"):
        result = results[f"{PARTITION}|{kind}"]
        assert result.success
        [check] = result.get_asset_check_evaluations()
        assert check.passed and check.metadata["rows_not_summing_to_1"].value == 0
        table = read(root, "model1_em", f"{PARTITION}|{kind}")
        assert table.schema == pl.Schema(MODEL1_TABLE) and table.height > 0
        assert (root / "files" / "model1" / PARTITION / kind / "model1.t1.txt").is_file()
    words = read(root, "model1_em", f"{PARTITION}|words")
    assert "the" not in words["src_token"].to_list()  # stop words are not in the words vocabulary


def test_neural_models_and_export(materialized):
    root, results = materialized
    assert results[PARTITION].success
    for asset in ("neural_model1", "bert_model1"):
        manifest = read(root, asset)
        assert manifest["steps"][0] >= 1 and (root / "files" / asset / PARTITION / "model").is_dir()
    exported = read(root, "model1_export")
    assert exported.schema == pl.Schema(MODEL1_TABLE) and exported.height > 0


def test_feature_and_fused_runs(materialized):
    root, _ = materialized
    features = read(root, "model1_runs")
    assert set(features["run_name"]) == {"bm25(wp)", "model1(words)", "model1(wp)", "nn-model1-exp", "nn-model1",
                                         "bert-model1"}
    fused = read(root, "fusion_runs")
    assert set(fused["run_name"]) == {"bm25+bm25(wp)", "bm25+model1(words)", "bm25+model1(wp)",
                                      "bm25+nn-model1-exp", "bm25+nn-model1", "bert-model1"}
    assert set(fused["query_id"]) == {"q10", "q11"}  # the test split only
    assert fused.select(pl.struct("run_name", "query_id", "doc_id").is_duplicated().sum()).item() == 0
    assert (root / "files" / "model1_runs" / PARTITION / "explanations.md").read_text().count("| query token |") == 3
