"""The command line in process: argument routing, refusals with clear one-line errors, remove-dump."""

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from assets.cli.main import main
from dagster_ir.storage.catalog import Catalog, MaterializationRecord
from dagster_ir.storage.dumps import DumpRegistry, sample_dump_path
from dagster_ir.storage.locks import partition_lock_path
from dagster_ir.storage.parquet import table_path, table_root, write_table


@pytest.fixture
def data(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    return tmp_path / "data"


def test_report_is_a_command_only_in_the_command_position(data, capsys):
    assert main(["--data", str(data), "add-dump", "report"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("dagster-ir add-dump: report: no such dump file")
    assert "Traceback" not in err


def test_add_dump_refuses_a_truncated_dump(data, tmp_path, capsys):
    cut = tmp_path / "cut.xml.bz2"
    cut.write_bytes(sample_dump_path().read_bytes()[:600_000])
    assert main(["--data", str(data), "add-dump", str(cut)]) == 1
    err = capsys.readouterr().err
    assert str(cut) in err and "truncated" in err and "Traceback" not in err
    assert DumpRegistry(data).entries() == {}


def test_a_registered_dump_is_checked_once_unless_asked(data, tmp_path, monkeypatch):
    import dagster_ir.wiki.dump as dump_module
    from assets.cli.commands import _instance, add_dump

    checked = []
    real_check = dump_module.check_dump
    monkeypatch.setattr(dump_module, "check_dump", lambda path: checked.append(Path(path)) or real_check(path))
    sample = tmp_path / "sample.xml.bz2"
    shutil.copyfile(sample_dump_path(), sample)
    instance = _instance(data)
    assert add_dump(data, str(sample), instance, recheck=False) == "sample.xml.bz2"
    assert add_dump(data, str(sample), instance, recheck=False) == "sample.xml.bz2"  # the demo's second run
    assert checked == [sample]
    add_dump(data, str(sample), instance)  # add-dump always checks
    assert checked == [sample, sample]
    sample.write_bytes(sample.read_bytes()[:600_000])  # another file under a registered name is checked
    other = tmp_path / "other" / "sample.xml.bz2"
    other.parent.mkdir()
    shutil.copyfile(sample, other)
    with pytest.raises(Exception, match="truncated"):
        add_dump(data, str(other), instance, recheck=False)


def test_catalog_query_refuses_writes_and_explains(data, capsys):
    target = table_path(data, ["t"], None)
    write_table(pl.DataFrame({"x": [1]}), target)
    Catalog(data).record(
        MaterializationRecord(asset_key="t", partition=None, path=str(target), table_root=str(table_root(data, ["t"])))
    )
    before = target.read_bytes()
    assert main(["--data", str(data), "catalog", "query", f"copy (select 2 as x) to '{target}' (format parquet)"]) == 1
    err = capsys.readouterr().err
    assert "only read statements" in err and "COPY" in err and "Traceback" not in err
    assert target.read_bytes() == before
    assert main(["--data", str(data), "catalog", "query", "select sum(x) as s from t"]) == 0
    assert "1" in capsys.readouterr().out


def test_remove_dump_unregisters_it_and_drops_its_partitions(data, capsys):
    assert main(["--data", str(data), "add-dump", str(sample_dump_path())]) == 0
    key = capsys.readouterr().out.strip()
    assert key == sample_dump_path().name
    for asset in ("wiki_dump", "wiki_articles", "wiki_redirects", "wiki_raw_links"):
        write_table(pl.DataFrame({"x": [1]}), table_path(data, [asset], key), partition=key)
    extract = data / "files" / "wiki_extract" / key
    extract.mkdir(parents=True)
    locks = [partition_lock_path(data, asset, key) for asset in ("wiki_dump", "wiki_articles")]
    kept = partition_lock_path(data, "wiki_links", None)
    for lock in [*locks, kept]:
        lock.parent.mkdir(parents=True, exist_ok=True)
        lock.touch()
    assert main(["--data", str(data), "remove-dump", key]) == 0
    assert not any(lock.exists() for lock in locks) and kept.exists()  # its partitions' locks go, no other
    assert DumpRegistry(data).entries() == {}
    with dg.DagsterInstance.get() as instance:
        assert instance.get_dynamic_partitions("wiki_dump") == []
    for asset in ("wiki_dump", "wiki_articles", "wiki_redirects", "wiki_raw_links"):
        assert not table_path(data, [asset], key).parent.exists()
    assert not extract.exists()
    assert main(["--data", str(data), "remove-dump", key]) == 1
    assert "no dump registered" in capsys.readouterr().err


def test_runs_whose_process_died_are_marked_failed(tmp_path):
    import subprocess
    import sys

    from assets.cli.instance import HOST_TAG, PID_TAG, mark_dead_runs_failed
    from dagster_ir.storage.atomic import host_tag

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:

        def started(pid, host):
            run = dg.DagsterRun(
                job_name="update", status=dg.DagsterRunStatus.STARTED, tags={PID_TAG: str(pid), HOST_TAG: host}
            )
            return instance.add_run(run).run_id

        killed, alive, elsewhere = (
            started(dead.pid, host_tag()),
            started(os.getpid(), host_tag()),
            started(dead.pid, "ffffffff"),
        )
        assert mark_dead_runs_failed(instance) == [killed]
        status = {run_id: instance.get_run_by_id(run_id).status for run_id in (killed, alive, elsewhere)}
    assert status == {
        killed: dg.DagsterRunStatus.FAILURE,
        alive: dg.DagsterRunStatus.STARTED,
        elsewhere: dg.DagsterRunStatus.STARTED,
    }


def _catalog_with_table(data):
    target = table_path(data, ["t"], None)
    write_table(pl.DataFrame({"x": [1, 2]}), target)
    Catalog(data).record(
        MaterializationRecord(asset_key="t", partition=None, path=str(target), table_root=str(table_root(data, ["t"])))
    )
    return Catalog(data)


def _tree(root):
    return {
        str(p.relative_to(root)): (p.stat().st_mtime_ns, p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


def test_catalog_query_writes_nothing(data, capsys):
    catalog = _catalog_with_table(data)
    before = _tree(data)
    assert main(["--data", str(data), "catalog", "query", "select sum(x) as s from t"]) == 0
    assert "3" in capsys.readouterr().out
    assert _tree(data) == before  # not the catalog's bytes, nor its mtime, nor a lock or journal file
    assert catalog.path.exists()


def _read_only(data, command: list[str], cwd):
    """`command` run with `data` read-only: a read-only bind mount as root (who writes anywhere), else chmod."""
    env = {**os.environ, "PYTHONPATH": str(Path.cwd())}
    if os.geteuid() != 0:
        folders = [data, *[p for p in data.rglob("*") if p.is_dir()]]
        for folder in folders:
            folder.chmod(0o555)
        try:
            return subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=env, timeout=120, check=False)
        finally:
            for folder in folders:
                folder.chmod(0o755)
    if shutil.which("unshare") is None:
        pytest.skip("root without unshare: no way to make the data directory read-only")
    script = f"mount --bind -o ro {shlex.quote(str(data))} {shlex.quote(str(data))} && touch {shlex.quote(str(data / 'probe'))} 2>/dev/null; exec {shlex.join(command)}"
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
        check=False,
    )
    if "mount" in done.stderr and done.returncode != 0:
        pytest.skip(f"cannot mount read-only here: {done.stderr.strip()}")
    assert not (data / "probe").exists(), "the data directory was not read-only"
    return done


def test_catalog_query_on_a_read_only_data_directory(data, tmp_path):
    _catalog_with_table(data)
    cli = [sys.executable, "-m", "assets.cli.main", "--data", str(data)]
    done = _read_only(data, [*cli, "catalog", "query", "select sum(x) as s from t"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "3" in done.stdout and done.stderr == ""
    lineage = _read_only(data, [*cli, "lineage", "t"], tmp_path)
    assert lineage.returncode == 0, lineage.stderr


def test_catalog_query_reads_the_data_directory_tables_from_any_working_directory(data, tmp_path, monkeypatch, capsys):
    _catalog_with_table(data)
    elsewhere = tmp_path / "elsewhere"
    write_table(pl.DataFrame({"x": [100]}), table_path(elsewhere, ["t"], None))  # another tables/ folder here
    monkeypatch.chdir(elsewhere)
    assert main(["--data", str(data), "catalog", "query", "select sum(x) as s from t"]) == 0
    out = capsys.readouterr().out
    assert "3" in out and "100" not in out


@pytest.mark.parametrize(
    "sql",
    [
        "select * from read_text('/etc/passwd')",
        "select * from glob('/root/**')",
        "select * from read_csv('/etc/hostname')",
        "select * from read_text('tables/../../../../../etc/passwd')",
    ],
)
def test_catalog_query_reads_no_host_file(data, capsys, sql):
    _catalog_with_table(data)
    assert main(["--data", str(data), "catalog", "query", sql]) == 1
    err = capsys.readouterr().err
    assert "disabled by configuration" in err and "root:" not in err and len(err.strip().splitlines()) == 1


def test_catalog_query_cannot_turn_external_access_back_on(data):
    catalog = _catalog_with_table(data)
    with pytest.raises(Exception, match="locked|only read statements"):
        catalog.query("select * from read_text('/etc/passwd'); set enable_external_access = true")
    assert catalog.query("select current_setting('enable_external_access') as on").item() is False


def test_update_says_which_journal_records_it_rejected(tmp_path, capsys):
    from assets.cli.commands import sync_catalog

    catalog = Catalog(tmp_path)
    catalog.pending_dir.mkdir(parents=True)
    (catalog.pending_dir / "00000000000000000001-old.json").write_text("")
    catalog.sync()
    before = set(catalog.rejected())
    (catalog.pending_dir / "00000000000000000002-torn.json").write_text('{"asset_key": "t", "partit')
    (catalog.pending_dir / "stray.txt").write_text("x")
    assert sync_catalog(tmp_path, before)
    err = capsys.readouterr().err
    assert "catalog: 2 journal records could not be folded (00000000000000000002-torn.json, stray.txt)" in err
    assert "old.json" not in err and str(catalog.rejected_dir) in err
    assert sync_catalog(tmp_path, set(catalog.rejected()))
    assert capsys.readouterr().err == ""
