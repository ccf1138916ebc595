"""`update` and `status` against a real data directory: failures, removed dumps, staleness, concurrency.

Each test runs its steps in a subprocess (the collections YAML is read once, when the definitions
are imported), which prints a JSON summary as its last line.
"""

import bz2
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dagster_ir.storage.dumps import sample_dump_path

pytestmark = pytest.mark.slow
HERE = Path(__file__).parent

PRELUDE = """
import json, os, sys
from pathlib import Path
import dagster as dg
from assets.definitions import defs, resources
from assets.lib.staleness import stale_partitions
from assets.cli.updates import update_all

root = Path(os.environ["DAGSTER_IR_DATA"])
instance = dg.DagsterInstance.get()

def keys(pairs):
    return sorted(k.to_user_string() + (f"[{p}]" if p else "") for k, p in pairs)

def update(*groups):
    report = update_all(defs, instance, resources=resources(str(root)), log=lambda line: print(line, flush=True),
                        selection=dg.AssetSelection.groups(*groups))
    return {"ran": sorted(f"{k}[{p}]" if p else k for p, ks in report.runs for k in ks),
            "failed": [(p, ks, m) for p, ks, m in report.failures], "skipped": keys(report.skipped)}

def stale(*groups):
    return keys(stale_partitions(defs, instance, dg.AssetSelection.groups(*groups), resources=resources(str(root))))
"""


def _run(tmp_path: Path, script: str, config: str, *, timeout: int = 900) -> dict:
    (tmp_path / "dagster-ir.yaml").write_text(config)
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {
        **os.environ,
        "DAGSTER_IR_CONFIG": str(tmp_path / "dagster-ir.yaml"),
        "DAGSTER_HOME": str(home),
        "DAGSTER_IR_DATA": str(tmp_path / "data"),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([str(Path.cwd()), str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(script)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _local_collection(folder: Path, name: str, words: list[str]) -> str:
    """A tiny local collection's files and its YAML entry."""
    docs = [f"{name}{i}\t" + f"{w} " * 3 + f"filler {i}" for i, w in enumerate(words)]
    (folder / f"{name}.tsv").write_text("\n".join(docs) + "\n")
    (folder / f"{name}-topics.tsv").write_text("".join(f"{i}\t{w}\n" for i, w in enumerate(words)))
    (folder / f"{name}-qrels.txt").write_text("".join(f"{i} 0 {name}{i} 1\n" for i in range(len(words))))
    return (
        f"  {name}:\n    kind: local\n    corpus: {name}.tsv\n    topics: {name}-topics.tsv\n"
        f"    qrels: {name}-qrels.txt\n    split: {{train_fusion: 0.0, train_model: 0.5, dev: 0.0, test: 0.5, seed: 1}}\n"
    )


WORDS = ["solar", "river", "roman", "coffee", "volcano", "chess", "piano", "glacier"]

BAD_DUMP = """<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/">
  <page><title>Broken</title><ns>zero</ns><id>900001</id><revision><id>1</id><text>x</text></revision></page>
</mediawiki>
"""


def test_a_failing_dump_blocks_only_what_reads_it_and_remove_dump_unblocks(tmp_path):
    (tmp_path / "bad.xml.bz2").write_bytes(bz2.compress(BAD_DUMP.encode()))  # passes add-dump's look
    copy = tmp_path / "sample-copy.xml.bz2"
    copy.write_bytes(sample_dump_path().read_bytes())  # the same articles again, under another name
    config = "collections:\n  wiki-car:\n    kind: wiki-car\n" + _local_collection(tmp_path, "tiny", WORDS)
    result = _run(
        tmp_path,
        f"""
        from assets.cli.commands import add_dump, remove_dump
        from dagster_ir.storage.atomic import host_tag
        from dagster_ir.storage.catalog import Catalog
        out = {{}}
        sample = add_dump(root, {str(sample_dump_path())!r}, instance)
        bad = add_dump(root, {str(tmp_path / "bad.xml.bz2")!r}, instance)
        out["first"] = update("wikipedia", "collections")
        out["tiny_corpus"] = (root / "tables" / "corpus" / "tiny" / "data.parquet").exists()
        out["wiki_car_corpus"] = (root / "tables" / "corpus" / "wiki-car" / "data.parquet").exists()
        remove_dump(root, bad, instance)
        out["second"] = update("wikipedia", "collections")
        count = "select count(*) from corpus where partition = 'wiki-car'"
        out["docs"] = Catalog(root).query(count).item()
        copy = add_dump(root, {str(copy)!r}, instance)
        out["with_copy"] = update("wikipedia", "collections")
        out["docs_with_copy"] = Catalog(root).query(count).item()
        out["superseded"] = Catalog(root).query(
            "select count(*) from materializations where asset_key = 'wiki_links'").item()
        remove_dump(root, copy, instance)
        out["stale_after_removal"] = stale("wikipedia", "collections")
        out["third"] = update("wikipedia", "collections")
        print(json.dumps(out))
    """,
        config,
    )
    first = result["first"]
    assert [(p, keys) for p, keys, _ in first["failed"]] == [
        ("bad.xml.bz2", ["wiki_articles", "wiki_raw_links", "wiki_redirects"])
    ]
    message = first["failed"][0][2]
    assert "bad.xml.bz2" in message and "<ns> is not an integer" in message and "\n" not in message
    assert result["tiny_corpus"], "a collection that does not read Wikipedia is not blocked"
    assert not result["wiki_car_corpus"]
    assert {"corpus[wiki-car]", "wiki_links", "wiki_link_graph", "php_groups", "wiki_stats"} <= set(first["skipped"])
    assert not result["second"]["failed"] and "corpus[wiki-car]" in result["second"]["ran"]
    assert not result["with_copy"]["failed"]
    assert result["docs_with_copy"] == result["docs"] > 0  # the copy's articles are not added twice
    assert set(result["stale_after_removal"]) >= {"wiki_links", "wiki_stats", "corpus[wiki-car]"}
    assert "corpus[tiny]" not in result["stale_after_removal"]
    assert {"wiki_links", "corpus[wiki-car]"} <= set(result["third"]["ran"])


def test_changes_outside_the_code_make_exactly_their_readers_stale(tmp_path):
    (tmp_path / "ext.trec").write_text("".join(f"{i} Q0 one{i} 1 2.0 ext\n" for i in range(len(WORDS))))
    config = (
        "collections:\n"
        + _local_collection(tmp_path, "one", WORDS)
        + _local_collection(tmp_path, "two", WORDS)
        + "runs:\n  one:\n    ext: ext.trec\n"
    )
    result = _run(
        tmp_path,
        """
        out = {}
        groups = ("collections", "retrieval")
        out["first"] = update(*groups)
        out["fresh"] = stale(*groups)
        (root / "tables" / "candidate_runs" / "two" / "data.parquet").unlink()
        out["deleted"] = stale(*groups)
        Path("ext.trec").write_text("".join(f"{i} Q0 one{(i + 1) % 8} 1 3.0 ext\\n" for i in range(8)))
        out["run_file"] = stale(*groups)
        config = Path("dagster-ir.yaml").read_text()
        at = config.rindex("seed: 1}")  # collection two's split seed
        Path("dagster-ir.yaml").write_text(config[:at] + "seed: 2}" + config[at + len("seed: 1}"):])
        out["yaml"] = stale(*groups)
        out["second"] = update(*groups)
        out["after"] = stale(*groups)
        print(json.dumps(out))
    """,
        config,
    )
    assert not result["first"]["failed"] and result["fresh"] == []
    assert result["deleted"] == ["candidate_runs[two]", "negatives[two]"]  # the readers wait on it
    assert result["run_file"] == ["candidate_runs[one]", "candidate_runs[two]", "negatives[one]", "negatives[two]"]
    assert result["yaml"] == [
        "bm25_index[two]",
        "candidate_runs[one]",
        "candidate_runs[two]",
        "corpus[two]",
        "dense_embeddings[two]",
        "negatives[one]",
        "negatives[two]",
        "qrels[two]",
        "queries[two]",
        "query_splits[two]",
    ]
    assert result["after"] == [] and not result["second"]["failed"]
    assert "candidate_runs[two]" in result["second"]["ran"] and "corpus[one]" not in result["second"]["ran"]


def test_a_misspelt_top_level_key_is_an_error(tmp_path):
    (tmp_path / "dagster-ir.yaml").write_text("collections:\n  wiki-car:\n    kind: wiki-car\nrun:\n  wiki-car: {}\n")
    env = {**os.environ, "DAGSTER_IR_CONFIG": str(tmp_path / "dagster-ir.yaml"), "DAGSTER_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "assets.cli.main", "--data", str(tmp_path / "data"), "status"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 1
    assert "run: unknown top-level key (allowed: collections, runs, executor, schedules)" in done.stderr
    assert "Traceback" not in done.stderr


COUNTED = """
import sys, time
from pathlib import Path
import os
from concurrent_defs import counting_defs
from assets.cli.instance import open_instance
from assets.cli.updates import update_all
defs, resources = counting_defs(sys.argv[1])
report = update_all(defs, open_instance(os.environ["DAGSTER_HOME"]), resources=resources, log=lambda line: print(line, flush=True))
print(len(report.runs), len(report.done_elsewhere), report.ok)
"""


def test_two_updates_at_once_do_the_work_once(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "PYTHONPATH": os.pathsep.join([str(Path.cwd()), str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    data = tmp_path / "data"
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", COUNTED, str(data)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=900) for p in processes]
    for process, (out, err) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, out + err[-3000:]
    summaries = [out.strip().splitlines()[-1].split() for out, _ in outputs]
    assert [ok for _, _, ok in summaries] == ["True", "True"]
    assert sum(int(ran) for ran, _, _ in summaries) == 2  # each asset materialized by one process...
    assert sum(int(found) for _, found, _ in summaries) == 2  # ...and found done by the other
    assert (data / "counted.txt").read_text().splitlines() == ["counted", "derived"]  # computed once each


def test_a_changed_imported_run_file_reaches_the_report(tmp_path):
    """Dagster records a partitioned observable source's version in its readers as the hash of no
    materialization; the reader's own content version must carry the change downstream."""
    (tmp_path / "ext.trec").write_text("".join(f"{i} Q0 one{(i + 1) % 8} 1 2.0 ext\n" for i in range(len(WORDS))))
    config = "collections:\n" + _local_collection(tmp_path, "one", WORDS) + "runs:\n  one:\n    ext: ext.trec\n"
    result = _run(
        tmp_path,
        """
        from dagster_ir.storage.catalog import Catalog
        def ndcg():
            return Catalog(root).query("select avg(value) from evaluation_report where run_name = 'ext' "
                                       "and measure = 'nDCG@10' and partition = 'one'").item()
        out = {}
        groups = ("collections", "retrieval", "evaluation")
        out["first"] = update(*groups)
        out["before"] = ndcg()
        Path("ext.trec").write_text("".join(f"{i} Q0 one{i} 1 3.0 ext\\n" for i in range(8)))  # a perfect run
        out["run_file"] = stale(*groups)
        out["second"] = update(*groups)
        out["after"] = ndcg()
        out["fresh"] = stale(*groups)
        print(json.dumps(out))
    """,
        config,
    )
    assert not result["first"]["failed"] and not result["second"]["failed"]
    assert result["before"] == 0.0
    assert {"candidate_runs[one]", "negatives[one]", "evaluation_report[one]"} <= set(result["run_file"])
    assert {"candidate_runs[one]", "negatives[one]", "evaluation_report[one]"} <= set(result["second"]["ran"])
    assert result["after"] == 1.0 and result["fresh"] == []


def test_a_moved_or_copied_data_directory_rebuilds_from_its_own_files(tmp_path):
    config = "collections:\n" + _local_collection(tmp_path, "one", WORDS)
    result = _run(
        tmp_path,
        """
        import shutil
        import polars as pl
        from dagster_ir.storage.catalog import Catalog

        def update_at(where, *groups):
            report = update_all(defs, instance, resources=resources(str(where)), log=lambda line: print(line, flush=True),
                                selection=dg.AssetSelection.groups(*groups))
            return {"ran": sorted(f"{k}[{p}]" for p, ks in report.runs for k in ks),
                    "failed": [m for _, _, m in report.failures]}

        out = {"first": update_at(root, "collections", "retrieval")}
        out["stored"] = [pl.read_parquet(root / "tables" / name / "one" / "data.parquet")["path"][0]
                         for name in ("bm25_index", "dense_embeddings")]
        out["catalog"] = Catalog(root).query("select distinct path from materializations where asset_key = "
                                             "'bm25_index'").to_series().to_list()
        moved = root.with_name("moved")
        shutil.move(root, moved)
        (moved / "tables" / "candidate_runs" / "one" / "data.parquet").unlink()
        out["moved"] = update_at(moved, "retrieval")
        copy = root.with_name("copy")
        shutil.copytree(moved, copy)
        shutil.rmtree(moved / "files")  # the original's index and embeddings are gone: the copy must not need them
        (copy / "tables" / "candidate_runs" / "one" / "data.parquet").unlink()
        out["copied"] = update_at(copy, "retrieval")
        out["runs"] = pl.read_parquet(copy / "tables" / "candidate_runs" / "one" / "data.parquet")["run_name"].unique().sort().to_list()
        print(json.dumps(out))
    """,
        config,
    )
    assert not result["first"]["failed"]
    assert result["stored"] == ["files/bm25_index/one", "files/dense/one.npy"]
    assert result["catalog"] == ["tables/bm25_index/one/data.parquet"]
    assert result["moved"]["failed"] == [] and "candidate_runs[one]" in result["moved"]["ran"]
    assert result["copied"]["failed"] == [] and "candidate_runs[one]" in result["copied"]["ran"]
    assert result["runs"] == ["bm25", "dense", "ql"]
