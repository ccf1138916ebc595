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
                         [--export DIR | --import DIR ...]
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
import errno
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from assets.cli.commands import (
    INTERRUPTED,
    _instance,
    _quiet_warnings,
    add_dump_partitions,
    cmd_query,
    cmd_report,
    cmd_reproduce,
    cmd_status,
    cmd_status_why,
    cmd_update,
    remove_dump,
)
from dagster_ir.settings import DATA_DIR_ENV, data_dir
from dagster_ir.storage.dumps import DumpRegistry

if TYPE_CHECKING:
    pass

# Dagster, DuckDB, Polars and the storage modules are imported where a command needs them, so that
# `dagster-ir --help` (and a mistyped command) answers at once.


PROFILE_CHOICES = ("demo", "paper")  # dagster_ir.collections.config.PROFILE_NAMES (not imported: the CLI starts fast)
PROFILE_HELP = (
    "every method asset's profile (replaces the collections' `profile:`; an asset's own settings "
    "still win); assets made under another profile are materialized again"
)


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
    except KeyboardInterrupt:  # Ctrl-C outside a run (a run's interrupt is in its report): one line
        print(f"\ndagster-ir {name}: interrupted", file=sys.stderr)
        return INTERRUPTED
    except _input_errors() as error:
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        print(f"dagster-ir {name}: {message}", file=sys.stderr)
        return 1
    except OSError as error:  # a read-only data directory: what could not be written, on one line
        if error.errno not in _READ_ONLY:
            raise
        why = "read-only file system" if error.errno == errno.EROFS else "permission denied"
        print(f"dagster-ir {name}: cannot write {error.filename or root}: {why}{_READS_ONLY}", file=sys.stderr)
        return 1


_READ_ONLY = (errno.EACCES, errno.EPERM, errno.EROFS)
# What works on a data directory this process cannot write (`status` records its observations of the
# source files in the Dagster instance under the directory, so it needs to write there).
_READS_ONLY = " (on a read-only data directory: `catalog query`, `lineage` and `report` work)"

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
    reproduce.add_argument(
        "--export",
        metavar="DIR",
        help="then write every finished unit of the collection's runs to the results bundle DIR "
        "(per-query measures, the reranked top k, a manifest; small enough to commit)",
    )
    reproduce.add_argument(
        "--import",
        dest="import_dirs",
        nargs="+",
        metavar="DIR",
        help="train nothing: the tables from these results bundles, units of older code or other "
        "settings left out as stale, rows missing a unit left out as incomplete",
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
            export=args.export,
            imports=args.import_dirs,
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
