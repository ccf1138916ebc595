"""The Model 1 assets under `protocol: cv` (3 folds): each unit trains on its training fold only and
scores its test fold, so the units' fused runs together hold every query exactly once.

The partitions come from the collections YAML when `assets` is imported, so the pipeline runs in a
subprocess with its own DAGSTER_IR_CONFIG."""

import json
import os
import subprocess
import sys
import textwrap

import polars as pl
import pytest

from dagster_ir.storage.parquet import table_path

pytestmark = pytest.mark.slow

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
FOLDS = 3

SCRIPT = textwrap.dedent("""
    import json, sys
    import dagster as dg
    import polars as pl
    from assets.defs.collections import collection
    from assets.definitions import resources
    from assets.defs.model1 import model1_assets, model1_checks
    from assets.defs.retrieval import retrieval_assets
    from assets.defs.wiki import wiki_assets
    from dagster_ir.neural.backbone import make_tiny_backbone

    root = sys.argv[1]
    tiny = str(make_tiny_backbone(root + "/tiny", hidden_size=16))
    training = {"backbone": tiny, "epochs": 1, "batch_size": 3}
    run_config = {"ops": {"model1_em": {"config": {"iterations": 2}}, "neural_model1": {"config": training},
                          "bert_model1": {"config": {**training, "max_steps": 1}},
                          "bert_vanilla": {"config": {**training, "max_steps": 1}}}}
    everything = [*wiki_assets, collection, *retrieval_assets, *model1_assets, *model1_checks]
    names = [a.key.to_user_string() for a in model1_assets]
    with dg.instance_for_test() as instance:
        for fold in range(int(sys.argv[2])):
            result = dg.materialize(everything, selection=dg.AssetSelection.assets(*names),
                                    partition_key=f"tiny/fold-{fold}/seed-0", resources=resources(root),
                                    instance=instance, run_config=run_config)
            assert result.success
""")


def _write(tmp_path):
    docs, qrels, runs = [], [], []
    for i, words in enumerate(TOPICS):
        a, b, c = words.split()
        docs += [
            {"doc_id": f"d{i}a", "title": "", "text": f"{a} {b} of a {c} and more"},
            {"doc_id": f"d{i}b", "title": "", "text": f"{b} {c} notes about a {a}"},
            {"doc_id": f"d{i}c", "title": "", "text": f"a {a} story with nothing else"},
        ]
        qrels += [(f"q{i}", f"d{i}a", 1), (f"q{i}", f"d{i}b", 1)]
    corpus = pl.DataFrame(docs)
    for i in range(len(TOPICS)):
        order = [f"d{i}c", f"d{i}a", f"d{i}b"] + [d for d in corpus["doc_id"] if not d.startswith(f"d{i}")]
        runs += [(f"q{i}", d, float(100 - r), r + 1, "bm25") for r, d in enumerate(order)]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (tmp_path / "topics.tsv").write_text("".join(f"q{i}\t{t}\n" for i, t in enumerate(TOPICS)))
    (tmp_path / "qrels.txt").write_text("".join(f"{q} 0 {d} {r}\n" for q, d, r in qrels))
    (tmp_path / "dagster-ir.yaml").write_text(
        "collections:\n  tiny:\n    kind: local\n    corpus: docs.jsonl\n    topics: topics.tsv\n"
        f"    qrels: qrels.txt\n    protocol: cv\n    split: {{folds: {FOLDS}}}\n"
    )
    folds = {f"q{i}": i % FOLDS for i in range(len(TOPICS))}
    frames = {
        "corpus": corpus,
        "queries": pl.DataFrame({"query_id": list(folds), "text": TOPICS}),
        "qrels": pl.DataFrame(
            qrels, schema={"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32}, orient="row"
        ),
        "query_splits": pl.DataFrame(
            {"query_id": list(folds), "split": ["train/model"] * len(folds), "fold": list(folds.values())},
            schema={"query_id": pl.String, "split": pl.String, "fold": pl.Int32},
        ),
        "candidate_runs": pl.DataFrame(
            runs,
            schema={
                "query_id": pl.String,
                "doc_id": pl.String,
                "score": pl.Float64,
                "rank": pl.Int32,
                "run_name": pl.String,
            },
            orient="row",
        ),
    }
    from dagster_ir.storage.parquet import write_table

    for name, frame in frames.items():
        write_table(frame, table_path(tmp_path / "data", [name], "tiny"), partition="tiny")
    return folds


def test_every_query_is_scored_once_by_the_unit_whose_test_fold_holds_it(tmp_path):
    folds = _write(tmp_path)
    env = {
        **os.environ,
        "DAGSTER_IR_CONFIG": str(tmp_path / "dagster-ir.yaml"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "data"), str(FOLDS)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    fused = []
    for fold in range(FOLDS):
        unit = f"tiny/fold-{fold}/seed-0"
        run = pl.read_parquet(table_path(tmp_path / "data", ["fusion_runs"], unit))
        assert {folds[q] for q in run["query_id"]} == {fold} and run["fold"].unique().to_list() == [fold]
        fused.append(run)
        # EM learned from the training fold only: no word of a test or validation topic is a source token
        words = pl.read_parquet(table_path(tmp_path / "data", ["model1_em"], unit)).filter(
            pl.col("vocabulary") == "words"
        )
        held_out = {w for i, t in enumerate(TOPICS) if folds[f"q{i}"] != (fold + 2) % FOLDS for w in t.split()}
        assert words.height > 0 and not held_out & set(words["src_token"])
    merged = pl.concat(fused)
    for name in ("bm25+model1(words)", "bm25+bm25(wp)", "bert-vanilla"):
        answered = merged.filter(pl.col("run_name") == name).select("query_id", "fold").unique()
        assert sorted(answered["query_id"]) == sorted(folds) and answered.height == len(folds)
