"""The work behind each `dagster-ir` subcommand (`cmd_*`) and the dump and instance helpers they share;
`assets.cli.main` parses the command line and calls them."""

from __future__ import annotations

import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from assets.cli.progress import format_seconds, install_warning_printer
from assets.cli.terminal import format_frame, text_table
from dagster_ir.evaluation.cli import _parser, main_report
from dagster_ir.settings import DATA_DIR_ENV, data_dir
from dagster_ir.storage.atomic import clean_orphans, remove, write_text_atomic
from dagster_ir.storage.dumps import DumpRegistry, sample_dump_path
from dagster_ir.storage.locks import partition_lock_path, remove_lock

if TYPE_CHECKING:
    import dagster as dg


# The data directory a command typed without --data would use (commands set $DAGSTER_IR_DATA for
# the asset code, so it is read once, here).
_DEFAULT_DATA = data_dir(None)
INTERRUPTED = 130  # the exit status of a command stopped by Ctrl-C (128 + SIGINT), as a shell reports it


def _instance(root: Path, log: Callable[[str], None] | None = None) -> dg.DagsterInstance:
    from assets.cli.instance import open_instance  # dagster: not loaded by --help

    # a persistent local instance: no telemetry, the training pool's limit, the runs of dead processes
    # released (reported to `log`); see assets.cli.instance
    return open_instance(os.environ.get("DAGSTER_HOME") or root / "dagster_home", log)


def _defs_and_resources(root: Path):
    os.environ[DATA_DIR_ENV] = str(root)
    from assets.definitions import defs, resources  # reads the collections YAML at import

    return defs, resources(str(root))


def add_dump(root: Path, path: str, instance: dg.DagsterInstance, *, recheck: bool = True) -> str:
    """Check a dump file, register it and add its partition to the instance; returns the partition key.
    `recheck` False: a file already registered under its key is not checked again (the demo's sample at
    every `demo`: the check decompresses the file's tail)."""
    from assets.lib.partitions import wiki_dump_partitions  # reads the collections YAML at import
    from dagster_ir.wiki.dump import check_dump  # polars, DuckDB: not loaded by --help

    resolved = Path(path).expanduser().resolve()
    registry = DumpRegistry(root)
    known = registry.entries().get(resolved.name) == str(resolved)
    if recheck or not known or not instance.has_dynamic_partition(wiki_dump_partitions.name, resolved.name):
        check_dump(Path(path).expanduser())
    key = registry.add(path)
    if not instance.has_dynamic_partition(wiki_dump_partitions.name, key):
        instance.add_dynamic_partitions(wiki_dump_partitions.name, [key])
    return key


def add_dump_partitions(root: Path, path: str, instance: dg.DagsterInstance, partitions: int) -> list[str]:
    """Check a dump and register it as up to `partitions` byte ranges of whole bz2 streams (a
    multistream dump; any other dump is one partition); returns the partition keys."""
    from assets.lib.partitions import wiki_dump_partitions  # reads the collections YAML at import
    from dagster_ir.wiki.dump import check_dump, split_ranges  # polars, DuckDB: not loaded by --help

    check_dump(Path(path).expanduser())
    ranges = split_ranges(Path(path).expanduser(), partitions) if partitions > 1 else [(0, 0)]
    keys = DumpRegistry(root).add_ranges(path, ranges)
    new = [key for key in keys if not instance.has_dynamic_partition(wiki_dump_partitions.name, key)]
    if new:
        instance.add_dynamic_partitions(wiki_dump_partitions.name, new)
    return keys


def remove_dump(root: Path, key: str, instance: dg.DagsterInstance) -> list[Path]:
    """Unregister dump `key`: its dynamic partition, its tables, its extraction parts and the lock
    files of its partitions (those no process holds) go.

    Assets that read it (wiki_links, the wiki-car collection, PHP) become stale: their catalog
    records name a partition that no longer exists, so the next `update` rebuilds them without it.
    """

    from assets.definitions import defs  # reads the collections YAML at import
    from assets.lib.partitions import wiki_dump_partitions  # reads the collections YAML at import
    from dagster_ir.storage.parquet import table_path  # polars, DuckDB: not loaded by --help

    DumpRegistry(root).remove(key)
    if instance.has_dynamic_partition(wiki_dump_partitions.name, key):
        instance.delete_dynamic_partition(wiki_dump_partitions.name, key)
    graph = defs.resolve_asset_graph()
    dump_assets = [k for k in graph.materializable_asset_keys if graph.get(k).partitions_def == wiki_dump_partitions]
    folders = [table_path(root, list(k.path), key).parent for k in dump_assets]
    folders.append(root / "files" / "wiki_extract" / quote(key, safe=""))
    removed = [folder for folder in folders if folder.exists()]
    for folder in removed:
        remove(folder)
    for asset in dump_assets:
        remove_lock(partition_lock_path(root, asset.to_user_string(), key))
    return removed


def use_profile(profile: str | None) -> dict[str, str]:
    """Make `profile` the run-wide profile of this process (None: the collections' own); the run tags that carry it."""
    from assets.lib.settings import PROFILE_ENV, PROFILE_TAG  # dagster: not loaded by --help

    if profile is None:
        os.environ.pop(PROFILE_ENV, None)
        return {}
    os.environ[PROFILE_ENV] = profile
    return {PROFILE_TAG: profile}


def prepare_update(root: Path, log: Callable[[str], None] = print) -> dg.DagsterInstance:
    """The instance, with what killed runs left behind cleared (the start of `update` and `reproduce`).

    Runs whose process is gone are marked failed and their pool slots and queue entries freed;
    temporary files of dead writers are removed.
    """

    instance = _instance(root, log)
    for leftover in clean_orphans(root):
        log(f"removed {leftover} (left by a killed run)")
    return instance


def sync_catalog(root: Path, rejected_before: set[Path]) -> bool:
    """Fold the journal into the catalog; say on stderr which records were rejected since
    `rejected_before` was taken, and when the catalog is busy. Whether it synced."""
    from dagster_ir.storage.catalog import Catalog  # polars, DuckDB: not loaded by --help

    catalog = Catalog(root)
    synced = catalog.sync()
    rejected = [path for path in catalog.rejected() if path not in rejected_before]
    if rejected:
        print(
            f"catalog: {len(rejected)} journal records could not be folded ({', '.join(p.name for p in rejected[:3])}"
            f"{', ...' if len(rejected) > 3 else ''}); moved to {catalog.rejected_dir}, each with its reason beside it",
            file=sys.stderr,
        )
    if not synced:
        print(
            f"catalog: not synced ({catalog.last_sync_error}); {len(catalog.pending())} records still pending, "
            "`dagster-ir catalog sync` folds them",
            file=sys.stderr,
        )
    return synced


def cmd_update(
    root: Path,
    *,
    demo: bool,
    first_stage: bool = False,
    parallel: int = 1,
    profile: str | None = None,
    verbose: bool = False,
) -> int:
    from assets.cli.updates import update_all  # dagster: not loaded by --help
    from dagster_ir.storage.catalog import Catalog  # polars, DuckDB: not loaded by --help

    tags = use_profile(profile)
    instance = prepare_update(root)
    rejected_before = set(Catalog(root).rejected())
    if demo or not DumpRegistry(root).entries():
        key = add_dump(root, str(sample_dump_path()), instance, recheck=False)
        print(f"dump: {key} (gensim's bundled enwiki sample)")
    defs, resources = _defs_and_resources(root)
    started = time.monotonic()
    from assets.definitions import DEMO_SELECTION, FIRST_STAGE_SELECTION  # reads the collections YAML at import

    report = update_all(
        defs,
        instance,
        resources=resources,
        selection=FIRST_STAGE_SELECTION if first_stage else DEMO_SELECTION,
        parallel=parallel,
        command="demo" if demo else "update",
        tags=tags,
        traces=verbose,
    )
    sync_catalog(root, rejected_before)
    took = time.monotonic() - started
    runs = len(report.runs)
    print(f"\n{report.summary()}; {runs} run{'' if runs == 1 else 's'}, {format_seconds(took)}")
    if report.interrupted:
        return INTERRUPTED
    if not report.ok:
        print(
            f"\n{len(report.failures)} run{'' if len(report.failures) == 1 else 's'} FAILED; "
            f"{len(report.skipped)} asset partitions downstream were skipped:",
            file=sys.stderr,
        )
        for partition, keys, message in report.failures:
            print(f"  {', '.join(keys)}" + (f" [{partition}]" if partition else "") + f": {message}", file=sys.stderr)
        return 1
    if demo:
        _summary(root)
    return 0


def _summary(root: Path) -> None:
    from dagster_ir.storage.catalog import Catalog  # polars, DuckDB: not loaded by --help

    print()
    print(
        summary_text(
            root,
            Catalog(root)
            .query(
                "select asset_key, coalesce(partition, '') as partition, rows, path from materializations "
                "qualify row_number() over (partition by asset_key, partition order by materialized_at desc) = 1 "
                "order by asset_key, partition"
            )
            .rows(),
        )
    )


def summary_text(root: Path, latest: list[tuple]) -> str:
    """The demo's closing summary: each asset partition's newest table (aligned, nothing cut), then
    where things are and commands that exist to look further."""

    def short(path: str | None) -> str:
        if not path:
            return ""
        try:
            return str(Path(path).relative_to(root))
        except ValueError:
            return path

    rows = [(asset, partition, n, short(path)) for asset, partition, n, path in latest]
    data = "" if root.resolve() == _DEFAULT_DATA else f" --data {root}"
    # suggested on what this data directory holds: a table it has, a collection with a report
    assets = [asset for asset, *_ in latest]
    table = "wiki_link_graph" if "wiki_link_graph" in assets else (assets[0] if assets else None)
    reported = sorted(
        {partition for asset, partition, *_ in latest if asset in ("evaluation_report", "model_report") and partition}
    )
    lines = [
        f"Results: the newest materialization of each asset partition (paths under {root})",
        text_table(["asset", "partition", "rows", "table"], rows, [False, False, True, False]),
        "",
        f"Data directory:  {root}",
    ]
    if table:
        lines.append(f'Catalog:         dagster-ir{data} catalog query "select * from {table} limit 5"')
    for collection in sorted({p for a, p, *_ in latest if a == "model_report" and p}):
        lines += ["", *methods_outline(root, collection)]
    if reported:
        lines.append(f"Reports:         dagster-ir{data} report --collection {reported[0]}")
    lines.append("Dagster UI:      make ui   (then open http://127.0.0.1:3000, Assets -> Global asset lineage)")
    return "\n".join(lines)


def methods_outline(root: Path, collection: str) -> list[str]:
    """The methods report of `collection` in a few lines: each section's heading (which states the k
    its rows rerank) and, once per trained row, which weights each unit kept; [] without a report."""
    from assets.cli.reproduce import summary_path  # dagster: not loaded by --help
    from assets.defs.model_report import KEPT_PREFIX  # dagster: not loaded by --help
    from dagster_ir.evaluation.summary import read_summary  # polars: not loaded by --help

    path = summary_path(root, collection)
    if not path.exists():
        return []
    sections = read_summary(path)["sections"]
    kept: dict[str, str] = {}
    for section in sections:
        notes = section.get("notes") or ""
        if KEPT_PREFIX in notes:
            for said in notes.split(KEPT_PREFIX, 1)[1].rstrip(".").split("; "):
                kept.setdefault(said.split(":", 1)[0], said)
    lines = [f"Methods report of {collection} ({len(sections)} sections; k: the candidates each row reranks):"]
    lines += [f"  {section['title']}" for section in sections]
    if kept:
        lines.append("Weights kept per trained row, chosen on each unit's validation queries:")
        lines += [f"  {said}" for said in kept.values()]
    return lines


def cmd_status(root: Path) -> int:
    from assets.lib.staleness import stale_partitions  # dagster: not loaded by --help

    defs, resources = _defs_and_resources(root)
    stale = stale_partitions(defs, _instance(root), resources=resources)
    for key, partition in sorted(stale, key=lambda kp: (kp[0].to_user_string(), kp[1] or "")):
        print(f"{key.to_user_string()}" + (f" [{partition}]" if partition else ""))
    print(f"{len(stale)} asset partitions stale or missing")
    return 0


def cmd_status_why(root: Path) -> int:
    """`dagster-ir status --why`: each stale or missing asset partition, and what made it so."""
    from assets.lib.staleness import stale_reasons  # dagster: not loaded by --help

    defs, resources = _defs_and_resources(root)
    found = stale_reasons(defs, _instance(root), resources=resources)
    for (key, partition), status, reasons in found:
        print(f"{key.to_user_string()}" + (f" [{partition}]" if partition else "") + f": {status}")
        shown = reasons[:3]
        for reason in shown:
            print(f"    {reason}")
        if len(reasons) > len(shown):
            print(f"    ... and {len(reasons) - len(shown)} more")
    print(f"{len(found)} asset partitions stale or missing")
    return 0


def cmd_query(catalog, sql: str, fmt: str) -> int:
    """`dagster-ir catalog query`: every row of a read-only query, as a table, CSV, JSON or Markdown."""

    print(format_frame(catalog.query(sql), fmt))
    return 0


def cmd_report(root: Path, argv: list[str]) -> int:
    """`dagster-ir report`: a collection's evaluation table, then its methods report, in the terminal.

    `--collection NAME` (default wiki-car) reads the per-query values of the `evaluation_report`
    asset and the tables of the `model_report` asset (each paper's methods); every other option is
    `dagster_ir.evaluation.cli`'s (baseline, measures, correction, or `--qrels FILE --run NAME=FILE ...`
    to evaluate TREC files directly, which prints no methods report).
    """

    if "-h" in argv or "--help" in argv:
        _parser(collection_default="wiki-car").print_help()
        return 0
    _quiet_warnings()
    from dagster_ir.storage.parquet import table_path  # polars, DuckDB: not loaded by --help

    collection, stored = "wiki-car", "--qrels" not in argv and "--per-query" not in argv
    if "--collection" in argv:
        i = argv.index("--collection")
        if i + 1 >= len(argv):
            print("dagster-ir report: --collection needs a collection name", file=sys.stderr)
            return 1
        collection, argv = argv[i + 1], argv[:i] + argv[i + 2 :]
    if stored:
        per_query = table_path(root, ["evaluation_report"], collection)
        if not per_query.exists():
            print(
                f"dagster-ir report: no evaluation_report for {collection!r} yet ({per_query}); run `dagster-ir update`",
                file=sys.stderr,
            )
            return 1
        argv = ["--per-query", str(per_query), *argv]
    if "--baseline" not in argv:
        argv = [*argv, "--baseline", "bm25"]
    status = main_report(argv)
    if status == 0 and stored:
        print_methods_report(root, collection)
    return status


def print_methods_report(root: Path, collection: str) -> None:
    """The methods report of `collection` (each paper's tables), or a line saying it is not built yet."""
    from assets.cli.reproduce import summary_path  # dagster: not loaded by --help
    from dagster_ir.evaluation.summary import format_summary, read_summary  # polars, DuckDB: not loaded by --help

    tables = summary_path(root, collection)
    print()
    if tables.exists():
        print(format_summary(read_summary(tables)))
    elif tables.with_name("report.txt").exists():  # a report made before it stored its tables
        print(tables.with_name("report.txt").read_text(encoding="utf-8"))
    else:
        print(
            f"(no methods report for {collection!r} yet: `dagster-ir update` builds it, "
            f"`dagster-ir reproduce --collection {collection}` builds only what it needs)"
        )


def cmd_reproduce(
    root: Path,
    collection: str,
    *,
    markdown: str | None = None,
    profile: str | None = None,
    verbose: bool = False,
    folds: list[int] | None = None,
    assets: list[str] | None = None,
    export: str | None = None,
    imports: list[str] | None = None,
) -> int:
    """`dagster-ir reproduce`: materialize what `collection`'s tables need (stale only), print them and the times.

    `export`: then write the collection's finished units to that results bundle (`assets.cli.bundle`).
    `imports`: materialize nothing; print the tables of those bundles' current units (`cmd_import`).

    `markdown`: None prints text tables, "-" Markdown ones; a path also writes `reproduce.markdown_page` there.
    `folds`: only the training units of those rotations and what they read (to time a fold, or
    to build a reproduction a fold at a time); no tables, since they need every fold.
    `assets`: only those assets' partitions of the collection and what they read (one paper's table,
    say); the tables are the methods report's sections of the runs they made (`reproduce.partial_report`).
    """
    import dagster as dg  # dagster: not loaded by --help

    from assets.cli.reproduce import (  # dagster: not loaded by --help
        REPORT_ASSET,
        asset_times,
        check_assets,
        format_times,
        markdown_page,
        partial_report,
        reproduction_plan,
        settings_of,
        summary_path,
        units_of_folds,
    )
    from assets.cli.updates import update_all  # dagster: not loaded by --help
    from assets.lib.project import collection_specs, config_path  # polars, DuckDB: not loaded by --help
    from dagster_ir.evaluation.summary import format_summary, read_summary  # polars, DuckDB: not loaded by --help
    from dagster_ir.storage.catalog import Catalog  # polars, DuckDB: not loaded by --help

    specs = collection_specs()
    if collection not in specs:
        raise ValueError(
            f"--collection: {collection!r} is not a configured collection (have {sorted(specs)}; set DAGSTER_IR_CONFIG)"
        )
    page = None if markdown in (None, "-") else Path(markdown)
    if page is not None and not page.parent.is_dir():
        raise FileNotFoundError(f"--markdown: the folder of {page} does not exist")
    if imports is not None:
        if export is not None or folds is not None or assets is not None:
            raise ValueError("--import trains nothing: it takes no --export, --folds or --assets")
        return cmd_import(root, collection, [Path(d) for d in imports], markdown=markdown, profile=profile)
    units = None if folds is None else units_of_folds(collection, folds)
    defs, resources = _defs_and_resources(root)
    if assets is not None:
        check_assets(defs, assets)  # before any work
    tags = use_profile(profile)
    instance = prepare_update(root)
    rejected_before = set(Catalog(root).rejected())
    if not DumpRegistry(root).entries():  # PHP pre-trains on Wikipedia links, whatever the collection
        print(f"dump: {add_dump(root, str(sample_dump_path()), instance)} (gensim's bundled enwiki sample)")
    plan = reproduction_plan(defs, instance, collection, units, units_only=folds is not None, assets=assets)
    started_at, started = time.time(), time.monotonic()
    report = update_all(
        defs,
        instance,
        resources=resources,
        only=plan,
        selection=dg.AssetSelection.assets(*{key for key, _ in plan}),
        command="reproduce",
        tags=tags,
        traces=verbose,
    )
    sync_catalog(root, rejected_before)
    print(f"\n{collection}: {report.summary()}; {time.monotonic() - started:.0f} s\n")
    if report.interrupted:
        return INTERRUPTED
    partial = assets is not None and REPORT_ASSET not in assets
    tables = summary_path(root, collection)
    if partial:  # the sections of the runs made now (none after a failure: their tables may be missing)
        written = partial_report(root, collection, plan, instance) if report.ok and folds is None else None
        summary = read_summary(written) if written is not None else None
    else:
        summary = read_summary(tables) if tables.exists() and folds is None else None
    if folds is not None:
        print(f"folds {', '.join(map(str, folds))} only (--folds): no tables, they need every fold")
    elif partial and summary is None:
        why = "an asset failed" if not report.ok else "no runs of the methods report among them"
        print(f"--assets {' '.join(assets)}: no tables ({why})")
    elif summary is not None:
        print(format_summary(summary, markdown=markdown is not None))
    elif tables.with_name("report.txt").exists():  # a report made before it stored its tables
        print(tables.with_name("report.txt").read_text(encoding="utf-8"))
    else:
        print(f"no methods report for {collection!r} yet ({tables})", file=sys.stderr)
    times = asset_times(instance, plan, started_at)
    print(format_times(times))
    if page is not None:
        write_text_atomic(
            page,
            markdown_page(
                collection, summary, times, settings_of(specs[collection], config_path()), folds=folds, assets=assets
            ),
        )
        print(f"written {page}")
    for partition, keys, message in report.failures:
        print(f"FAILED {', '.join(keys)}" + (f" [{partition}]" if partition else "") + f": {message}", file=sys.stderr)
    if export is not None:
        from assets.cli.bundle import export_bundle  # dagster: not loaded by --help

        exported = export_bundle(root, collection, defs, Path(export), profile=profile, instance=instance)
        print(
            f"exported {len(exported.folders)} units to {export}"
            + (f" (none of {', '.join(exported.absent)})" if exported.absent else "")
        )
    return 0 if report.ok and (folds is not None or partial or tables.with_name("report.txt").exists()) else 1


def cmd_import(root: Path, collection: str, bundles: list[Path], *, markdown: str | None, profile: str | None) -> int:
    """`dagster-ir reproduce --import DIR ...`: the methods report's tables from results bundles, no training."""
    from assets.cli.bundle import import_bundles, import_notes  # dagster: not loaded by --help
    from assets.lib.project import collection_specs, config_path  # polars, DuckDB: not loaded by --help
    from dagster_ir.evaluation.summary import book_summary, format_summary  # polars: not loaded by --help

    if collection not in collection_specs():
        raise ValueError(
            f"--collection: {collection!r} is not a configured collection "
            f"(have {sorted(collection_specs())}; set DAGSTER_IR_CONFIG)"
        )
    defs, _ = _defs_and_resources(root)
    imported = import_bundles(bundles, collection, defs, profile=profile)
    tables = format_summary(book_summary(imported.book), markdown=markdown is not None)
    notes = import_notes(imported)
    print(tables)
    print(notes)
    if markdown not in (None, "-"):
        commits = sorted({u.record.commit for u in imported.current})
        machines = sorted({u.record.machine for u in imported.current if u.record.machine})
        header = [
            f"# Results: {collection}, from results bundles",
            "",
            f"Written by `dagster-ir reproduce --collection {collection} --import "
            f"{' '.join(map(str, bundles))} --markdown PATH`: no training; each unit was made and exported "
            "by `reproduce --export` at the commit and on the machine below.",
            "",
            "| setting | value |",
            "|---|---|",
            f"| date | {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} |",
            f"| config | `{config_path() or 'the built-in default'}` |",
            f"| units | {len(imported.current)} current, {len(imported.stale)} stale |",
            f"| commits | {', '.join(commits) or '-'} |",
            f"| machines | {'; '.join(machines) or '-'} |",
            "",
            "",
        ]
        write_text_atomic(Path(markdown), "\n".join(header) + tables + "\n" + notes + "\n")
        print(f"written {markdown}")
    return 0 if imported.current else 1


def _quiet_warnings() -> None:
    """Dagster's beta/preview notices off (nothing a user can act on); every other warning once, on
    one line, without site-packages paths (assets.cli.progress)."""
    import dagster as dg  # dagster: not loaded by --help

    for category in (dg.BetaWarning, dg.PreviewWarning):
        warnings.filterwarnings("ignore", category=category)
    install_warning_printer()
