"""A results bundle: what each training unit scored, in files small enough to commit, merged later.

A reproduction that fits in no single run (Cranfield's three seeds take about 11 hours of steps on
2 cores) is grown a unit at a time: every run exports the units it finished, and a report is made
from the units of any number of runs and machines. The layout, one folder per (asset, unit):

    <root>/<collection>/<asset>/<unit>/     unit: fold-<f>-seed-<s>, seed-<s>, or `all` (no unit)
        manifest.json       `UnitRecord`: commit, code versions, config hash, machine, seconds, files
        per_query.tsv.gz    PER_QUERY_EVAL plus `seed`: each run's measures on the unit's test queries
        runs.trec.gz        the unit's reranked top k as TREC lines (absent for a first-stage unit)

`write_unit` writes a folder whole (a temporary folder renamed into place) and gzips without a
timestamp, so exporting the same unit twice gives the same bytes. `read_bundle` checks every file
against the sha256 its manifest records and raises `BundleError` naming the file that differs (a
per-query file edited by hand is caught, not merged). `sort_units` splits the units into those
made by the current code and settings and the stale ones, with the reason; `missing_units` names,
per run, the units a complete row would hold that the bundle lacks, so a report marks the row
incomplete instead of averaging what exists.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import polars as pl

from dagster_ir.schemas import PER_QUERY_EVAL, RUN, validate
from dagster_ir.storage.atomic import atomic_path

MANIFEST_FILE = "manifest.json"
PER_QUERY_FILE = "per_query.tsv.gz"
RUNS_FILE = "runs.trec.gz"
PER_QUERY_SCHEMA = {**PER_QUERY_EVAL, "seed": pl.Int64}
WHOLE = "all"  # the unit name of an asset made once per collection (the first-stage runs)


class BundleError(ValueError):
    """A bundle's file is missing, malformed or differs from its manifest; the message names it."""


@dataclass(frozen=True)
class UnitRecord:
    """One exported unit's manifest: where it came from and what made it."""

    collection: str
    asset: str
    unit: str  # `unit_name(fold, seed)`
    fold: int | None
    seed: int | None
    commit: str
    code_versions: dict[str, str]  # the asset's and every asset it reads (by name)
    config_hash: str  # `config_hash` of the settings that made it
    profile: str | None = None  # "demo" / "paper" when one was named for every asset
    dump: dict | None = None  # the Wikipedia dump pre-training read: file, sha256
    machine: str = ""
    partition: str = ""  # the asset partition that held the unit (its key, or the collection's)
    seconds: float | None = None  # the step time of that partition (of every unit, for a collection's)
    created: str = ""  # UTC time of the export
    runs: list[str] = field(default_factory=list)  # its run names, in the asset's order
    depths: dict[str, int] = field(default_factory=dict)  # reranked run -> candidates reranked (k)
    kept: list[dict] = field(
        default_factory=list
    )  # per trained run: chosen_epoch (0: the start), start_score, dev_score
    files: dict[str, str] = field(default_factory=dict)  # file name -> sha256

    @classmethod
    def from_json(cls, values: dict, where: str) -> UnitRecord:
        names = {f.name for f in fields(cls)}
        missing = [
            n for n in ("collection", "asset", "unit", "commit", "code_versions", "config_hash") if n not in values
        ]
        if missing:
            raise BundleError(f"{where}: the manifest lacks {missing}")
        return cls(**{k: v for k, v in values.items() if k in names})


@dataclass(frozen=True)
class BundleUnit:
    """A unit read back: its manifest, per-query values (PER_QUERY_SCHEMA) and folder."""

    record: UnitRecord
    per_query: pl.DataFrame
    folder: Path


def unit_name(fold: int | None, seed: int | None) -> str:
    """`fold-<f>-seed-<s>`, `seed-<s>` (a fixed split), or `all` (neither)."""
    if seed is None and fold is None:
        return WHOLE
    if fold is None:
        return f"seed-{seed}"
    return f"fold-{fold}-seed-{seed}"


def config_hash(settings: Mapping) -> str:
    """A short sha256 of `settings` as canonical JSON (sorted keys)."""
    text = json.dumps(settings, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _gzip(data: bytes) -> bytes:
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as handle:  # no timestamp: the same bytes each time
        handle.write(data)
    return buffer.getvalue()


def _per_query_bytes(per_query: pl.DataFrame) -> bytes:
    frame = per_query.select(list(PER_QUERY_SCHEMA)).cast(PER_QUERY_SCHEMA)  # type: ignore[arg-type]
    frame = frame.sort("run_name", "seed", "query_id", "measure", nulls_last=True)
    return frame.write_csv(separator="\t").encode()


def _run_bytes(run: pl.DataFrame) -> bytes:
    ordered = run.sort("run_name", "query_id", "rank")
    lines = ordered.select(
        pl.concat_str(
            [
                pl.col("query_id"),
                pl.lit("Q0"),
                pl.col("doc_id"),
                pl.col("rank").cast(pl.String),
                pl.col("score").cast(pl.String),
                pl.col("run_name"),
            ],
            separator=" ",
        )
    ).to_series()
    return ("\n".join(lines.to_list()) + "\n").encode() if len(lines) else b""


def write_unit(root: Path, record: UnitRecord, per_query: pl.DataFrame, run: pl.DataFrame | None = None) -> Path:
    """Write one unit's folder under `root` (replacing an older export of it) and return it.

    `per_query`: PER_QUERY_EVAL plus `seed`; `run`: RUN rows (the reranked top k), or None."""
    missing = [c for c in PER_QUERY_SCHEMA if c not in per_query.columns]
    if missing:
        raise ValueError(f"write_unit: per_query lacks columns {missing}")
    files = {PER_QUERY_FILE: _gzip(_per_query_bytes(per_query))}
    if run is not None:
        validate(run, RUN, "write_unit run")
        files[RUNS_FILE] = _gzip(_run_bytes(run))
    sums = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    manifest = {**asdict(record), "files": sums}
    folder = Path(root) / record.collection / record.asset / record.unit
    folder.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(folder, directory=True) as tmp:
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        (tmp / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return folder


def read_unit(folder: Path) -> BundleUnit:
    """One unit folder, its files checked against the manifest's sha256s."""
    path = Path(folder) / MANIFEST_FILE
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BundleError(f"{path}: missing (every unit folder holds a manifest)") from None
    except json.JSONDecodeError as error:
        raise BundleError(f"{path}: not JSON ({error})") from error
    record = UnitRecord.from_json(values, str(path))
    if PER_QUERY_FILE not in record.files:
        raise BundleError(f"{path}: files names no {PER_QUERY_FILE}")
    for name, expected in record.files.items():
        file = Path(folder) / name
        if not file.is_file():
            raise BundleError(f"{file}: missing (the manifest lists it)")
        if hashlib.sha256(file.read_bytes()).hexdigest() != expected:
            raise BundleError(f"{file}: its sha256 differs from the manifest's: changed after export")
    try:
        per_query = pl.read_csv(
            Path(folder) / PER_QUERY_FILE,
            separator="\t",
            schema=PER_QUERY_SCHEMA,  # type: ignore[arg-type]
        )
    except (pl.exceptions.PolarsError, OSError) as error:
        raise BundleError(f"{Path(folder) / PER_QUERY_FILE}: cannot read ({error})") from error
    return BundleUnit(record, per_query, Path(folder))


def read_bundle(root: Path, collection: str) -> list[BundleUnit]:
    """Every unit of `collection` under `root` (several bundles: call once per root), in path order.
    `root` is the bundle (holding `<collection>/`) or its collection's folder itself."""
    root = Path(root)
    base = root / collection if (root / collection).is_dir() or root.name != collection else root
    if not base.is_dir():
        raise BundleError(f"{base}: no such folder (a bundle holds <collection>/<asset>/<unit>/)")
    units = [read_unit(folder) for folder in sorted(base.glob("*/*")) if folder.is_dir()]
    for unit in units:
        if (unit.record.collection, unit.record.asset, unit.record.unit) != (
            collection,
            unit.folder.parent.name,
            unit.folder.name,
        ):
            raise BundleError(
                f"{unit.folder / MANIFEST_FILE}: names {unit.record.collection}/{unit.record.asset}/"
                f"{unit.record.unit}, but lies in {collection}/{unit.folder.parent.name}/{unit.folder.name}"
            )
    return units


@dataclass(frozen=True)
class Expected:
    """What the current code and settings would record for an asset."""

    code_versions: dict[str, str]
    config_hash: str


def sort_units(
    units: Iterable[BundleUnit], expected: Mapping[str, Expected]
) -> tuple[list[BundleUnit], list[tuple[BundleUnit, str]]]:
    """(the units made by the current code and settings, [(stale unit, why)]). A unit of an asset not
    in `expected` is stale too. Two current units for the same (asset, unit) - two bundles holding
    it - keep the first."""
    current, stale, seen = [], [], set()
    for unit in units:
        record = unit.record
        want = expected.get(record.asset)
        if want is None:
            stale.append((unit, f"{record.asset} is not an asset the report reads"))
            continue
        changed = sorted(
            name
            for name in set(want.code_versions) | set(record.code_versions)
            if want.code_versions.get(name) != record.code_versions.get(name)
        )
        if changed:
            said = ", ".join(
                f"{n} {record.code_versions.get(n, '-')} -> {want.code_versions.get(n, '-')}" for n in changed
            )
            stale.append((unit, f"code version changed: {said}"))
        elif want.config_hash != record.config_hash:
            stale.append((unit, f"settings changed (config hash {record.config_hash} -> {want.config_hash})"))
        elif (record.asset, record.unit) not in seen:
            seen.add((record.asset, record.unit))
            current.append(unit)
    return current, stale


def missing_units(units: Iterable[BundleUnit], wanted: Mapping[str, list[str]]) -> dict[str, list[str]]:
    """Per run name, the units of its asset (`wanted`: asset -> every unit name a complete row holds)
    that no unit in `units` covers; runs that lack none are left out."""
    have: dict[str, set[str]] = {}
    asset_of: dict[str, str] = {}
    for unit in units:
        for name in unit.per_query["run_name"].unique().to_list():
            have.setdefault(name, set()).add(unit.record.unit)
            asset_of[name] = unit.record.asset
    missing = {}
    for name, units_had in have.items():
        lacking = [u for u in wanted.get(asset_of[name], []) if u not in units_had]
        if lacking:
            missing[name] = lacking
    return missing


def merged_per_query(units: Iterable[BundleUnit], leave_out: Iterable[str] = ()) -> pl.DataFrame:
    """The units' per-query values as one frame (PER_QUERY_SCHEMA), the runs of `leave_out` dropped.
    A (run, seed, query, measure) given by two units is refused: two units tested the same query."""
    parts = [u.per_query for u in units]
    frame = pl.concat(parts) if parts else pl.DataFrame(schema=PER_QUERY_SCHEMA)
    frame = frame.filter(~pl.col("run_name").is_in(list(leave_out)))
    clash = frame.select(pl.struct("run_name", "seed", "query_id", "measure").is_duplicated().any()).item()
    if clash:
        rows = frame.filter(pl.struct("run_name", "seed", "query_id", "measure").is_duplicated())
        raise BundleError(
            f"two units give values for the same run, seed and query: {rows['run_name'].unique().sort().to_list()}"
        )
    return frame
