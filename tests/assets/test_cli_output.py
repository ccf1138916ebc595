"""What the commands print: full rows in four formats, lineage depth and config, the demo summary,
help with examples that loads nothing heavy, and `status --why`."""

import csv
import errno
import io
import json
import subprocess
import sys
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from assets.cli.commands import summary_text
from assets.cli.main import build_parser, main
from assets.cli.terminal import format_frame
from assets.lib.staleness import stale_reasons
from dagster_ir.evaluation.cli import _parser
from dagster_ir.storage.catalog import Catalog, MaterializationRecord
from dagster_ir.storage.lineage import LineageNode, compact_config, render
from dagster_ir.storage.parquet import table_path, table_root, write_table

REPO = Path(__file__).parents[2]
LONG = "a long cell value that Polars' default frame would cut: " + "x" * 120


def frame() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "query_id": [f"q{i}" for i in range(20)],
            "score": [i / 3 for i in range(20)],
            "text": [LONG if i == 7 else f"t|{i}" for i in range(20)],
            "n": list(range(20)),
            "tags": [["a", None]] * 20,
        }
    )


def test_table_shows_every_row_and_every_cell_whole():
    text = format_frame(frame(), "table")
    lines = text.splitlines()
    assert lines[0].split() == ["query_id", "score", "text", "n", "tags"]
    assert len(lines) == 2 + 20 + 1 and lines[-1] == "(20 rows)"
    assert LONG in text and "…" not in text
    # columns line up: every row's `n` ends where the header's does (numbers right-aligned)
    end = lines[0].index(" n") + 2
    assert all(line[:end].endswith(str(i)) for i, line in enumerate(lines[2:22]))


def test_csv_json_and_markdown_round_trip_every_row():
    rows = list(csv.DictReader(io.StringIO(format_frame(frame(), "csv"))))
    assert len(rows) == 20 and rows[7]["text"] == LONG and rows[0]["tags"] == '["a",null]'
    records = json.loads(format_frame(frame(), "json"))
    assert len(records) == 20 and records[19] == {
        "query_id": "q19",
        "score": 19 / 3,
        "text": "t|19",
        "n": 19,
        "tags": ["a", None],
    }
    markdown = format_frame(frame(), "markdown").splitlines()
    assert len(markdown) == 22 and markdown[1] == "|---|---:|---|---:|---|"
    assert markdown[2] == '| q0 | 0 | t\\|0 | 0 | ["a",null] |'
    with pytest.raises(ValueError, match="--format: 'xml' is not one of"):
        format_frame(frame(), "xml")


def test_catalog_query_command_prints_csv(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    data = tmp_path / "data"
    target = table_path(data, ["t"], None)
    write_table(pl.DataFrame({"x": list(range(25))}), target)
    Catalog(data).record(
        MaterializationRecord(asset_key="t", partition=None, path=str(target), table_root=str(table_root(data, ["t"])))
    )
    assert main(["--data", str(data), "catalog", "query", "--format", "csv", "select x from t order by x"]) == 0
    assert capsys.readouterr().out.splitlines() == ["x", *(str(i) for i in range(25))]


def _node(asset: str, record: str, parents=(), config=None) -> LineageNode:
    return LineageNode(
        record, asset, None, "1", "c" * 20, config, "2026-12-03 09:00:00.123", f"/d/{asset}.parquet", list(parents)
    )


def test_lineage_hides_config_by_default_drops_nulls_and_stops_at_depth():
    dump = _node("wiki_dump", "r1")
    links = _node("wiki_links", "r2", [dump], config='{"min_len": 5, "skip": null, "deep": {"a": null}}')
    root = _node("model_report", "r3", [links])
    full = render([root]).splitlines()
    assert len(full) == 3 and "config=" not in "\n".join(full)
    assert 'config={"min_len":5}' in render([root], config=True).splitlines()[1]
    cut = render([root], depth=1).splitlines()
    assert len(cut) == 2 and cut[1].endswith("(reads 1 more; --depth to see them)")
    assert compact_config('{"a": null}') == "" and compact_config(None) == ""
    # a record with a large config (the demo's were up to 812 characters a line) stays one short line
    wide = _node(
        "cross_encoder", "r4", [links], config=json.dumps({f"field_{i}": None if i % 2 else i for i in range(60)})
    )
    assert max(len(line) for line in render([wide]).splitlines()) < 120


def test_demo_summary_is_aligned_uncut_and_suggests_commands_that_exist(tmp_path):
    root = tmp_path / "data"
    partition = "enwiki-20260101-pages-articles-multistream.xml.bz2@0-123456789"
    latest = [
        ("wiki_articles", partition, 1234, str(root / "tables/wiki_articles/x.parquet")),
        ("corpus", "wiki-car", 5, str(root / "tables/corpus/y.parquet")),
        ("wiki_link_graph", "", 123456789, None),
        ("evaluation_report", "wiki-car", 60, None),
    ]
    text = summary_text(root, latest)
    lines = text.splitlines()
    assert partition in text and "duckdb " not in text
    table = lines[1:6]
    assert len({line.index("rows") if i == 0 else None for i, line in enumerate(table)} - {None}) == 1
    rows_end = table[0].index("rows") + len("rows")
    assert table[2][:rows_end].endswith("1234") and table[4][:rows_end].endswith("123456789")
    assert "tables/corpus/y.parquet" in table[3] and str(root) not in table[3]
    commands = [line.split(":", 1)[1].strip() for line in lines if line.startswith(("Catalog:", "Reports:"))]
    assert all(c.startswith("dagster-ir ") for c in commands) and len(commands) == 2
    catalog, report = commands
    sql = catalog.split('"')[1]
    assert build_parser().parse_args(["catalog", "query", sql]).sql == sql
    assert report.split()[1:] == ["--data", str(root), "report", "--collection", "wiki-car"]  # not the default dir
    assert _parser(collection_default="wiki-car").parse_args(report.split()[4:]).collection == "wiki-car"
    # a project without wiki-car (examples/cranfield.yaml): the report suggested is one that exists
    other = summary_text(root, [("corpus", "cranfield", 1400, None), ("evaluation_report", "cranfield", 225, None)])
    assert "report --collection cranfield" in other and "wiki-car" not in other and "wiki_link_graph" not in other
    assert "select * from corpus limit 5" in other
    assert "Reports:" not in summary_text(root, [("corpus", "cranfield", 1400, None)])  # no report made yet


def test_every_subcommand_help_has_an_example():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, type(parser._subparsers._group_actions[0])))
    for name, command in sub.choices.items():
        assert "example" in command.format_help(), name
    assert "example" in parser.format_help()


def test_help_loads_neither_dagster_nor_polars_nor_torch():
    code = (
        "import sys\nfrom assets.cli.main import main\n"
        "for argv in (['--help'], ['catalog', 'query', '--help'], ['report', '--help']):\n"
        "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
        "heavy = sorted(m for m in ('dagster', 'polars', 'duckdb', 'torch', 'scipy', 'matplotlib', 'ir_measures')"
        " if m in sys.modules)\nprint('HEAVY', heavy)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    ).stdout
    assert "--collection" in out and "HEAVY []" in out, out[-400:]


def test_report_help_names_collection_and_requires_nothing_it_fills_in(capsys):
    assert main(["report", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--collection" in out and "(default wiki-car)" in out and "(default bm25)" in out
    assert "required" not in out


def test_status_why_names_the_changed_code_and_the_upstream_with_new_data(tmp_path):
    state = {"code": "1", "value": 1}

    def assets():
        @dg.asset(code_version="1")
        def upstream() -> dg.Output[int]:
            return dg.Output(state["value"], data_version=dg.DataVersion(str(state["value"])))

        @dg.asset(code_version=state["code"])
        def downstream(upstream: int) -> int:
            return upstream + 1

        @dg.asset(code_version="1")
        def other() -> int:
            return 0

        return [upstream, downstream, other]

    io_manager = {"io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path))}
    with dg.instance_for_test() as instance:
        defs = lambda: dg.Definitions(assets=assets(), resources=io_manager)  # noqa: E731
        found = {k.to_user_string(): (status, reasons) for (k, _), status, reasons in stale_reasons(defs(), instance)}
        assert found["other"] == ("missing", ["never materialized"])
        assert dg.materialize(assets(), instance=instance, resources=io_manager).success
        assert stale_reasons(defs(), instance) == []
        state["code"] = "2"
        (only,) = stale_reasons(defs(), instance)
        assert only[0][0] == dg.AssetKey("downstream") and only[2] == ["downstream: has a new code version"]
        state["code"] = "1"
        state["value"] = 5
        assert dg.materialize(
            [a for a in assets() if a.key.to_user_string() == "upstream"], instance=instance, resources=io_manager
        ).success
        (only,) = stale_reasons(defs(), instance)
        assert only[1] == "stale" and any(r.startswith("upstream: has a new") for r in only[2]), only


@pytest.mark.parametrize(
    "error, why",
    [
        (PermissionError(errno.EACCES, "Permission denied"), "permission denied"),
        (OSError(errno.EROFS, "Read-only file system"), "read-only file system"),
    ],
)
def test_a_data_directory_that_cannot_be_written_is_one_line(tmp_path, monkeypatch, capsys, error, why):
    import assets.cli.commands as commands

    lock = tmp_path / "dagster_home" / ".dagster-ir-storage.lock"
    error.filename = str(lock)

    def read_only(*args, **kwargs):  # what opening the instance meets on a read-only directory
        raise error

    monkeypatch.setattr(commands, "_instance", read_only)
    assert main(["--data", str(tmp_path), "status"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"dagster-ir status: cannot write {lock}: {why} (") and err.count("\n") == 1, err


def test_an_os_error_that_is_not_about_writing_is_not_hidden(tmp_path, monkeypatch):
    import assets.cli.commands as commands

    def broken(*args, **kwargs):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(commands, "_instance", broken)
    with pytest.raises(OSError, match="Input/output"):
        main(["--data", str(tmp_path), "status"])


def test_status_why_names_the_upstream_change_behind_an_asset_two_levels_down(tmp_path):
    """Dagster looks one level up: `last` is stale only through `middle`, whose upstream has new data.
    Its reason is that origin, not a removed partition (nothing was removed)."""
    from assets.lib.resources import DataDirResource

    state = {"value": 1}

    def assets():
        @dg.asset(code_version="1")
        def first() -> dg.Output[int]:
            return dg.Output(state["value"], data_version=dg.DataVersion(str(state["value"])))

        @dg.asset(code_version="1")
        def middle(first: int) -> int:
            return first + 1

        @dg.asset(code_version="1")
        def last(middle: int) -> int:
            return middle + 1

        return [first, middle, last]

    resources = {
        "io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path / "io")),
        "data": DataDirResource(path=str(tmp_path / "data")),
    }
    with dg.instance_for_test() as instance:
        defs = lambda: dg.Definitions(assets=assets(), resources=resources)  # noqa: E731
        assert dg.materialize(assets(), instance=instance, resources=resources).success
        state["value"] = 5
        first = [a for a in assets() if a.key.to_user_string() == "first"]
        assert dg.materialize(first, instance=instance, resources=resources).success
        found = {k.to_user_string(): reasons for (k, _), _, reasons in stale_reasons(defs(), instance, resources=None)}
        assert set(found) == {"middle"}, found  # without the data directory: Dagster's one level
        found = {
            k.to_user_string(): reasons for (k, _), _, reasons in stale_reasons(defs(), instance, resources=resources)
        }
        assert set(found) == {"middle", "last"}, found
        (cause,) = found["middle"]
        assert cause.startswith("first: has a new") and "data version" in cause, found
        assert found["last"] == [f"reads middle, stale: {cause}"], found


def test_the_demo_summary_outlines_the_methods_report_with_its_k_and_kept_weights(tmp_path):
    import json

    from assets.cli.reproduce import summary_path
    from assets.defs.model_report import KEPT_PREFIX

    root = tmp_path / "data"
    kept = [
        "bert: start kept in 1 of 1 unit (per unit: start), mean validation score: start 0.500, kept weights 0.500",
        "knrm: start kept in 0 of 1 unit (per unit: epoch 3), mean validation score: start 0.200, kept weights 0.300",
    ]
    sections = [
        {"title": "First-stage retrieval", "notes": "Paired test.", "tables": []},
        {"title": "PHP: rerankers of BM25's top-k, k = 20", "notes": f"t-test. {KEPT_PREFIX}{kept[0]}.", "tables": []},
        {
            "title": "Neural ranking baselines, k = 20",
            "notes": f"t-test. {KEPT_PREFIX}{kept[1]}; {kept[0]}.",
            "tables": [],
        },
    ]
    path = summary_path(root, "wiki-car")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"sections": sections}), encoding="utf-8")
    lines = summary_text(root, [("model_report", "wiki-car", 10, None)]).splitlines()
    start = lines.index("Methods report of wiki-car (3 sections; k: the candidates each row reranks):")
    assert lines[start + 1 : start + 4] == [f"  {s['title']}" for s in sections]
    assert lines[start + 5 : start + 7] == [f"  {kept[0]}", f"  {kept[1]}"]  # each row once
    assert "Methods report" not in summary_text(root, [("model_report", "cranfield", 10, None)])  # no tables yet
