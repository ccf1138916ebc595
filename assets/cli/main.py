"""`dagster-ir`: the command line of the pipeline.

    dagster-ir demo [--first-stage] register the bundled dump, bring the assets up to date, summarise
    dagster-ir update [--first-stage] [--profile demo|paper]
                                    bring the assets up to date (materializes only stale/missing ones);
                                    --first-stage leaves out the method groups (php, model1, ghrm, cet);
                                    --profile: every method asset's profile, for this and later runs
    dagster-ir add-dump PATH        check a Wikipedia dump file and register it as a new `wiki_dump` partition
    dagster-ir remove-dump KEY      unregister a dump: its partitions and their tables go
    dagster-ir status [--why]       list stale or missing asset partitions (--why: what changed for each)
    dagster-ir catalog sync         fold pending records into the DuckDB catalog
    dagster-ir catalog query [--format table|csv|json|markdown] SQL
                                    run a read-only query on the catalog and print every row
    dagster-ir lineage ASSET [--partition P] [--depth N] [--config]
                                    print the upstream tree of an asset's newest record, down to the dump
    dagster-ir report [--collection NAME] [report options]
                                    print a collection's evaluation table and methods report (or
                                    evaluate TREC files)
    dagster-ir reproduce --collection NAME [--folds FOLD ...] [--assets ASSET ...] [--markdown [PATH]]
                         [--profile demo|paper]
                                    bring every method on one collection up to date (its partitions, all
                                    its training units, what they read), print each paper's table and
                                    the time each asset took; --markdown prints the tables as Markdown,
                                    --markdown PATH also writes them as a page headed by the date, the
                                    commit, the machine and the settings (the docs' results pages);
                                    --assets makes only those assets and what they read, and prints
                                    their sections of the tables

`--profile` replaces the collections' `profile:` (and fills the PHP pre-training's); a profile in a
collection's `assets:` settings or a run's own config still wins. Assets made under another profile
are stale and materialized again; the runs carry the profile in their `dagster_ir/profile` tag.
The data directory is `--data DIR`, else $DAGSTER_IR_DATA, else ./data. Runs are recorded in the
Dagster instance at $DAGSTER_HOME (default <data>/dagster_home), which `make ui` shares.
A bad input ends a command with a one-line error naming the file or field and exit status 1;
`update` goes on past a failing asset partition and exits 1 at the end, listing what failed, one
line per failed partition (`--verbose` adds each failed step's stack trace; the run's log in the
UI always has it).
"""

from __future__ import annotations

import argparse
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

# Dagster, DuckDB, Polars and the storage modules are imported where a command needs them, so that
# `dagster-ir --help` (and a mistyped command) answers at once.

# The data directory a command typed without --data would use (commands set $DAGSTER_IR_DATA for
# the asset code, so it is read once, here).
_DEFAULT_DATA = data_dir(None)


def _instance(root: Path, log: Callable[[str], None] | None = None) -> dg.DagsterInstance:
    from assets.cli.instance import open_instance  # dagster: not loaded by --help

    # a persistent local instance: no telemetry, the training pool's limit, the runs of dead processes
    # released (reported to `log`); see assets.cli.instance
    return open_instance(os.environ.get("DAGSTER_HOME") or root / "dagster_home", log)


PROFILE_CHOICES = ("demo", "paper")  # dagster_ir.collections.config.PROFILE_NAMES (not imported: the CLI starts fast)
PROFILE_HELP = (
    "every method asset's profile (replaces the collections' `profile:`; an asset's own settings "
    "still win); assets made under another profile are materialized again"
)


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
    print(
        f"\n{report.materialized} asset partitions materialized in {len(report.runs)} runs, "
        f"{report.fresh} were already up to date; {format_seconds(took)}"
    )
    if report.done_elsewhere:
        print(f"{len(report.done_elsewhere)} found materialized by another run meanwhile")
    if not report.ok:
        print(
            f"\n{len(report.failures)} runs FAILED; {len(report.skipped)} asset partitions downstream of them "
            "were skipped:",
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
    if reported:
        lines.append(f"Reports:         dagster-ir{data} report --collection {reported[0]}")
    lines.append("Dagster UI:      make ui   (then open http://127.0.0.1:3000, Assets -> Global asset lineage)")
    return "\n".join(lines)


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
) -> int:
    """`dagster-ir reproduce`: materialize what `collection`'s tables need (stale only), print them and the times.

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
    print(
        f"\n{collection}: {report.materialized} asset partitions materialized, {report.fresh} up to date, "
        f"{time.monotonic() - started:.0f} s\n"
    )
    partial = assets is not None and REPORT_ASSET not in assets
    tables = summary_path(root, collection)
    if partial:  # the sections of the runs made now (none after a failure: their tables may be missing)
        written = partial_report(root, collection, plan) if report.ok and folds is None else None
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
    return 0 if report.ok and (folds is not None or partial or tables.with_name("report.txt").exists()) else 1


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # transformers' load report lists the fresh score head of every cross-encoder as MISSING: expected here
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # and a progress bar per checkpoint loaded or written
    command_at = _command_position(argv)
    if command_at is not None and argv[command_at] == "report":  # the rest belongs to the report's parser
        root = data_dir(_option(argv[:command_at], "--data"))
        return cmd_report(root, argv[command_at + 1 :])
    args = build_parser().parse_args(argv)
    _quiet_warnings()

    root = data_dir(args.data)
    root.mkdir(parents=True, exist_ok=True)
    name = args.command + (f" {args.catalog_command}" if args.command == "catalog" else "")
    try:
        return _run(args, root)
    except PermissionError as error:  # a read-only data directory: what could not be written, on one line
        print(f"dagster-ir {name}: cannot write {error.filename or root}: permission denied", file=sys.stderr)
        return 1
    except _input_errors() as error:
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        print(f"dagster-ir {name}: {message}", file=sys.stderr)
        return 1


VERBOSE_HELP = "print each failed step's stack trace too (it is always in the run's log in the UI)"


def _examples(*lines: str) -> str:
    return "example" + ("s" if len(lines) > 1 else "") + ":\n" + "\n".join(f"  {line}" for line in lines)


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser: every subcommand with its help and an example (imports nothing heavy)."""
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="dagster-ir",
        description=__doc__.split("\n\n")[0],
        formatter_class=formatter,
        epilog=_examples(
            "dagster-ir demo",
            "dagster-ir status --why",
            "dagster-ir report --collection cranfield",
            'dagster-ir catalog query --format csv "select asset_key, rows from materializations"',
        ),
    )
    parser.add_argument("--data", help=f"data directory (default: ${DATA_DIR_ENV} or ./data)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, text: str, *examples: str) -> argparse.ArgumentParser:
        return sub.add_parser(
            name,
            help=text,
            description=text[0].upper() + text[1:] + ".",
            epilog=_examples(*examples),
            formatter_class=formatter,
        )

    for name, text, example in [
        (
            "demo",
            "register the bundled dump, bring the assets up to date and summarise",
            "dagster-ir demo --first-stage",
        ),
        (
            "update",
            "materialize every stale or missing asset partition (and nothing else)",
            "dagster-ir --data /scratch/ir update --parallel 4",
        ),
    ]:
        run = command(name, text, example)
        run.add_argument(
            "--first-stage",
            action="store_true",
            help="leave out the method groups (php, model1, ghrm, cet): stop at the first-stage report",
        )
        run.add_argument(
            "--parallel",
            type=int,
            default=min(4, os.cpu_count() or 1),
            help="dump partitions parsed at once, each in its own process (default: cores, at most 4)",
        )
        run.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)
        if name == "update":
            run.add_argument("--profile", choices=PROFILE_CHOICES, help=PROFILE_HELP)
    status = command("status", "list the stale or missing asset partitions", "dagster-ir status --why")
    status.add_argument(
        "--why",
        action="store_true",
        help="say for each what changed: the upstream partition with new data, the code, a lost file",
    )
    reproduce = command(
        "reproduce",
        "every method on one collection: materialize, print the tables and times",
        "dagster-ir reproduce --collection cranfield --markdown",
    )
    reproduce.add_argument("--collection", required=True, help="a collection of the config ($DAGSTER_IR_CONFIG)")
    reproduce.add_argument(
        "--markdown",
        nargs="?",
        const="-",
        metavar="PATH",
        help="print the tables as Markdown; with PATH also write them there as a page headed by "
        "the date, the commit, the machine and the settings",
    )
    reproduce.add_argument(
        "--folds",
        type=int,
        nargs="+",
        metavar="FOLD",
        help="only the training units of these rotations (every seed) and what they read: "
        "times one fold, or builds a reproduction a fold at a time; prints no tables",
    )
    reproduce.add_argument(
        "--assets",
        nargs="+",
        metavar="ASSET",
        help="only these assets' partitions of the collection and what they read (e.g. "
        "ghrm_runs neural_baselines for GHRM's table); the tables show their runs only",
    )
    reproduce.add_argument("--profile", choices=PROFILE_CHOICES, help=PROFILE_HELP)
    reproduce.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)
    command(
        "report",
        "print a collection's evaluation and methods tables (options: `dagster-ir report --help`)",
        "dagster-ir report --collection wiki-car --measures nDCG@10",
    )
    add = command(
        "add-dump",
        "check and register a Wikipedia dump (.xml or .xml.bz2) as a new partition",
        "dagster-ir add-dump enwiki-latest-pages-articles-multistream.xml.bz2 --partitions 8",
    )
    add.add_argument("path")
    add.add_argument(
        "--partitions",
        type=int,
        default=int(os.environ.get("DAGSTER_IR_DUMP_PARTITIONS", "1")),
        help="a multistream dump (with its index) as up to N partitions of whole streams "
        "(default $DAGSTER_IR_DUMP_PARTITIONS or 1)",
    )
    drop = command(
        "remove-dump",
        "unregister a dump (its partitions and their tables go)",
        "dagster-ir remove-dump enwiki-latest-pages-articles-multistream.xml.bz2",
    )
    drop.add_argument("key", help="the dump's partition key (its file name)")
    catalog = command(
        "catalog",
        "the DuckDB catalog of every materialization",
        'dagster-ir catalog query "select asset_key, partition, rows from materializations"',
    )
    catalog_sub = catalog.add_subparsers(dest="catalog_command", required=True, metavar="SUBCOMMAND")
    catalog_sub.add_parser(
        "sync",
        help="fold pending records into DuckDB",
        description="Fold pending records into DuckDB.",
        epilog=_examples("dagster-ir catalog sync"),
        formatter_class=formatter,
    )
    query = catalog_sub.add_parser(
        "query",
        help="run a read-only SQL query on the catalog and print every row",
        description="Run a read-only SQL query on the catalog and print every row, in full.",
        formatter_class=formatter,
        epilog=_examples(
            'dagster-ir catalog query "select * from wiki_link_graph limit 5"',
            'dagster-ir catalog query --format markdown "select run_name, measure, avg(value) '
            'from evaluation_report group by all"',
        ),
    )
    query.add_argument("sql")
    query.add_argument(
        "--format",
        choices=["table", "csv", "json", "markdown"],
        default="table",
        help="aligned text (default), CSV, a JSON array of rows, or a Markdown table",
    )
    lineage = command(
        "lineage",
        "print the upstream tree of an asset's newest record, down to the dump",
        "dagster-ir lineage model_report --partition wiki-car --depth 2",
    )
    lineage.add_argument("asset")
    lineage.add_argument("--partition", help="one partition (default: each partition's newest record)")
    lineage.add_argument("--depth", type=int, help="levels shown below the asset (default: all, down to the dump)")
    lineage.add_argument("--config", action="store_true", help="show each record's config (null fields left out)")
    return parser


def _quiet_warnings() -> None:
    """Dagster's beta/preview notices off (nothing a user can act on); every other warning once, on
    one line, without site-packages paths (assets.cli.progress)."""
    import dagster as dg  # dagster: not loaded by --help

    for category in (dg.BetaWarning, dg.PreviewWarning):
        warnings.filterwarnings("ignore", category=category)
    install_warning_printer()


def _run(args: argparse.Namespace, root: Path) -> int:
    from dagster_ir.storage.catalog import Catalog  # polars, DuckDB: not loaded by --help

    if args.command in ("demo", "update"):
        return cmd_update(
            root,
            demo=args.command == "demo",
            first_stage=args.first_stage,
            parallel=args.parallel,
            profile=getattr(args, "profile", None),
            verbose=args.verbose,
        )
    if args.command == "status":
        return cmd_status_why(root) if args.why else cmd_status(root)
    if args.command == "reproduce":
        return cmd_reproduce(
            root,
            args.collection,
            markdown=args.markdown,
            profile=args.profile,
            verbose=args.verbose,
            folds=args.folds,
            assets=args.assets,
        )
    if args.command == "add-dump":
        print("\n".join(add_dump_partitions(root, args.path, _instance(root), args.partitions)))
        return 0
    if args.command == "remove-dump":
        instance = _instance(root)
        for key in DumpRegistry(root).parts_of(args.key) or [args.key]:  # a file name: all of its parts
            for folder in remove_dump(root, key, instance):
                print(f"removed {folder}")
        print(f"unregistered {args.key}; `dagster-ir update` rebuilds what read it")
        return 0
    cat = Catalog(root)
    if args.command == "lineage":
        from dagster_ir.storage.lineage import render  # polars, DuckDB: not loaded by --help

        print(
            render(
                cat.lineage(args.asset, args.partition),
                note=lambda node: _dump_file(node, root),
                depth=args.depth,
                config=args.config,
            )
        )
        return 0
    if args.catalog_command == "sync":
        ok = cat.sync()
        rejected = cat.rejected()
        if rejected:
            print(f"{len(rejected)} journal records could not be folded; see {cat.rejected_dir}", file=sys.stderr)
        print("synced" if ok else f"catalog busy; {len(cat.pending())} records still pending")
        return 0 if ok else 1
    code = cmd_query(cat, args.sql, args.format)
    if cat.pending():  # a read never folds the journal (it writes nothing)
        print(
            f"note: {len(cat.pending())} records are not in the catalog yet; `dagster-ir catalog sync` folds them",
            file=sys.stderr,
        )
    return code


def _dump_file(node, root: Path) -> str | None:
    """`file=<dump path>` for a `wiki_dump` record (its table holds the file it registered)."""
    import polars as pl  # polars, DuckDB: not loaded by --help

    table = root / node.path if node.path else None  # catalog paths are relative to the data directory
    if node.asset != "wiki_dump" or table is None or not table.exists():
        return None
    paths = pl.read_parquet(table, columns=["path"])["path"]
    return f"file={root / paths[0]}" if len(paths) else None  # a dump under the data directory is stored relative


def _input_errors() -> tuple[type[BaseException], ...]:
    """Errors that are the user's input, not a bug: printed on one line, exit status 1."""
    import duckdb  # polars, DuckDB: not loaded by --help

    from dagster_ir.collections import CollectionConfigError  # polars, DuckDB: not loaded by --help
    from dagster_ir.storage.catalog import CatalogBusyError, CatalogQueryError  # polars, DuckDB: not loaded by --help
    from dagster_ir.wiki.dump import DumpError  # polars, DuckDB: not loaded by --help

    return (
        DumpError,
        CollectionConfigError,
        CatalogQueryError,
        CatalogBusyError,
        FileNotFoundError,
        KeyError,
        ValueError,
        duckdb.Error,
    )


def _command_position(argv: list[str]) -> int | None:
    """Index of the command word: the first argument that is not a global option or its value."""
    i = 0
    while i < len(argv):
        if argv[i] == "--data":
            i += 2
        elif argv[i].startswith("--data="):
            i += 1
        elif argv[i].startswith("-"):
            return None  # --help and the like: argparse answers
        else:
            return i
    return None


def _option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv and argv.index(name) + 1 < len(argv) else None


if __name__ == "__main__":
    sys.exit(main())
