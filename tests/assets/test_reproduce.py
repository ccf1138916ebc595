"""`dagster-ir reproduce`: which asset partitions a collection needs, that only those run, their times."""

from pathlib import Path

import dagster as dg
import pytest

from assets.cli.main import main
from assets.cli.reproduce import asset_times, collection_partitions_of, format_times, reproduction_plan
from assets.cli.updates import update_all

COLLECTIONS = dg.StaticPartitionsDefinition(["a", "b"])
UNIT_KEYS = {"a": ["a/fold-0/seed-0", "a/fold-1/seed-0"], "b": ["b/seed-0"]}
UNITS = dg.StaticPartitionsDefinition([u for units in UNIT_KEYS.values() for u in units])
KINDS = dg.StaticPartitionsDefinition(["words", "pieces"])
TO_UNITS = dg.StaticPartitionMapping(UNIT_KEYS)
TO_COLLECTION = dg.StaticPartitionMapping({u: c for c, units in UNIT_KEYS.items() for u in units})


@dg.asset
def shared() -> int:
    return 1


@dg.asset(partitions_def=COLLECTIONS)
def docs(context: dg.AssetExecutionContext, shared: int) -> str:
    return f"{context.partition_key}:{shared}"


@dg.asset(partitions_def=UNITS, ins={"docs": dg.AssetIn(partition_mapping=TO_UNITS)})
def model(context: dg.AssetExecutionContext, docs: str) -> str:
    return f"{docs}/{context.partition_key}"


@dg.asset(partitions_def=dg.MultiPartitionsDefinition({"collection": COLLECTIONS, "kind": KINDS}), deps=[shared])
def table(context: dg.AssetExecutionContext) -> str:
    return context.partition_key


@dg.asset(partitions_def=COLLECTIONS, ins={"model": dg.AssetIn(partition_mapping=TO_COLLECTION)})
def report(model: dict) -> int:
    return len(model)


@pytest.fixture
def setup(tmp_path):
    defs = dg.Definitions(assets=[shared, docs, model, table, report])
    resources = {"io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path / "store"))}
    return defs, dg.DagsterInstance.ephemeral(), resources


def names(pairs):
    return sorted(f"{k.to_user_string()}[{p}]" if p else k.to_user_string() for k, p in pairs)


def test_a_collection_needs_its_partitions_its_units_and_what_they_read(setup):
    defs, instance, _ = setup
    owned = collection_partitions_of(defs, instance, "a", set(UNIT_KEYS["a"]))
    assert names(owned) == [
        "docs[a]",
        "model[a/fold-0/seed-0]",
        "model[a/fold-1/seed-0]",
        "report[a]",
        "table[a|pieces]",
        "table[a|words]",
    ]
    assert names(reproduction_plan(defs, instance, "a", set(UNIT_KEYS["a"]))) == sorted(["shared", *names(owned)])


def test_only_the_plan_is_materialized_and_a_second_run_does_nothing(setup):
    defs, instance, resources = setup
    plan = reproduction_plan(defs, instance, "a", set(UNIT_KEYS["a"]))
    first = update_all(defs, instance, resources=resources, only=plan, log=lambda _: None)
    ran = sorted(f"{k}[{p}]" if p else k for p, ks in first.runs for k in ks)
    assert first.ok and ran == names(plan)
    assert instance.get_materialized_partitions(dg.AssetKey("docs")) == {"a"}  # nothing of collection b
    assert instance.get_materialized_partitions(dg.AssetKey("model")) == set(UNIT_KEYS["a"])

    times = {t.step: t for t in asset_times(instance, plan, since=0.0)}
    assert set(times) == {"shared", "docs", "model", "table", "report"}
    assert (times["model"].partitions, times["model"].fresh, times["table"].partitions) == (2, 2, 2)
    assert all(t.seconds >= 0 and t.fresh_seconds == t.seconds for t in times.values())

    second = update_all(defs, instance, resources=resources, only=plan, log=lambda _: None)
    assert second.runs == [] and second.fresh == len(plan)
    later = asset_times(instance, plan, since=float("inf"))
    assert sum(t.fresh for t in later) == 0 and sum(t.partitions for t in later) == len(plan)
    text = format_times(later)
    assert text.splitlines()[0].split() == [
        "asset",
        "(step)",
        "partitions",
        "made",
        "now",
        "seconds",
        "of",
        "which",
        "now",
    ]
    assert text.splitlines()[-1].split()[:3] == ["total", str(len(plan)), "0"]


def test_reproduce_refuses_an_unknown_collection(tmp_path, capsys):
    assert main(["--data", str(tmp_path), "reproduce", "--collection", "nope"]) == 1
    assert "--collection: 'nope' is not a configured collection" in capsys.readouterr().err


PARTS = dg.StaticPartitionsDefinition(["p1", "p2"])


@dg.asset(partitions_def=PARTS)
def interrupted(context: dg.AssetExecutionContext) -> int:
    from dagster._core.errors import DagsterExecutionInterruptedError

    if context.partition_key == "p1":
        raise DagsterExecutionInterruptedError("as SIGTERM from `timeout` does")
    return 2


def test_an_interrupted_run_stops_the_update(tmp_path):
    defs = dg.Definitions(assets=[interrupted])
    instance = dg.DagsterInstance.ephemeral()
    report = update_all(
        defs, instance, resources={"io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path))}, log=lambda _: None
    )
    assert report.interrupted and [p for p, _, _ in report.failures] == ["p1"]
    assert report.runs == [] and instance.get_materialized_partitions(dg.AssetKey("interrupted")) == set()


def test_markdown_page_has_its_header_the_sections_and_the_times():
    import datetime

    from assets.cli.reproduce import StepTime, markdown_page, settings_of
    from dagster_ir.collections.config import CranfieldSpec
    from dagster_ir.collections.protocol import Protocol

    spec = CranfieldSpec(
        name="cranfield",
        path=Path("/data/cranfield"),
        protocol=Protocol("cv", (0, 1)),
        assets={"neural_baselines": {"models": ["drmm", "knrm"]}},
    )
    summary = {
        "title": "t",
        "sections": [
            {
                "title": "GHRM",
                "notes": "a note",
                "tables": [
                    {"caption": "Mean over 2 queries.", "header": ["Run", "nDCG@20"], "rows": [["bm25", ["0.3598*"]]]}
                ],
            }
        ],
    }
    times = [StepTime("ghrm_runs", ("ghrm_runs",), 2, 12.5, 2.0, 1)]
    page = markdown_page(
        "cranfield",
        summary,
        times,
        settings_of(spec, Path("examples/cranfield.yaml")),
        when=datetime.datetime(2026, 12, 3, 9, 30, tzinfo=datetime.UTC),
        commit="abc1234",
        on="a CPU, 2 cores",
    )
    lines = page.splitlines()
    assert lines[0] == "# Results: cranfield"
    assert "dagster-ir reproduce --collection cranfield --markdown PATH" in lines[2]
    for row in [
        "| date | 2026-12-03 09:30 UTC |",
        "| commit | abc1234 |",
        "| machine | a CPU, 2 cores |",
        "| config | `examples/cranfield.yaml` |",
        "| protocol | `cv`, 5 folds rotated |",
        "| seeds | 0, 1 |",
        "| `neural_baselines` | models: ['drmm', 'knrm'] |",
        "## GHRM",
        "| bm25 | 0.3598* |",
        "Mean over 2 queries.",
        "a note",
        "## Time of each asset",
        "| ghrm_runs | 2 | 1 | 12.5 | 2.0 |",
        "| total | 2 | 1 | 12.5 | 2.0 |",
    ]:
        assert row in lines, row
    assert not any(line.startswith("### ") for line in lines)  # the sections are the page's second level


def test_markdown_without_a_path_prints_and_a_missing_folder_is_refused(tmp_path, capsys, monkeypatch):
    from assets.cli.main import build_parser

    parse = build_parser().parse_args
    assert parse(["reproduce", "--collection", "c"]).markdown is None
    assert parse(["reproduce", "--collection", "c", "--markdown"]).markdown == "-"
    assert parse(["reproduce", "--markdown", "out.md", "--collection", "c"]).markdown == "out.md"
    monkeypatch.delenv("DAGSTER_IR_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)  # no ./dagster-ir.yaml: the built-in default, wiki-car
    assert (
        main(
            [
                "--data",
                str(tmp_path),
                "reproduce",
                "--collection",
                "wiki-car",
                "--markdown",
                str(tmp_path / "no" / "page.md"),
            ]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert "--markdown: the folder of" in err and err.count("\n") == 1


def test_folds_keep_those_units_and_what_they_read_but_no_partition_of_the_collection_alone(setup):
    defs, instance, resources = setup
    owned = collection_partitions_of(defs, instance, "a", {"a/fold-1/seed-0"}, units_only=True)
    assert names(owned) == ["model[a/fold-1/seed-0]"]  # report[a] would pull fold 0 back in
    plan = reproduction_plan(defs, instance, "a", {"a/fold-1/seed-0"}, units_only=True)
    assert names(plan) == ["docs[a]", "model[a/fold-1/seed-0]", "shared"]
    report = update_all(defs, instance, resources=resources, only=plan, log=lambda _: None)
    assert report.ok and instance.get_materialized_partitions(dg.AssetKey("model")) == {"a/fold-1/seed-0"}
    assert {t.step: t.partitions for t in asset_times(instance, plan, since=0.0)} == {
        "shared": 1,
        "docs": 1,
        "model": 1,
    }


def test_units_of_folds_takes_every_seed_and_refuses_what_the_collection_lacks():
    from assets.cli.reproduce import units_of_folds
    from dagster_ir.collections.protocol import TrainingUnit

    units = [TrainingUnit("c", "cv", fold, 3, seed) for fold in range(3) for seed in (0, 1)]
    units += [TrainingUnit("fixed", "fixed", None, 1, 0), TrainingUnit("d", "cv", 0, 3, 0)]
    assert units_of_folds("c", [0, 2], units) == {
        "c/fold-0/seed-0",
        "c/fold-0/seed-1",
        "c/fold-2/seed-0",
        "c/fold-2/seed-1",
    }
    with pytest.raises(ValueError, match=r"--folds: collection 'c' has folds \[0, 1, 2\], not \[3, 7\]"):
        units_of_folds("c", [3, 1, 7], units)
    with pytest.raises(ValueError, match="--folds: collection 'fixed' has no rotations"):
        units_of_folds("fixed", [0], units)


def test_the_page_of_some_folds_says_so_and_has_no_tables():
    from assets.cli.main import build_parser
    from assets.cli.reproduce import StepTime, markdown_page

    assert build_parser().parse_args(["reproduce", "--collection", "c", "--folds", "0", "2"]).folds == [0, 2]
    assert build_parser().parse_args(["reproduce", "--collection", "c"]).folds is None
    summary = {"title": "t", "sections": [{"title": "GHRM", "notes": "", "tables": []}]}
    page = markdown_page(
        "cranfield",
        summary,
        [StepTime("cross_encoder", ("cross_encoder",), 1, 60.0, 60.0, 1)],
        [("seeds", "0")],
        commit="abc1234",
        on="a CPU",
        folds=[0],
    )
    lines = page.splitlines()
    assert lines[0] == "# Time per asset: cranfield, fold 0"
    assert "dagster-ir reproduce --collection cranfield --folds 0 --markdown PATH" in lines[2]
    assert "| folds run | 0 |" in lines and "| cross_encoder | 1 | 1 | 60.0 | 60.0 |" in lines
    assert "## GHRM" not in lines and any(line.startswith("Only the training units of fold 0 ") for line in lines)


def test_folds_of_a_collection_without_rotations_are_refused_before_any_work(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DAGSTER_IR_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)  # the built-in default: wiki-car, a fixed split
    assert main(["--data", str(tmp_path / "data"), "reproduce", "--collection", "wiki-car", "--folds", "0"]) == 1
    assert "--folds: collection 'wiki-car' has no rotations" in capsys.readouterr().err
    assert not (tmp_path / "data" / "files").exists() and not (tmp_path / "data" / "dagster_home").exists()


def test_assets_keep_their_partitions_and_what_they_read_and_an_unknown_name_is_refused(setup):
    from assets.cli.reproduce import check_assets

    defs, instance, resources = setup
    owned = collection_partitions_of(defs, instance, "a", set(UNIT_KEYS["a"]), assets=["model"])
    assert names(owned) == ["model[a/fold-0/seed-0]", "model[a/fold-1/seed-0]"]
    plan = reproduction_plan(defs, instance, "a", set(UNIT_KEYS["a"]), assets=["model"])
    assert names(plan) == [
        "docs[a]",
        "model[a/fold-0/seed-0]",
        "model[a/fold-1/seed-0]",
        "shared",
    ]  # no report, no table
    report = update_all(defs, instance, resources=resources, only=plan, log=lambda _: None)
    assert report.ok and instance.get_materialized_partitions(dg.AssetKey("report")) == set()
    both = collection_partitions_of(defs, instance, "a", {"a/fold-1/seed-0"}, units_only=True, assets=["model"])
    assert names(both) == ["model[a/fold-1/seed-0]"]  # with --folds: those units of those assets
    with pytest.raises(
        ValueError,
        match=r"--assets: 'docs' is not an asset with partitions of collection 'a' in "
        r"these folds \(have model\)",
    ):
        collection_partitions_of(defs, instance, "a", {"a/fold-1/seed-0"}, units_only=True, assets=["docs"])
    with pytest.raises(
        ValueError,
        match=r"--assets: 'shared', 'modle' are not among the partitioned assets "
        r"\(docs, model, report, table\)",
    ):
        check_assets(defs, ["model", "shared", "modle"])


def test_an_unknown_asset_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DAGSTER_IR_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["--data", str(tmp_path / "data"), "reproduce", "--collection", "wiki-car", "--assets", "ghrm"]) == 1
    assert "--assets: 'ghrm' is not among the partitioned assets (" in capsys.readouterr().err
    assert not (tmp_path / "data" / "files").exists() and not (tmp_path / "data" / "dagster_home").exists()


def _ranked(name: str, queries: list[str], relevant_first: bool):
    import polars as pl

    rows = [
        (q, f"{q}-{d}", 2.0 - i, i + 1, name)
        for q in queries
        for i, d in enumerate(["r", "n"] if relevant_first else ["n", "r"])
    ]
    return pl.DataFrame(rows, schema=["query_id", "doc_id", "score", "rank", "run_name"], orient="row").cast(
        {"rank": pl.Int32}
    )


def test_the_partial_report_has_the_sections_of_the_runs_made_and_leaves_the_full_one_alone(tmp_path, monkeypatch):
    import polars as pl

    from assets.cli.reproduce import partial_report, summary_path
    from dagster_ir.evaluation.summary import read_summary
    from dagster_ir.storage.parquet import table_path, write_table

    monkeypatch.delenv("DAGSTER_IR_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)  # the built-in default: wiki-car, its unit wiki-car/seed-0
    queries = [f"q{i}" for i in range(6)]
    tables = {
        ("candidate_runs", "wiki-car"): _ranked("bm25", queries, relevant_first=False),
        ("qrels", "wiki-car"): pl.DataFrame(
            {"query_id": queries, "doc_id": [f"{q}-r" for q in queries], "relevance": [1] * 6}
        ).cast({"relevance": pl.Int32}),
        ("query_splits", "wiki-car"): pl.DataFrame({"query_id": queries, "split": ["test"] * 6, "fold": [0] * 6}).cast(
            {"fold": pl.Int32}
        ),
        ("neural_baselines", "wiki-car/seed-0"): _ranked("drmm", queries, relevant_first=True).with_columns(
            seed=pl.lit(0, dtype=pl.Int64)
        ),
    }
    for (name, partition), frame in tables.items():
        write_table(frame, table_path(tmp_path, [name], partition), partition=partition)
    plan = {(dg.AssetKey(name), partition) for name, partition in tables} | {(dg.AssetKey("shared"), None)}
    written = partial_report(tmp_path, "wiki-car", plan)
    assert (
        written == summary_path(tmp_path, "wiki-car", partial=True) and not summary_path(tmp_path, "wiki-car").exists()
    )
    sections = {s["title"]: s["tables"][0] for s in read_summary(written)["sections"]}
    title = "Neural ranking baselines of BM25's top-k, k = 2"  # the depth drmm reranks, in the heading
    assert sorted(sections) == [title]  # one first-stage run: no table of its own
    table = sections[title]
    rows = {label: dict(zip(table["header"][1:], cells)) for label, cells in table["rows"]}
    assert rows["bm25 (baseline)"]["nDCG@10"] == "0.6309" and rows["drmm"]["nDCG@10"] == "1.0000*†"  # 1/log2(3); 1
    from dagster_ir.retrieval.trec import read_qrels, read_run

    drmm = read_run(written.parent / "runs" / "drmm.seed-0.run")  # the runs evaluated, as TREC files
    assert drmm.filter(pl.col("rank") == 1)["doc_id"].to_list() == [f"{q}-r" for q in queries]
    assert read_run(written.parent / "runs" / "bm25.run")["run_name"].unique().to_list() == ["bm25"]
    assert read_qrels(written.parent / "qrels.txt").height == 6
    no_runs = {key for key in plan if key[0].to_user_string() != "neural_baselines"}
    assert partial_report(tmp_path, "wiki-car", no_runs) is None  # the first stage alone: nothing of the methods


def test_the_page_of_some_assets_names_them_and_has_their_tables():
    from assets.cli.main import build_parser
    from assets.cli.reproduce import StepTime, markdown_page

    args = build_parser().parse_args(["reproduce", "--collection", "c", "--assets", "ghrm_runs", "neural_baselines"])
    assert args.assets == ["ghrm_runs", "neural_baselines"] and args.folds is None
    summary = {"title": "t", "sections": [{"title": "GHRM", "notes": "", "tables": []}]}
    page = markdown_page(
        "cranfield",
        summary,
        [StepTime("ghrm_runs", ("ghrm_runs",), 1, 60.0, 60.0, 1)],
        [("seeds", "0")],
        commit="abc1234",
        on="a CPU",
        assets=["ghrm_runs", "neural_baselines"],
    )
    lines = page.splitlines()
    assert lines[0] == "# Results: cranfield, ghrm_runs, neural_baselines"
    assert "dagster-ir reproduce --collection cranfield --assets ghrm_runs neural_baselines --markdown PATH" in lines[2]
    assert "| assets run | `ghrm_runs`, `neural_baselines` |" in lines and "## GHRM" in lines
    empty = markdown_page("cranfield", None, [], [], commit="abc1234", on="a CPU", assets=["word2vec"])
    assert "No tables: no runs of the methods report among the assets run." in empty
