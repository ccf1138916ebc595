"""End to end through the command line: a tiny local collection configured in a YAML file."""

import json
import os
import re
import subprocess
import sys

import polars as pl
import pytest

from dagster_ir.retrieval.trec import read_run
from dagster_ir.storage.catalog import Catalog

pytestmark = pytest.mark.slow

TOPICS = {
    "1": "solar panels energy",
    "2": "river fish species",
    "3": "ancient roman roads",
    "4": "coffee brewing methods",
    "5": "volcano eruption ash",
    "6": "chess opening theory",
}


def _write_collection(folder):
    docs = []
    for qid, words in TOPICS.items():
        for j in range(4):
            docs.append({"doc_id": f"d{qid}{j}", "title": "", "text": f"{words} " * (j + 1) + "common filler text"})
    docs += [{"doc_id": f"x{i}", "title": "", "text": f"unrelated words number {i} filler"} for i in range(10)]
    (folder / "docs.jsonl").write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    (folder / "topics.tsv").write_text("".join(f"{q}\t{t}\n" for q, t in TOPICS.items()))
    (folder / "qrels.txt").write_text("".join(f"{q} 0 d{q}{j} 1\n" for q in TOPICS for j in (2, 3)))
    (folder / "imported.trec").write_text("".join(f"{q} Q0 d{q}0 1 5.0 ext\n" for q in TOPICS))
    (folder / "dagster-ir.yaml").write_text(
        "collections:\n"
        "  tiny:\n"
        "    kind: local\n"
        "    corpus: docs.jsonl\n    topics: topics.tsv\n    qrels: qrels.txt\n"
        "    split: {train_fusion: 0.0, train_model: 0.5, dev: 0.0, test: 0.5, folds: 3}\n"
        "runs:\n  tiny:\n    imported: imported.trec\n"
    )


def _cli(tmp_path, *args):
    env = {
        **os.environ,
        "DAGSTER_IR_CONFIG": str(tmp_path / "dagster-ir.yaml"),
        "DAGSTER_HOME": str(tmp_path / "home"),
        "HF_HUB_OFFLINE": "1",
    }
    return subprocess.run(
        [sys.executable, "-m", "assets.cli.main", "--data", str(tmp_path / "data"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_tiny_collection_end_to_end(tmp_path):
    _write_collection(tmp_path)
    first = _cli(tmp_path, "update", "--first-stage")
    assert first.returncode == 0, first.stderr[-3000:]
    data = tmp_path / "data"
    catalog = Catalog(data)
    runs = catalog.query("select run_name, count(*) as n from candidate_runs group by 1 order by 1").rows()
    assert [name for name, _ in runs] == ["bm25", "dense", "imported", "ql"]
    bm25 = read_run(data / "files" / "runs" / "tiny" / "bm25.trec")
    assert set(bm25["query_id"]) == set(TOPICS)
    top = bm25.filter(pl.col("rank") == 1)
    assert top["doc_id"].str.slice(0, 2).to_list() == [f"d{q}" for q in sorted(TOPICS)]  # own topic wins
    # BM25 ran from impacts (a small index), kept beside the index
    assert (data / "files" / "bm25_index" / "tiny.bm25-k1=0.9-b=0.4.impacts.npz").is_file()
    per_query = catalog.query("select distinct run_name from evaluation_report order by 1").to_series().to_list()
    assert per_query == ["bm25", "dense", "imported", "ql"]
    assert (data / "files" / "reports" / "tiny" / "report.html").exists()
    negatives = catalog.query("select count(*) from negatives").item()
    assert negatives > 0

    report = _cli(tmp_path, "report", "--collection", "tiny", "--measures", "nDCG@10")
    assert report.returncode == 0, report.stderr
    assert "bm25 (baseline)" in report.stdout and "imported" in report.stdout

    again = _cli(tmp_path, "update", "--first-stage")
    assert again.returncode == 0
    done = re.search(r"^(\d+) asset partitions: (.*);", again.stdout, re.MULTILINE)
    assert done and done.group(2) == f"{done.group(1)} already up to date", again.stdout[-2000:]  # nothing redone
