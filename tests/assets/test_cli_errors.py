"""`dagster-ir update` on bad inputs: one stderr line per failed partition, naming the file and line.

Each test runs the command line in a subprocess, against a fresh data directory and instance, and
counts the lines it writes to stderr.
"""

import bz2
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dagster_ir.storage.dumps import sample_dump_path

pytestmark = pytest.mark.slow


def _cli(tmp_path: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {
        **os.environ,
        "DAGSTER_IR_CONFIG": str(tmp_path / "dagster-ir.yaml"),
        "DAGSTER_HOME": str(home),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([str(Path.cwd()), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-m", "assets.cli.main", "--data", str(tmp_path / "data"), *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _collection(folder: Path, name: str, docs: list[str], qrels: list[str], extra: str = "") -> str:
    (folder / f"{name}.tsv").write_text("".join(f"{d}\tsome words about {d}\n" for d in docs))
    (folder / f"{name}-topics.tsv").write_text("1\twords\n2\tabout\n")
    (folder / f"{name}-qrels.txt").write_text("".join(line + "\n" for line in qrels))
    return (
        f"  {name}:\n    kind: local\n    corpus: {name}.tsv\n    topics: {name}-topics.tsv\n"
        f"    qrels: {name}-qrels.txt\n{extra}"
    )


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_each_failed_partition_is_one_line_and_verbose_adds_the_traces(tmp_path):
    config = "collections:\n" + _collection(tmp_path, "dup", ["d1", "d2", "d1"], ["1 0 d1 1", "2 0 d2 1"])
    config += _collection(tmp_path, "unknown", ["d1", "d2", "d3"], ["1 0 d1 1", "2 0 d2 1", "41 0 d3 1", "2 0 d9 1"])
    (tmp_path / "dagster-ir.yaml").write_text(config)
    done = _cli(tmp_path, "update", "--first-stage")
    assert done.returncode == 1
    errors = _lines(done.stderr)
    assert len(errors) == 3, done.stderr  # the header, then one line per failed partition
    assert errors[0].startswith("2 runs FAILED")
    assert errors[1].endswith(
        f"[dup]: collection: {tmp_path / 'dup.tsv'}:3: duplicate document id 'd1'; first at line 1"
    )
    assert errors[2].endswith(
        f"[unknown]: collection: {tmp_path / 'unknown-qrels.txt'}:3: qrels names unknown query id "
        "'41', not in the topics (2 rows name unknown ids); `on_unknown: drop` under "
        "collections.unknown drops them"
    )
    verbose = _cli(tmp_path, "update", "--first-stage", "--verbose")
    assert verbose.returncode == 1 and "Stack Trace" in verbose.stderr and len(_lines(verbose.stderr)) > 10


def test_on_unknown_drop_counts_the_dropped_rows(tmp_path):
    extra = "    on_unknown: drop\n"
    (tmp_path / "dagster-ir.yaml").write_text(
        "collections:\n"
        + _collection(
            tmp_path, "filtered", ["d1", "d2", "d3"], ["1 0 d1 1", "2 0 d2 1", "41 0 d3 1", "2 0 d9 1"], extra
        )
    )
    done = _cli(tmp_path, "update", "--first-stage")
    assert done.returncode == 0, done.stderr
    query = _cli(
        tmp_path,
        "catalog",
        "query",
        "--format",
        "csv",
        "select count(*) as judgments, count(distinct query_id) as judged from qrels",
    )
    assert query.returncode == 0, query.stderr
    assert query.stdout.split() == ["judgments,judged", "2,2"]  # 2 judgments, 2 queries of 2


GOOD_PAGE = (
    "<page><title>Good</title><ns>0</ns><id>7</id><revision><id>1</id><text>some words</text></revision></page>\n"
)
BROKEN = (
    '<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/">\n'
    + GOOD_PAGE
    + "<page><title>Broken</title><ns>0</ns><id>8</id><revision><id>2</id><text>x</txet></revision></page>\n"
    + "</mediawiki>\n"
)


def test_a_dump_broken_mid_parse_keeps_its_file_and_page_with_parallel_workers(tmp_path):
    (tmp_path / "dagster-ir.yaml").write_text("collections:\n  wiki-car:\n    kind: wiki-car\n")
    broken = tmp_path / "broken.xml.bz2"
    broken.write_bytes(bz2.compress(BROKEN.encode()))
    for dump in (sample_dump_path(), broken):
        added = _cli(tmp_path, "add-dump", str(dump))
        assert added.returncode == 0, added.stderr
    done = _cli(tmp_path, "update", "--first-stage", "--parallel", "2")
    assert done.returncode == 1
    errors = _lines(done.stderr)
    assert len(errors) == 2, done.stderr  # no warnings or tracebacks from the workers
    assert f"[broken.xml.bz2]: wiki_articles: {broken}: malformed XML at line 3" in errors[1]
    assert "after page 'Good' (id 7): mismatched tag" in errors[1]
