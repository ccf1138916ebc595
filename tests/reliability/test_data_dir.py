"""A data directory is its own: no stored record names the directory it was built in, a copy rebuilds
from its own files with the original gone, and every subcommand on a read-only copy either works or
says in one line what it could not write.

The directory is built once per module by `dagster-ir update --first-stage` (about 25 s here) over a
tiny local collection and the bundled Wikipedia sample.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import duckdb
import polars as pl
import pytest

from dagster_ir.storage.dumps import sample_dump_path

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
WORDS = ["solar", "river", "roman", "coffee", "volcano", "chess", "piano", "glacier"]


def _config(folder: Path) -> Path:
    docs = [f"tiny{i}\t" + f"{w} " * 3 + f"filler {i}" for i, w in enumerate(WORDS)]
    (folder / "tiny.tsv").write_text("\n".join(docs) + "\n")
    (folder / "tiny-topics.tsv").write_text("".join(f"{i}\t{w}\n" for i, w in enumerate(WORDS)))
    (folder / "tiny-qrels.txt").write_text("".join(f"{i} 0 tiny{i} 1\n" for i in range(len(WORDS))))
    path = folder / "dagster-ir.yaml"
    path.write_text(
        "collections:\n  tiny:\n    kind: local\n    corpus: tiny.tsv\n    topics: tiny-topics.tsv\n"
        "    qrels: tiny-qrels.txt\n"
    )
    return path


def _env(config: Path) -> dict:
    env = {**os.environ, "DAGSTER_IR_CONFIG": str(config), "HF_HUB_OFFLINE": "1"}
    env.pop("DAGSTER_HOME", None)  # the command's own, under the data directory
    env.pop("DAGSTER_IR_DATA", None)
    return env


def _cli(config: Path, data: Path, *args: str, wrap: list[str] | None = None) -> subprocess.CompletedProcess:
    command = [*(wrap or []), sys.executable, "-m", "assets.cli.main", "--data", str(data), *args]
    return subprocess.run(command, cwd=REPO, env=_env(config), capture_output=True, text=True, timeout=600, check=False)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    """(config, data directory) after a first-stage update."""
    folder = tmp_path_factory.mktemp("built")
    config, data = _config(folder), folder / "data"
    done = _cli(config, data, "update", "--first-stage")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return config, data


def stored_paths_under(root: Path) -> list[tuple[str, str, str]]:
    """(where, field, value) of every stored string that names `root`: Parquet columns (nested ones as
    JSON), the catalog's tables, and the metadata of every materialization in the Dagster instance."""
    needle = str(root.resolve())
    hits = []
    for file in sorted(root.rglob("*.parquet")):
        frame = pl.read_parquet(file)
        for name, dtype in frame.schema.items():
            if dtype == pl.String:
                values = frame[name].drop_nulls()
            elif dtype.is_nested():
                values = pl.Series([json.dumps(v, default=str) for v in frame[name].to_list()], dtype=pl.String)
            else:
                continue
            found = values.filter(values.str.contains(needle, literal=True))
            if len(found):
                hits.append((str(file.relative_to(root)), name, found[0]))
    with duckdb.connect(str(root / "catalog.duckdb"), read_only=True) as catalog:
        tables = catalog.execute(
            "select table_name from information_schema.tables where table_type = 'BASE TABLE'"
        ).fetchall()
        for (table,) in tables:
            columns = catalog.execute(
                "select column_name from information_schema.columns where table_name = ?", [table]
            ).fetchall()
            for (column,) in columns:
                count, value = catalog.execute(
                    f'select count(*), any_value("{column}"::varchar) from "{table}" where "{column}"::varchar like ?',
                    [f"%{needle}%"],
                ).fetchone()
                if count:
                    hits.append((f"catalog {table}", column, value))
    with dg.DagsterInstance.from_config(str(root / "dagster_home")) as instance:
        for key in instance.get_asset_keys():
            for record in instance.fetch_materializations(key, limit=10_000).records:
                for name, value in (record.asset_materialization.metadata or {}).items():
                    text = dg.serialize_value(value)
                    if needle in text:
                        hits.append((f"metadata of {key.to_user_string()}", name, text))
    return hits


def test_no_stored_table_record_or_metadata_entry_names_the_build_directory(built):
    _, data = built
    assert stored_paths_under(data) == []


def test_the_scan_finds_a_path_that_is_stored(tmp_path):
    """The scan above would see an absolute path, were one stored."""
    root = tmp_path / "data"
    (root / "tables" / "x").mkdir(parents=True)
    pl.DataFrame({"a": [str(root / "files" / "m")]}).write_parquet(root / "tables" / "x" / "data.parquet")
    with duckdb.connect(str(root / "catalog.duckdb")) as catalog:
        catalog.execute("create table materializations as select 'x' as asset_key, ? as config", [f"{root}/y"])
    (root / "dagster_home").mkdir()
    found = {(where, field) for where, field, _ in stored_paths_under(root)}
    assert found == {("tables/x/data.parquet", "a"), ("catalog materializations", "config")}


def test_a_copy_rebuilds_from_its_own_files_once_the_original_is_gone(built, tmp_path):
    config, data = built
    original, copy = tmp_path / "original", tmp_path / "copy"
    shutil.copytree(data, original, symlinks=True)
    shutil.copytree(original, copy, symlinks=True)
    shutil.rmtree(original)
    for asset in ("candidate_runs", "negatives", "evaluation_report"):
        shutil.rmtree(copy / "tables" / asset / "tiny")
    done = _cli(config, copy, "update", "--first-stage")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "3 materialized" in done.stdout and "failed" not in done.stdout, done.stdout[-2000:]
    assert str(original) not in done.stdout + done.stderr
    report = pl.read_parquet(copy / "tables" / "evaluation_report" / "tiny" / "data.parquet")
    assert report.height > 0
    assert stored_paths_under(copy) == []


def _read_only(data: Path) -> list[str] | None:
    """How to run a command that sees `data` read-only: a read-only bind mount in a mount namespace of
    its own when root (a permission bit does not stop root), else nothing (the caller drops `w` bits)."""
    if os.geteuid() != 0:
        return []
    wrap = [
        "unshare",
        "-m",
        "sh",
        "-c",
        'd="$1"; shift; mount --bind "$d" "$d" && mount -o remount,bind,ro "$d" && exec "$@"',
        "sh",
        str(data),
    ]
    probe = subprocess.run([*wrap, "sh", "-c", f'! touch "{data}/probe" 2>/dev/null'], capture_output=True, check=False)
    return wrap if probe.returncode == 0 else None


READ_ONLY_WORKS = [
    ["catalog", "query", "select count(*) from materializations"],
    ["lineage", "evaluation_report", "--partition", "tiny"],
    ["report", "--collection", "tiny"],
]
NEEDS_TO_WRITE = [
    ["status"],
    ["status", "--why"],
    ["catalog", "sync"],
    ["update", "--first-stage"],
    ["reproduce", "--collection", "tiny"],
    ["add-dump", str(sample_dump_path())],
    ["remove-dump", "x"],
]


def test_every_subcommand_on_a_read_only_directory_works_or_says_what_it_could_not_write(built, tmp_path):
    config, data = built
    copy = tmp_path / "read-only"
    shutil.copytree(data, copy, symlinks=True)
    wrap = _read_only(copy)
    if wrap is None:
        pytest.skip("root without a mount namespace: no way to make a directory read-only here")
    if not wrap:
        for folder in [copy, *copy.rglob("*")]:
            folder.chmod(folder.stat().st_mode & ~0o222)
    before = sorted((p.relative_to(copy), p.stat().st_mtime_ns) for p in copy.rglob("*"))
    try:
        for args in READ_ONLY_WORKS + NEEDS_TO_WRITE:
            done = _cli(config, copy, *args, wrap=wrap)
            said = " ".join(args)
            assert "Traceback" not in done.stdout + done.stderr, f"{said}:\n{done.stderr[-3000:]}"
            if args in READ_ONLY_WORKS:
                assert done.returncode == 0, f"{said}:\n{done.stderr[-3000:]}"
            else:
                lines = done.stderr.strip().splitlines()
                assert done.returncode == 1 and len(lines) == 1, f"{said}:\n{done.stderr[-3000:]}"
                assert lines[0].startswith(f"dagster-ir {args[0]}") and f"cannot write {copy}/" in lines[0], lines
    finally:
        if not wrap:
            for folder in [copy, *copy.rglob("*")]:
                folder.chmod(folder.stat().st_mode | 0o200)
    assert sorted((p.relative_to(copy), p.stat().st_mtime_ns) for p in copy.rglob("*")) == before
