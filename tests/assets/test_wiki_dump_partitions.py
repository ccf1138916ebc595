"""A multistream dump with its index: `add-dump --partitions` registers its parts, `update` parses them in
parallel worker processes, and the corpus-wide assets equal those of the same dump as one partition."""

import sys
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from assets.cli.commands import add_dump_partitions
from assets.cli.main import main
from assets.cli.updates import update_all
from assets.definitions import defs, resources
from dagster_ir.storage.catalog import Catalog
from dagster_ir.storage.dumps import DumpRegistry

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dagster_ir" / "wiki"))
from wiki_dumps import page, write_multistream  # noqa: E402

pytestmark = pytest.mark.slow
WIKI = dg.AssetSelection.groups("wikipedia")
WORDS = " ".join(f"word{i}" for i in range(110))
PAGES = [
    page(i, f"Topic {i}", f"Topic {i} links [[Topic {(i % 9) + 1}]] and [[Topic {((i + 3) % 9) + 1}]]. {WORDS}")
    for i in range(1, 10)
] + [page(20, "Subject 1", "#REDIRECT [[Topic 1]]", redirect="Topic 1")]


def _tables(root: Path) -> dict[str, pl.DataFrame]:
    catalog = Catalog(root)
    return {
        "articles": catalog.query("select article_id, segment_no, text from wiki_articles order by all"),
        "links": catalog.query("select src_id, src_segment, target_id from wiki_links order by all"),
        "graph": catalog.query("select * from wiki_link_graph order by all"),
        "groups": catalog.query("select * from php_groups order by all"),
    }


def _update(root: Path, home: Path, dump: Path, partitions: int, parallel: int) -> tuple[list[str], object]:
    home.mkdir()
    with dg.instance_for_test(temp_dir=str(home)) as instance:
        keys = add_dump_partitions(root, str(dump), instance, partitions)
        report = update_all(
            defs, instance, resources=resources(str(root)), log=lambda _: None, selection=WIKI, parallel=parallel
        )
        assert sorted(instance.get_dynamic_partitions("wiki_dump")) == keys
    return keys, report


def test_parts_are_parsed_in_parallel_and_give_the_whole_dump(tmp_path):
    dump = tmp_path / "topics-multistream.xml.bz2"
    write_multistream(dump, PAGES, pages_per_stream=2, index=True)
    keys, report = _update(tmp_path / "parts", tmp_path / "home-parts", dump, partitions=3, parallel=2)
    assert report.ok, report.failures
    assert keys == [f"{dump.name}@00{i}-of-003" for i in (1, 2, 3)]
    parsed = {p for p, names in report.runs if p is not None and "wiki_articles" in names}
    assert parsed == set(keys)
    whole_keys, whole = _update(tmp_path / "whole", tmp_path / "home-whole", dump, partitions=1, parallel=1)
    assert whole.ok and whole_keys == [dump.name]
    parts, single = _tables(tmp_path / "parts"), _tables(tmp_path / "whole")
    for name in parts:
        assert parts[name].equals(single[name]), name
    assert parts["articles"]["article_id"].n_unique() == 9 and parts["graph"].height == 18


def test_cli_adds_the_parts_and_removes_them_by_file_name(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    dump = tmp_path / "topics-multistream.xml.bz2"
    write_multistream(dump, PAGES, pages_per_stream=2, index=True)
    data = tmp_path / "data"
    assert main(["--data", str(data), "add-dump", "--partitions", "2", str(dump)]) == 0
    keys = capsys.readouterr().out.split()
    assert keys == [f"{dump.name}@001-of-002", f"{dump.name}@002-of-002"]
    assert main(["--data", str(data), "remove-dump", dump.name]) == 0
    assert DumpRegistry(data).entries() == {}
    with dg.DagsterInstance.get() as instance:
        assert instance.get_dynamic_partitions("wiki_dump") == []
