"""`dagster-ir reproduce --collection NAME`: every method on one collection, its tables, and the time.

1. The asset partitions of the collection are every materializable asset partition whose key is
   the collection, one of its training units, or a multi-partition key with one of those as a
   dimension; `staleness.needed_by` adds what they read (the unpartitioned and dump-partitioned
   assets, e.g. PHP's pre-training on the Wikipedia links), following the partition mappings.
2. `updates.update_all(only=...)` materializes those that are missing or stale, and nothing of
   any other collection; the assets run with their default config (the `demo` profiles).
3. The tables are read from what the methods report stored (`tables.json` beside its report, see
   `dagster_ir.evaluation.summary`), section by section, so a method added to the report appears
   here without a change; the time of each asset is the duration of the Dagster step that last
   materialized each of its partitions, summed over the partitions (a multi-asset step once).
   With `--folds N ...` only the training units of those rotations (every seed) and what they
   read are made, nothing keyed by the collection alone, and no tables are printed: a fold's time.
4. With `--markdown PATH` the same tables and times are written as a Markdown page (`markdown_page`)
   whose header gives the date, the commit of the code, the machine and the collection's settings:
   the documentation's results pages are such files.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import polars as pl

from assets.lib.project import training_units
from assets.lib.staleness import Key, needed_by
from dagster_ir.evaluation import write_report
from dagster_ir.evaluation.summary import SUMMARY_FILE, format_summary, write_summary
from dagster_ir.provenance import commit_of, machine
from dagster_ir.storage.parquet import scan_tables, table_path

REPORT_ASSET = "model_report"


def collection_partitions_of(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    collection: str,
    units: set[str] | None = None,
    *,
    units_only: bool = False,
    assets: Sequence[str] | None = None,
) -> list[Key]:
    """Every materializable asset partition that belongs to `collection` (see the module docstring).

    `units` are the collection's training unit keys (default: the configured ones). `units_only`
    keeps the partitions of those units alone, leaving out the ones keyed by the collection (a
    report over every fold would pull the other folds back in): `reproduce --folds`. `assets`
    keeps the partitions of those assets alone (`reproduce --assets`); a name that is not an asset
    with partitions of the collection is refused, naming `--assets` and the ones it has.
    """
    if units is None:
        units = {key for key, unit in training_units().items() if unit.collection == collection}
    graph = defs.resolve_asset_graph()
    owned = []
    for key in graph.materializable_asset_keys:
        partitions_def = graph.get(key).partitions_def
        if partitions_def is None:
            continue
        for partition in partitions_def.get_partition_keys(dynamic_partitions_store=instance):
            dimensions = (
                partition.keys_by_dimension.values() if isinstance(partition, dg.MultiPartitionKey) else [partition]
            )
            if any((d == collection and not units_only) or d in units for d in dimensions):
                owned.append((key, partition))
    if assets is None:
        return owned
    have = sorted({key.to_user_string() for key, _ in owned})
    unknown = [name for name in assets if name not in have]
    if unknown:
        raise ValueError(
            f"--assets: {', '.join(map(repr, unknown))} "
            f"{'is not an asset' if len(unknown) == 1 else 'are not assets'} with partitions of "
            f"collection {collection!r}{' in these folds' if units_only else ''} (have {', '.join(have)})"
        )
    return [(key, partition) for key, partition in owned if key.to_user_string() in assets]


def check_assets(defs: dg.Definitions, names: Sequence[str]) -> None:
    """Refuse, naming `--assets` and the choices, a name that is no partitioned asset of `defs`."""
    graph = defs.resolve_asset_graph()
    have = sorted(key.to_user_string() for key in graph.materializable_asset_keys if graph.get(key).partitions_def)
    unknown = [name for name in names if name not in have]
    if unknown:
        raise ValueError(
            f"--assets: {', '.join(map(repr, unknown))} {'is' if len(unknown) == 1 else 'are'} not "
            f"among the partitioned assets ({', '.join(have)})"
        )


def reproduction_plan(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    collection: str,
    units: set[str] | None = None,
    *,
    units_only: bool = False,
    assets: Sequence[str] | None = None,
) -> set[Key]:
    """The collection's asset partitions (of `assets` only, when given) and everything they read."""
    return needed_by(
        defs,
        instance,
        collection_partitions_of(defs, instance, collection, units, units_only=units_only, assets=assets),
    )


def units_of_folds(collection: str, folds: list[int], units: list | None = None) -> set[str]:
    """The training unit keys of `collection` in rotations `folds` (every seed): `reproduce --folds`.

    `units`: the `TrainingUnit`s to choose from (default: the configured ones). Refused, naming
    `--folds`, for a collection without rotations or a fold it does not have.
    """
    units = [unit for unit in (training_units().values() if units is None else units) if unit.collection == collection]
    rotations = sorted({unit.fold for unit in units if unit.fold is not None})
    if not rotations:
        raise ValueError(f"--folds: collection {collection!r} has no rotations (its protocol is not `cv`)")
    missing = sorted(set(folds) - set(rotations))
    if missing:
        raise ValueError(f"--folds: collection {collection!r} has folds {rotations}, not {missing}")
    return {unit.key for unit in units if unit.fold in folds}


@dataclass(frozen=True)
class StepTime:
    """The time of one asset (one step: a multi-asset's outputs together) over its partitions."""

    step: str
    assets: tuple[str, ...]
    partitions: int
    seconds: float  # summed over the partitions' latest materializations
    fresh_seconds: float  # of those, the part materialized since the command started
    fresh: int  # partitions materialized since the command started


def asset_times(instance: dg.DagsterInstance, plan: set[Key], since: float) -> list[StepTime]:
    """Per step, the duration of the run steps that last materialized the partitions of `plan`.

    Partitions never materialized are left out; `since` (a Unix time) tells what this command made.
    """
    step_stats: dict[str, dict[str, tuple[float, float]]] = {}
    steps: dict[str, dict] = {}
    for key, partition in sorted(plan, key=lambda kp: (kp[0].to_user_string(), kp[1] or "")):
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition] if partition is not None else None),
            limit=1,
        ).records
        if not records:
            continue
        entry = records[0].event_log_entry
        if entry.run_id not in step_stats:
            step_stats[entry.run_id] = {
                s.step_key: (s.start_time or 0.0, s.end_time or 0.0) for s in instance.get_run_step_stats(entry.run_id)
            }
        start, end = step_stats[entry.run_id].get(entry.step_key or "", (0.0, 0.0))
        step = (entry.step_key or key.to_user_string()).split("[")[0]
        row = steps.setdefault(step, {"assets": set(), "runs": {}, "first": entry.timestamp})
        row["assets"].add(key.to_user_string())
        row["runs"][(entry.run_id, entry.step_key)] = (max(end - start, 0.0), entry.timestamp >= since)
        row["first"] = min(row["first"], entry.timestamp)
    times = []
    for step, row in sorted(steps.items(), key=lambda item: item[1]["first"]):
        durations = row["runs"].values()
        times.append(
            StepTime(
                step,
                tuple(sorted(row["assets"])),
                len(row["runs"]),
                sum(d for d, _ in durations),
                sum(d for d, new in durations if new),
                sum(1 for _, new in durations if new),
            )
        )
    return times


def format_times(times: list[StepTime], *, markdown: bool = False) -> str:
    """A table: step (its assets), runs of it, seconds in all and the part this command made."""
    header = ("asset (step)", "partitions", "made now", "seconds", "of which now")
    rows = [
        (
            t.step if t.assets == (t.step,) else f"{t.step} ({', '.join(t.assets)})",
            str(t.partitions),
            str(t.fresh),
            f"{t.seconds:.1f}",
            f"{t.fresh_seconds:.1f}",
        )
        for t in times
    ]
    rows.append(
        (
            "total",
            str(sum(t.partitions for t in times)),
            str(sum(t.fresh for t in times)),
            f"{sum(t.seconds for t in times):.1f}",
            f"{sum(t.fresh_seconds for t in times):.1f}",
        )
    )
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    lines = [
        "  ".join([r[0].ljust(widths[0])] + [v.rjust(w) for v, w in zip(r[1:], widths[1:])]) for r in (header, *rows)
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def settings_of(spec, config_file: Path | None) -> list[tuple[str, str]]:
    """The settings that decide a collection's tables: config file, kind, protocol, folds, seeds, asset settings."""
    protocol = spec.protocol
    rows = [
        ("config", f"`{config_file}`" if config_file else "the built-in default (wiki-car)"),
        ("collection", f"`{spec.name}` (kind `{spec.kind}`)"),
        ("protocol", f"`{protocol.kind}`" + (f", {spec.split.folds} folds rotated" if protocol.kind == "cv" else "")),
        ("seeds", ", ".join(map(str, protocol.seeds))),
        ("profiles", "each asset's default config (the `demo` profiles)"),
    ]
    for asset, fields in sorted(spec.assets.items()):
        rows.append((f"`{asset}`", ", ".join(f"{k}: {v}" for k, v in fields.items())))
    return rows


def markdown_page(
    collection: str,
    summary: dict | None,
    times: list[StepTime],
    settings: list[tuple[str, str]],
    *,
    when: datetime.datetime | None = None,
    commit: str | None = None,
    on: str | None = None,
    folds: list[int] | None = None,
    assets: Sequence[str] | None = None,
) -> str:
    """`dagster-ir reproduce --markdown PATH`'s page: a header (date, commit, machine, settings), the tables, the times.

    `folds`: the page of `reproduce --folds`: no tables (they need every fold), the times of those folds.
    `assets`: the page of `reproduce --assets`: the tables of those assets' runs (`partial_report`).
    """

    when = when or datetime.datetime.now(datetime.UTC)
    header = [
        ("date", when.strftime("%Y-%m-%d %H:%M UTC")),
        ("commit", commit or commit_of()),
        ("machine", on or machine()),
        *settings,
    ]
    command = f"dagster-ir reproduce --collection {collection} --markdown PATH"
    folds_run = None if folds is None else f"fold{'s' if len(folds) > 1 else ''} {', '.join(map(str, folds))}"
    if folds is not None:
        command = command.replace(" --markdown", f" --folds {' '.join(map(str, folds))} --markdown")
        header.append(("folds run", ", ".join(map(str, folds))))
    if assets is not None:
        command = command.replace(" --markdown", f" --assets {' '.join(assets)} --markdown")
        header.append(("assets run", ", ".join(f"`{name}`" for name in assets)))
    rows = ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in header]
    title = f"# Results: {collection}" if folds is None else f"# Time per asset: {collection}, {folds_run}"
    if assets is not None and folds is None:
        title += f", {', '.join(assets)}"
    parts = [
        title,
        f"Written by `{command}` (with the same `DAGSTER_IR_CONFIG`); run it again to bring this page up to date.",
        "\n".join(["| setting | value |", "|---|---|", *rows]),
    ]
    if folds is not None:
        parts.append(
            f"Only the training units of {folds_run} were made, with what they read: the tables need "
            "every fold, so this page has none. An asset trained once per unit takes about its time here times the folds over the folds run; an "
            "asset keyed by the collection alone (one step over every fold, such as `ghrm_runs` or the "
            "reports) is not in this table."
        )
    elif summary is None:
        parts.append(
            "No tables: no runs of the methods report among the assets run."
            if assets is not None
            else "No methods report yet: an asset it needs failed (see the command's output)."
        )
    else:
        if assets is not None:
            parts.append(
                "Only these assets and what they read were made: the tables are the methods report's "
                "sections of their runs, with the reference rows that were made."
            )
        parts.append(format_summary(summary, markdown=True, level=2).rstrip("\n"))
    parts += [
        "## Time of each asset",
        "The duration of the Dagster step that last materialized each partition, summed over the partitions; "
        "`made now`: by the call that wrote this page.",
        format_times(times, markdown=True),
    ]
    return "\n\n".join(parts) + "\n"


def summary_path(root: Path, collection: str, *, partial: bool = False) -> Path:
    """Where the methods report of `collection` keeps its tables (`dagster_ir.evaluation.summary`);
    `partial`: the report of `reproduce --assets` (`partial_report`), beside it."""

    return root / "files" / "reports" / collection / ("partial" if partial else "methods") / SUMMARY_FILE


# What the methods report reads besides the run assets (`model_report`'s inputs; word2vec only names the vectors)
REPORT_CONTEXT = ("candidate_runs", "qrels", "query_splits")
REPORTED_RUNS = ("reranked_runs", "fusion_runs", "ghrm_runs", "cet_runs", "neural_baselines")


def partial_report(
    root: Path, collection: str, plan: set[Key], instance: dg.DagsterInstance | None = None
) -> Path | None:
    """`reproduce --assets`: the methods report's sections of the run assets in `plan` and their runs as
    TREC files, written beside the full report (`summary_path(partial=True)`; the full one is left as
    it is); None when `plan` holds none of them.

    Each asset's stored tables over the plan's partitions are what `model_report` would read from
    them (every unit of the collection when every unit was made), so a section here equals the full
    report's when its runs are whole; a section whose reference rows (`bert`, say) were not made
    shows the rows that were. With `instance`, the rows of trained runs say which weights each unit
    kept (what the assets recorded, `KEPT_WEIGHTS`).
    """
    from assets.defs.evaluation import ReportSettings  # dagster: not loaded by --help
    from assets.defs.model_report import (  # dagster: not loaded by --help
        TRAINED_UNIT_ASSETS,
        kept_of,
        methods_book,
        write_run_files,
    )
    from assets.lib.metadata import recorded_kept  # dagster: not loaded by --help

    partitions: dict[str, list[str | None]] = {}
    for key, partition in sorted(plan, key=lambda kp: (kp[0].to_user_string(), kp[1] or "")):
        partitions.setdefault(key.to_user_string(), []).append(partition)

    def read(name: str):
        parts = [p for p in partitions.get(name, []) if p is None or p == collection or p.startswith(f"{collection}/")]
        if not parts:
            return None
        paths = [table_path(root, name.split("/"), p) for p in parts]
        return scan_tables(paths, keep_partition=len(parts) > 1).collect()

    runs = {name: frame for name in ("candidate_runs", *REPORTED_RUNS) if (frame := read(name)) is not None}
    if not set(runs) & set(REPORTED_RUNS) or any(name not in partitions for name in REPORT_CONTEXT):
        return None
    qrels, query_splits = (read(name) for name in REPORT_CONTEXT[1:])
    word2vec = read("word2vec")
    book, _, evaluated = methods_book(
        collection,
        ReportSettings(),
        runs,
        qrels,
        query_splits,
        pl.DataFrame() if word2vec is None else word2vec,
        ghrm_sweeps=read("ghrm_sweeps"),
        cet=read("cet"),
        kept=kept_of(
            read("cross_encoder"),
            read("cet"),
            None
            if instance is None
            else recorded_kept(
                instance,
                [
                    (name, partition)
                    for name in ("ghrm_runs", *TRAINED_UNIT_ASSETS)
                    for partition in partitions.get(name, [])
                    if partition is None or partition == collection or partition.startswith(f"{collection}/")
                ],
            ),
        ),
    )
    written = summary_path(root, collection, partial=True)
    write_report(book, written.parent)
    write_summary(book, written.parent)
    write_run_files(evaluated, qrels, written.parent)
    return written
