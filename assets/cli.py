"""`dagster-ir`: the command line of the pipeline.

    dagster-ir demo [--first-stage] register the bundled dump, bring the assets up to date, summarise
    dagster-ir update [--first-stage]
                                    bring the assets up to date (materializes only stale/missing ones);
                                    --first-stage leaves out the method groups (php, model1, ghrm, cet)
    dagster-ir add-dump PATH        check a Wikipedia dump file and register it as a new `wiki_dump` partition
    dagster-ir remove-dump KEY      unregister a dump: its partitions and their tables go
    dagster-ir status               list stale or missing asset partitions
    dagster-ir catalog sync         fold pending records into the DuckDB catalog
    dagster-ir catalog query SQL    run a query on the catalog and print the result
    dagster-ir lineage ASSET [--partition P]
                                    print the upstream tree of an asset's newest record, down to the dump
    dagster-ir report [--collection NAME] [report options]
                                    print the evaluation table of a collection (or of TREC files)
    dagster-ir reproduce --collection NAME [--markdown]
                                    bring every method on one collection up to date (its partitions, all
                                    its training units, what they read), print each paper's table and
                                    the time each asset took

The data directory is `--data DIR`, else $DAGSTER_IR_DATA, else ./data. Runs are recorded in the
Dagster instance at $DAGSTER_HOME (default <data>/dagster_home), which `make ui` shares.
A bad input ends a command with a one-line error naming the file or field and exit status 1;
`update` goes on past a failing asset partition and exits 1 at the end, listing what failed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import dagster as dg

from dagster_ir.settings import DATA_DIR_ENV, data_dir
from dagster_ir.storage.catalog import Catalog
from dagster_ir.storage.dumps import DumpRegistry, sample_dump_path


def _instance(root: Path, log: Callable[[str], None] | None = None) -> dg.DagsterInstance:
    from assets.instance import open_instance

    # a persistent local instance: no telemetry, the training pool's limit, the runs of dead processes
    # released (reported to `log`); see assets.instance
    return open_instance(os.environ.get("DAGSTER_HOME") or root / "dagster_home", log)


def _defs_and_resources(root: Path):
    os.environ[DATA_DIR_ENV] = str(root)
    from assets.definitions import defs, resources

    return defs, resources(str(root))


def add_dump(root: Path, path: str, instance: dg.DagsterInstance) -> str:
    """Check a dump file, register it and add its partition to the instance; returns the partition key."""
    from assets.partitions import wiki_dump_partitions
    from dagster_ir.wiki.dump import check_dump

    check_dump(Path(path).expanduser())
    key = DumpRegistry(root).add(path)
    if not instance.has_dynamic_partition(wiki_dump_partitions.name, key):
        instance.add_dynamic_partitions(wiki_dump_partitions.name, [key])
    return key


def add_dump_partitions(root: Path, path: str, instance: dg.DagsterInstance, partitions: int) -> list[str]:
    """Check a dump and register it as up to `partitions` byte ranges of whole bz2 streams (a
    multistream dump; any other dump is one partition); returns the partition keys."""
    from assets.partitions import wiki_dump_partitions
    from dagster_ir.wiki.dump import check_dump, split_ranges

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
    from urllib.parse import quote

    from assets.definitions import defs
    from assets.partitions import wiki_dump_partitions
    from dagster_ir.storage.atomic import remove
    from dagster_ir.storage.locks import partition_lock_path, remove_lock
    from dagster_ir.storage.parquet import table_path

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


def prepare_update(root: Path, log: Callable[[str], None] = print) -> dg.DagsterInstance:
    """The instance, with what killed runs left behind cleared (the start of `update` and `reproduce`).

    Runs whose process is gone are marked failed and their pool slots and queue entries freed;
    temporary files of dead writers are removed.
    """
    from dagster_ir.storage.atomic import clean_orphans

    instance = _instance(root, log)
    for leftover in clean_orphans(root):
        log(f"removed {leftover} (left by a killed run)")
    return instance


def sync_catalog(root: Path, rejected_before: set[Path]) -> bool:
    """Fold the journal into the catalog; say on stderr which records were rejected since
    `rejected_before` was taken, and when the catalog is busy. Whether it synced."""
    catalog = Catalog(root)
    synced = catalog.sync()
    rejected = [path for path in catalog.rejected() if path not in rejected_before]
    if rejected:
        print(f"catalog: {len(rejected)} journal records could not be folded ({', '.join(p.name for p in rejected[:3])}"
              f"{', ...' if len(rejected) > 3 else ''}); moved to {catalog.rejected_dir}, each with its reason beside it",
              file=sys.stderr)
    if not synced:
        print(f"catalog: not synced ({catalog.last_sync_error}); {len(catalog.pending())} records still pending, "
              "`dagster-ir catalog sync` folds them", file=sys.stderr)
    return synced


def cmd_update(root: Path, *, demo: bool, first_stage: bool = False, parallel: int = 1) -> int:
    from assets.updates import update_all

    instance = prepare_update(root)
    rejected_before = set(Catalog(root).rejected())
    if demo or not DumpRegistry(root).entries():
        key = add_dump(root, str(sample_dump_path()), instance)
        print(f"dump: {key} (gensim's bundled enwiki sample)")
    defs, resources = _defs_and_resources(root)
    started = time.monotonic()
    from assets.definitions import DEMO_SELECTION, FIRST_STAGE_SELECTION

    report = update_all(defs, instance, resources=resources,
                        selection=FIRST_STAGE_SELECTION if first_stage else DEMO_SELECTION, parallel=parallel,
                        command="demo" if demo else "update")
    sync_catalog(root, rejected_before)
    took = time.monotonic() - started
    print(f"\n{report.materialized} asset partitions materialized in {report.runs.__len__()} runs, "
          f"{report.fresh} up to date, {took:.0f} s")
    if report.done_elsewhere:
        print(f"{len(report.done_elsewhere)} found materialized by another run meanwhile")
    if not report.ok:
        print(f"\n{len(report.failures)} runs FAILED; {len(report.skipped)} asset partitions downstream of them "
              "were skipped:", file=sys.stderr)
        for partition, keys, message in report.failures:
            print(f"  {', '.join(keys)}" + (f" [{partition}]" if partition else "") + f": {message}", file=sys.stderr)
        return 1
    if demo:
        _summary(root)
    return 0


def _summary(root: Path) -> None:
    catalog = Catalog(root)
    latest = catalog.query(
        "select asset_key, coalesce(partition, '') as partition, rows, path from materializations "
        "qualify row_number() over (partition by asset_key, partition order by materialized_at desc) = 1 "
        "order by asset_key, partition"
    )
    print("\nResults (latest materialization of each asset):")
    for row in latest.iter_rows(named=True):
        print(f"  {row['asset_key']:<22} {row['partition'][:40]:<40} {row['rows']:>9} rows  {row['path']}")
    print(f"\nData directory:  {root}")
    print(f"Catalog:         cd {root} && duckdb catalog.duckdb \"select * from wiki_link_graph limit 5\"")
    print("Dagster UI:      make ui   (then open http://127.0.0.1:3000, Assets -> Global asset lineage)")


def cmd_status(root: Path) -> int:
    from assets.updates import stale_partitions

    defs, resources = _defs_and_resources(root)
    stale = stale_partitions(defs, _instance(root), resources=resources)
    for key, partition in sorted(stale, key=lambda kp: (kp[0].to_user_string(), kp[1] or "")):
        print(f"{key.to_user_string()}" + (f" [{partition}]" if partition else ""))
    print(f"{len(stale)} asset partitions stale or missing")
    return 0


def cmd_report(root: Path, argv: list[str]) -> int:
    """`dagster-ir report`: the evaluation report's table in the terminal.

    `--collection NAME` (default wiki-car) reads the per-query values of the `evaluation_report`
    asset; every other option is `dagster_ir.evaluation.cli`'s (baseline, measures, correction, or
    `--qrels FILE --run NAME=FILE ...` to evaluate TREC files directly).
    """
    from dagster_ir.evaluation.cli import main_report
    from dagster_ir.storage.parquet import table_path

    collection = "wiki-car"
    if "--collection" in argv:
        i = argv.index("--collection")
        collection, argv = argv[i + 1], argv[:i] + argv[i + 2 :]
    if "--qrels" not in argv and "--per-query" not in argv:
        per_query = table_path(root, ["evaluation_report"], collection)
        if not per_query.exists():
            print(f"dagster-ir report: no evaluation_report for {collection!r} yet ({per_query}); run `dagster-ir update`",
                  file=sys.stderr)
            return 1
        argv = ["--per-query", str(per_query), *argv]
    if "--baseline" not in argv:
        argv = [*argv, "--baseline", "bm25"]
    return main_report(argv)


def cmd_reproduce(root: Path, collection: str, *, markdown: bool = False) -> int:
    """`dagster-ir reproduce`: materialize what `collection`'s tables need (stale only), print them and the times."""
    from assets.project import collection_specs
    from assets.reproduce import asset_times, format_times, reproduction_plan, summary_path
    from assets.updates import update_all
    from dagster_ir.evaluation.summary import format_summary, read_summary

    if collection not in collection_specs():
        raise ValueError(f"--collection: {collection!r} is not a configured collection (have {sorted(collection_specs())}; "
                         "set DAGSTER_IR_CONFIG)")
    instance = prepare_update(root)
    rejected_before = set(Catalog(root).rejected())
    if not DumpRegistry(root).entries():  # PHP pre-trains on Wikipedia links, whatever the collection
        print(f"dump: {add_dump(root, str(sample_dump_path()), instance)} (gensim's bundled enwiki sample)")
    defs, resources = _defs_and_resources(root)
    plan = reproduction_plan(defs, instance, collection)
    started_at, started = time.time(), time.monotonic()
    report = update_all(defs, instance, resources=resources, only=plan,
                        selection=dg.AssetSelection.assets(*{key for key, _ in plan}))
    sync_catalog(root, rejected_before)
    print(f"\n{collection}: {report.materialized} asset partitions materialized, {report.fresh} up to date, "
          f"{time.monotonic() - started:.0f} s\n")
    tables = summary_path(root, collection)
    if tables.exists():
        print(format_summary(read_summary(tables), markdown=markdown))
    elif tables.with_name("report.txt").exists():  # a report made before it stored its tables
        print(tables.with_name("report.txt").read_text(encoding="utf-8"))
    else:
        print(f"no methods report for {collection!r} yet ({tables})", file=sys.stderr)
    print(format_times(asset_times(instance, plan, started_at)))
    for partition, keys, message in report.failures:
        print(f"FAILED {', '.join(keys)}" + (f" [{partition}]" if partition else "") + f": {message}", file=sys.stderr)
    return 0 if report.ok and tables.with_name("report.txt").exists() else 1


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Dagster warns about its own beta and preview features at every definition load; nothing a user can act on
    for category in (dg.BetaWarning, dg.PreviewWarning):
        warnings.filterwarnings("ignore", category=category)
    # transformers' load report lists the fresh score head of every cross-encoder as MISSING: expected here
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # and a progress bar per checkpoint loaded or written
    command_at = _command_position(argv)
    if command_at is not None and argv[command_at] == "report":  # the rest belongs to the report's parser
        root = data_dir(_option(argv[:command_at], "--data"))
        return cmd_report(root, argv[command_at + 1 :])
    parser = argparse.ArgumentParser(prog="dagster-ir", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help=f"data directory (default: ${DATA_DIR_ENV} or ./data)")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in [("demo", "register the bundled dump and bring the assets up to date"),
                       ("update", "materialize every stale or missing asset partition")]:
        command = sub.add_parser(name, help=text)
        command.add_argument("--first-stage", action="store_true",
                             help="leave out the method groups (php, model1, ghrm, cet): stop at the first-stage report")
        command.add_argument("--parallel", type=int, default=min(4, os.cpu_count() or 1),
                             help="dump partitions parsed at once, each in its own process (default: cores, at most 4)")
    sub.add_parser("status", help="list stale or missing asset partitions")
    reproduce = sub.add_parser("reproduce", help="every method on one collection: materialize, print the tables and times")
    reproduce.add_argument("--collection", required=True, help="a collection of the config ($DAGSTER_IR_CONFIG)")
    reproduce.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    sub.add_parser("report", help="print the evaluation table (see `dagster-ir report --help`)")
    add = sub.add_parser("add-dump", help="check and register a Wikipedia dump (.xml or .xml.bz2)")
    add.add_argument("path")
    add.add_argument("--partitions", type=int, default=int(os.environ.get("DAGSTER_IR_DUMP_PARTITIONS", "1")),
                     help="a multistream dump (with its index) as up to N partitions of whole streams "
                          "(default $DAGSTER_IR_DUMP_PARTITIONS or 1)")
    drop = sub.add_parser("remove-dump", help="unregister a dump (its partitions and their tables go)")
    drop.add_argument("key", help="the dump's partition key (its file name)")
    catalog = sub.add_parser("catalog", help="the DuckDB catalog")
    catalog_sub = catalog.add_subparsers(dest="catalog_command", required=True)
    catalog_sub.add_parser("sync", help="fold pending records into DuckDB")
    query = catalog_sub.add_parser("query", help="run a read-only SQL query on the catalog")
    query.add_argument("sql")
    lineage = sub.add_parser("lineage", help="print the upstream tree of an asset's newest record")
    lineage.add_argument("asset")
    lineage.add_argument("--partition", help="one partition (default: each partition's newest record)")
    args = parser.parse_args(argv)

    root = data_dir(args.data)
    root.mkdir(parents=True, exist_ok=True)
    name = args.command + (f" {args.catalog_command}" if args.command == "catalog" else "")
    try:
        return _run(args, root)
    except _INPUT_ERRORS as error:
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        print(f"dagster-ir {name}: {message}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace, root: Path) -> int:
    if args.command in ("demo", "update"):
        return cmd_update(root, demo=args.command == "demo", first_stage=args.first_stage, parallel=args.parallel)
    if args.command == "status":
        return cmd_status(root)
    if args.command == "reproduce":
        return cmd_reproduce(root, args.collection, markdown=args.markdown)
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
        from dagster_ir.storage.lineage import render

        print(render(cat.lineage(args.asset, args.partition), note=_dump_file))
        return 0
    if args.catalog_command == "sync":
        ok = cat.sync()
        rejected = cat.rejected()
        if rejected:
            print(f"{len(rejected)} journal records could not be folded; see {cat.rejected_dir}", file=sys.stderr)
        print("synced" if ok else f"catalog busy; {len(cat.pending())} records still pending")
        return 0 if ok else 1
    print(cat.query(args.sql))
    return 0


def _dump_file(node) -> str | None:
    """`file=<dump path>` for a `wiki_dump` record (its table holds the file it registered)."""
    import polars as pl

    if node.asset != "wiki_dump" or not node.path or not Path(node.path).exists():
        return None
    paths = pl.read_parquet(node.path, columns=["path"])["path"]
    return f"file={paths[0]}" if len(paths) else None


def _input_errors() -> tuple[type[BaseException], ...]:
    """Errors that are the user's input, not a bug: printed on one line, exit status 1."""
    import duckdb

    from dagster_ir.collections import CollectionConfigError
    from dagster_ir.storage.catalog import CatalogBusyError, CatalogQueryError
    from dagster_ir.wiki.dump import DumpError

    return (DumpError, CollectionConfigError, CatalogQueryError, CatalogBusyError, FileNotFoundError,
            KeyError, ValueError, duckdb.Error)


_INPUT_ERRORS = _input_errors()


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
