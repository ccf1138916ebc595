"""`dagster-ir reproduce --export DIR` and `--import DIR`: a results bundle (`dagster_ir.evaluation.bundle`)
from a data directory, and the methods report from bundles with no training.

Export reads the run assets a data directory holds for a collection (the first-stage runs and every
reranker's), scores them as the methods report does (a reranker's top k completed below by the
candidates it reranked, measures on the report's split) and writes one unit folder per asset and
training unit (fold, seed) it finds in the rows. Each manifest records the code versions of the asset
and of every asset it reads (from the definitions) and `settings_hash`: a hash of the collection's
settings that shape the results (its kind, protocol kind, split, the profile named for every asset,
and the `assets:` overrides of those assets). Seeds are left out of the hash, so adding a seed to the
config leaves the units of the others current.

Import reads one or more bundles, keeps the units whose code versions and settings hash equal the
current ones (the rest are listed as stale, never mixed in), leaves out every run that lacks a
unit of its collection's configured folds and seeds (listed as incomplete, never averaged over what
exists), and builds the methods report's sections from the per-query values.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import dagster as dg
import polars as pl

from assets.defs.evaluation import ReportSettings
from assets.defs.model_report import SECTIONS, _sections, candidate_depths, evaluated_runs, kept_of, kept_weights
from assets.lib.metadata import KEPT_COLUMNS, recorded_kept
from assets.lib.project import collection_specs, training_units
from dagster_ir.collections.config import units_of
from dagster_ir.evaluation.bundle import (
    WHOLE,
    BundleUnit,
    Expected,
    UnitRecord,
    config_hash,
    merged_per_query,
    missing_units,
    read_bundle,
    sort_units,
    unit_name,
    write_unit,
)
from dagster_ir.evaluation.report import ReportBook
from dagster_ir.evaluation.seeds import average_seeds, seed_spread
from dagster_ir.provenance import commit_of, machine
from dagster_ir.schemas import RUN
from dagster_ir.storage.dumps import DumpRegistry, dump_identity
from dagster_ir.storage.parquet import scan_tables, table_path

KEPT_ROW = {k: v for k, v in KEPT_COLUMNS.items() if k != "unit"}  # a unit's `UnitRecord.kept` row
RUN_ASSETS = ("candidate_runs", "reranked_runs", "fusion_runs", "ghrm_runs", "cet_runs", "neural_baselines")


def lineage_code_versions(defs: dg.Definitions, asset: str) -> dict[str, str]:
    """The code version of `asset` and of every asset upstream of it, by name (source assets left out)."""
    graph = defs.resolve_asset_graph()
    seen: dict[str, str] = {}
    todo = [dg.AssetKey(asset.split("/"))]
    while todo:
        key = todo.pop()
        name = key.to_user_string()
        if name in seen or not graph.has(key):
            continue
        node = graph.get(key)
        if not node.is_materializable:
            continue
        seen[name] = node.code_version or ""
        todo.extend(node.parent_keys)
    return dict(sorted(seen.items()))


def settings_hash(spec, assets: Sequence[str], profile: str | None) -> str:
    """`config_hash` of what in `spec` (a collection spec) shapes the results of `assets` (see the module docstring)."""
    settings = {
        "kind": spec.kind,
        "protocol": spec.protocol.kind,
        "split": asdict(spec.split),
        "profile": profile or spec.profile,
        "assets": {name: spec.assets[name] for name in sorted(assets) if name in spec.assets},
    }
    return config_hash(settings)


def expected(defs: dg.Definitions, spec, assets: Sequence[str], profile: str | None) -> dict[str, Expected]:
    """Per asset, the code versions and settings hash a unit made now would record."""
    out = {}
    for asset in assets:
        versions = lineage_code_versions(defs, asset)
        out[asset] = Expected(versions, settings_hash(spec, list(versions), profile))
    return out


def wanted_units(spec) -> list[str]:
    """The unit names a complete row of a trained run holds: every configured (fold, seed)."""

    return [unit_name(u.fold, u.seed) for u in units_of(spec)]


def _step_seconds(instance: dg.DagsterInstance | None, asset: str, partition: str) -> float | None:
    if instance is None:
        return None
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset.split("/")), asset_partitions=[partition]), limit=1
    ).records
    if not records:
        return None
    entry = records[0].event_log_entry
    for stats in instance.get_run_step_stats(entry.run_id):
        if stats.step_key == entry.step_key and stats.start_time and stats.end_time:
            return round(stats.end_time - stats.start_time, 1)
    return None


# Per run asset, where the weights of its rows record what their training kept: manifest tables, and
# the trained assets' `KEPT_WEIGHTS` metadata (ghrm_runs' rows name "fold f, seed s" as their unit).
KEPT_MANIFESTS = {"reranked_runs": "cross_encoder", "cet_runs": "cet"}
KEPT_RECORDED = {
    "ghrm_runs": ("ghrm_runs",),
    "neural_baselines": ("neural_baselines",),
    "fusion_runs": ("neural_model1", "bert_model1", "bert_vanilla"),
}


def _kept_rows(
    root: Path, instance: dg.DagsterInstance | None, asset: str, partition: str, fold: int | None, seed: int | None
) -> list[dict]:
    """Which weights each trained run of one unit kept (run_name, chosen_epoch, start_score, dev_score)."""
    frames = []
    manifest = KEPT_MANIFESTS.get(asset)
    if manifest is not None and (path := table_path(root, [manifest], partition)).exists():
        frames.append(scan_tables([path], keep_partition=False).collect())
    if instance is not None and asset in KEPT_RECORDED:
        recorded = recorded_kept(instance, [(name, partition) for name in KEPT_RECORDED[asset]])
        if asset == "ghrm_runs":
            recorded = recorded.filter(pl.col("unit") == f"fold {fold}, seed {seed}")
        frames.append(recorded)
    return kept_of(*frames).drop("unit").to_dicts()


@dataclass(frozen=True)
class Export:
    """What `export_bundle` wrote: the unit folders, and the assets it found nothing of."""

    folders: list[Path]
    absent: list[str]


def export_bundle(
    root: Path,
    collection: str,
    defs: dg.Definitions,
    out: Path,
    *,
    profile: str | None = None,
    instance: dg.DagsterInstance | None = None,
) -> Export:
    """Write every unit of `collection`'s run assets that the data directory `root` holds into the bundle `out`."""

    spec = collection_specs()[collection]

    def read(name: str, unit_level: bool) -> pl.DataFrame | None:
        if unit_level:
            keys = [k for k, u in training_units().items() if u.collection == collection]
            paths = [table_path(root, name.split("/"), k) for k in keys]
            paths = [p for p in paths if p.exists()]
            return scan_tables(paths, keep_partition=len(paths) > 1).collect() if paths else None
        path = table_path(root, name.split("/"), collection)
        return scan_tables([path], keep_partition=False).collect() if path.exists() else None

    graph = defs.resolve_asset_graph()

    def unit_level(name: str) -> bool:
        partitions = graph.get(dg.AssetKey(name)).partitions_def
        keys = partitions.get_partition_keys() if partitions is not None else []
        return any(k.startswith(f"{collection}/") for k in keys)

    inputs = {name: frame for name in RUN_ASSETS if (frame := read(name, unit_level(name))) is not None}
    context = {name: read(name, unit_level(name)) for name in ("qrels", "query_splits", "cet")}
    if "candidate_runs" not in inputs or context["qrels"] is None or context["query_splits"] is None:
        raise FileNotFoundError(
            f"--export: {root} holds no candidate_runs, qrels or query_splits of {collection!r}: "
            "make them first (`dagster-ir reproduce --collection ...`)"
        )
    _, per_seed, _ = evaluated_runs(
        collection, ReportSettings(), inputs, context["qrels"], context["query_splits"], context["cet"]
    )
    commit, where = commit_of(), machine()
    dumps = DumpRegistry(root).entries()
    dump = {name: dump_identity(Path(path)) for name, path in dumps.items() if Path(path).is_file()} or None
    created = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    wanted = expected(defs, spec, list(inputs), profile)
    folders = []
    for name, frame in inputs.items():
        has_units = "seed" in frame.columns and frame["seed"].null_count() < frame.height
        if not has_units:
            frame = frame.with_columns(fold=pl.lit(None, pl.Int32), seed=pl.lit(None, pl.Int64))
        elif "fold" not in frame.columns:
            frame = frame.with_columns(fold=pl.lit(None, pl.Int32))
        for (fold, seed), rows in frame.partition_by("fold", "seed", as_dict=True, maintain_order=True).items():
            names = rows["run_name"].unique(maintain_order=True).to_list()
            queries = rows["query_id"].unique()
            values = per_seed.filter(
                pl.col("run_name").is_in(names)
                & pl.col("query_id").is_in(queries.implode())
                & (pl.col("seed").is_null() if seed is None else pl.col("seed") == seed)
            )
            if values.height == 0:
                continue
            partition = (
                f"{collection}/{unit_name(fold, seed).replace('-seed', '/seed')}"
                if unit_level(name) and seed is not None
                else collection
            )
            record = UnitRecord(
                collection=collection,
                asset=name,
                unit=unit_name(fold, seed),
                fold=fold,
                seed=seed,
                commit=commit,
                code_versions=wanted[name].code_versions,
                config_hash=wanted[name].config_hash,
                profile=profile or spec.profile,
                dump=dump,
                machine=where,
                partition=partition,
                seconds=_step_seconds(instance, name, partition),
                runs=names,
                created=created,
                depths=candidate_depths({name: rows}) if name != "candidate_runs" else {},
                kept=_kept_rows(root, instance, name, partition, fold, seed),
            )
            run = rows.select(list(RUN)) if name != "candidate_runs" else None
            folders.append(write_unit(out, record, values, run))
    return Export(folders, [name for name in RUN_ASSETS if name not in inputs])


@dataclass(frozen=True)
class Imported:
    """What `import_bundles` made of the bundles: the report, and what it left out and why."""

    book: object  # a ReportBook
    current: list[BundleUnit]
    stale: list[tuple[BundleUnit, str]]
    incomplete: dict[str, list[str]]  # run -> the units it lacks
    units: dict[str, str]  # run -> "5 folds x 1 seed"


def import_bundles(
    roots: Sequence[Path], collection: str, defs: dg.Definitions, *, profile: str | None = None
) -> Imported:
    """The methods report of `collection` from the bundles `roots` (see the module docstring)."""

    spec = collection_specs()[collection]
    units = [unit for root in roots for unit in read_bundle(Path(root), collection)]
    assets = sorted({u.record.asset for u in units})
    current, stale = sort_units(units, expected(defs, spec, assets, profile))
    every = wanted_units(spec)
    wanted = {u.record.asset: [WHOLE] if u.record.unit == WHOLE else every for u in current}
    incomplete = missing_units(current, wanted)
    seeded = merged_per_query(current, leave_out=incomplete)
    per_query, spread = average_seeds(seeded), seed_spread(seeded)
    inputs: dict[str, pl.DataFrame] = {}
    depths: dict[str, int] = {}
    held: dict[str, set[tuple]] = {}
    for unit in current:
        given = unit.record.runs or unit.per_query["run_name"].unique(maintain_order=True).to_list()
        names = [n for n in given if n not in incomplete]
        before = inputs.get(unit.record.asset, pl.DataFrame(schema={"run_name": pl.String}))
        inputs[unit.record.asset] = pl.concat(
            [before, pl.DataFrame({"run_name": names}, schema={"run_name": pl.String})]
        ).unique(maintain_order=True)
        depths.update(unit.record.depths)
        for name in names:
            held.setdefault(name, set()).add((unit.record.fold, unit.record.seed))
    settings = ReportSettings()
    measures = list(dict.fromkeys([*settings.measures, *(m for s in SECTIONS for m in s.measures)]))
    per_query = per_query.filter(pl.col("measure").is_in(measures))
    kept = kept_of(pl.DataFrame([row for u in current for row in u.record.kept], schema=KEPT_ROW))
    sections = _sections(
        per_query, inputs, settings.significance(), None, spread, depths=depths, kept=kept_weights(kept)
    )
    title = f"{collection}: the methods report from {len(current)} exported units"
    book = ReportBook.of(title, sections, [])
    said = {}
    for name, pairs in held.items():
        folds = len({f for f, _ in pairs if f is not None})
        seeds = len({s for _, s in pairs if s is not None})
        said[name] = (
            "one run of the collection"
            if not seeds
            else f"{folds} fold{'s' * (folds != 1)} x {seeds} seed{'s' * (seeds != 1)}"
            if folds
            else f"{seeds} seed{'s' * (seeds != 1)}"
        )
    return Imported(book, current, stale, incomplete, said)


def import_notes(imported: Imported) -> str:
    """What an import left out and what each row holds, as lines to print under the tables."""
    lines = []
    if imported.units:
        rows = ", ".join(f"{name} {held}" for name, held in sorted(imported.units.items()))
        lines.append(f"Units per row: {rows}.")
    for name, lacking in sorted(imported.incomplete.items()):
        lines.append(f"incomplete, left out: {name} lacks units {', '.join(lacking)}")
    for unit, why in imported.stale:
        lines.append(f"stale, left out: {unit.record.asset}/{unit.record.unit} ({unit.record.commit}): {why}")
    return "\n".join(lines)
