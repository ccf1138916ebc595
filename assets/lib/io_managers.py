"""The one IO manager for tabular assets: Polars frames as Parquet files, recorded in the catalog.

Paths come from the asset key and partition (see `dagster_ir.storage.parquet`); every write is a
temp file then a rename; every materialization lands in the DuckDB catalog with its code version,
run config, the exact upstream files it read (with their content versions), rows, bytes and path.

Every path stored under the data directory is relative to it: the catalog's `path` and
`table_root`, and a table's `path` column (the index, embeddings or checkpoint an asset wrote),
which `load_input` gives back absolute, under the data directory it reads from. So a moved data
directory rebuilds, and a copied one reads only its own files. A path outside the data directory
(a registered dump file) stays absolute. The columns that may hold a path or a model's name
(`PATH_LIKE_COLUMNS`: what a model started from, CET's checkpoints) store a path under the data
directory as `./<relative path>`, which no model name starts with, and get it back absolute too.
"""

from __future__ import annotations

import json
from collections import defaultdict
from functools import lru_cache
from pathlib import Path

import dagster as dg
import polars as pl

from assets.lib.dagster_private import asset_step, input_step, output_op_config
from assets.lib.metadata import column_schema, preview
from dagster_ir.settings import DATA_DIR_ENV, data_dir
from dagster_ir.storage.catalog import Catalog, MaterializationRecord
from dagster_ir.storage.parquet import (
    ParquetParts,
    content_version,
    scan_tables,
    table_path,
    table_root,
    write_parts,
    write_table,
)

# Inputs each step loaded: (run id, step key) -> [{asset, partition, path, data_version[, run_names]}].
# A step runs in one process, so this process-local ledger is how handle_output learns the lineage of
# what it writes. Every output of a step gets the step's inputs (a multi-output step has several), so
# entries are not popped; the ledger keeps the newest `_LEDGER_STEPS` steps.
_LOADED: dict[tuple[str, str], list[dict]] = defaultdict(list)
_LEDGER_STEPS = 256
# A loaded table with a `run_name` column lists its run names (when there are at most this many), so
# a report row can be traced to the input that holds its run (`report_sources` in the catalog).
_MAX_RUN_NAMES = 200


def _ledger(run_id: str, step_key: str) -> list[dict]:
    """The inputs step `step_key` of run `run_id` has loaded so far (created on first use)."""
    key = (run_id, step_key)
    if key not in _LOADED:
        while len(_LOADED) >= _LEDGER_STEPS:
            del _LOADED[next(iter(_LOADED))]
    return _LOADED[key]


def _read_entry(asset: str, partition: str | None, path: Path) -> dict:
    """The ledger entry of one table read: what, which partition, its file and content version."""
    version = content_version(path) if path.exists() else None
    entry = {"asset": asset, "partition": partition, "path": str(path), "data_version": version}
    names = _run_names(str(path), version) if version is not None else None
    if names is not None:
        entry["run_names"] = names
    return entry


@lru_cache(maxsize=256)
def _run_names(path: str, version: str) -> list[str] | None:
    """Distinct `run_name` values of a run table at `version` (None for other tables or too many names)."""
    try:
        frame = pl.scan_parquet(path)
        if "run_name" not in frame.collect_schema().names():
            return None
        names = frame.select(pl.col("run_name").unique()).head(_MAX_RUN_NAMES + 1).collect()["run_name"]
    except (pl.exceptions.PolarsError, OSError):
        return None
    return None if len(names) > _MAX_RUN_NAMES else sorted(str(n) for n in names.drop_nulls())


class PolarsParquetIOManager(dg.ConfigurableIOManager):
    """Stores DataFrames (or LazyFrames, streamed; or ParquetParts, a row group at a time) as Parquet
    under the data directory."""

    data_dir: str = ""  # empty: $DAGSTER_IR_DATA, else ./data

    def _root(self) -> Path:
        return data_dir(self.data_dir or None)

    def handle_output(self, context: dg.OutputContext, obj: pl.DataFrame | pl.LazyFrame | ParquetParts | None) -> None:
        if obj is None:
            return
        if not isinstance(obj, (pl.DataFrame, pl.LazyFrame, ParquetParts)):
            raise TypeError(
                f"{context.asset_key.to_user_string()}: PolarsParquetIOManager stores Polars frames, "
                f"got {type(obj).__name__}"
            )
        asset_path = list(context.asset_key.path)
        partition = context.asset_partition_key if context.has_asset_partitions else None
        path = table_path(self._root(), asset_path, partition)
        if isinstance(obj, (pl.DataFrame, pl.LazyFrame)):
            obj = relative_paths(obj, self._root())
        if isinstance(obj, ParquetParts):
            rows = write_parts(obj.paths, path, partition=partition)
            schema = obj.schema()
        else:
            rows = write_table(obj, path, partition=partition)
            schema = obj.collect_schema()
        columns = {name: str(dtype) for name, dtype in schema.items()}
        size = path.stat().st_size
        record = MaterializationRecord(
            asset_key=context.asset_key.to_user_string(),
            partition=partition,
            path=relative_to(path, self._root()),
            rows=rows,
            bytes=size,
            data_version=content_version(path),
            code_version=context.asset_spec.code_version,
            run_id=context.run_id,
            config=_op_config(context),
            inputs=[
                {**read, "path": relative_to(read["path"], self._root())}
                for read in _LOADED.get((context.run_id, context.step_key), [])
            ],
            columns=columns,
            table_root=relative_to(table_root(self._root(), asset_path), self._root()),
            partitioned=partition is not None,
        )
        metadata = {
            "dagster/row_count": dg.MetadataValue.int(rows),
            "path": dg.MetadataValue.path(relative_to(path, self._root())),  # the catalog's `path`, too
            "bytes": dg.MetadataValue.int(size),
            "content_version": record.data_version,
            "dagster/column_schema": column_schema(columns, context.asset_key.to_user_string()),
            "preview": preview(pl.scan_parquet(path)),
        }
        context.add_output_metadata(metadata)
        # Journaled last, once nothing else here can fail, so the catalog never lists an output
        # Dagster does not; recording never raises (a catalog problem never fails the step).
        catalog = Catalog(self._root())
        status = catalog.record(record)
        if status == "pending":
            status = f"pending ({catalog.last_sync_error or 'catalog busy'}; folded in at the next sync)"
        context.add_output_metadata({"catalog": status})

    def load_input(self, context: dg.InputContext) -> pl.DataFrame | pl.LazyFrame:
        asset_path = list(context.asset_key.path)
        if context.has_asset_partitions:
            partitions = list(context.asset_partition_keys)
        else:
            partitions = [None]
        paths = [table_path(self._root(), asset_path, p) for p in partitions]
        if not paths:  # an upstream with no partitions yet (no dump registered, say): no rows
            empty = pl.LazyFrame()
            return empty if context.dagster_type.typing_type is pl.LazyFrame else empty.collect()
        step = input_step(context)
        ledger = _ledger(*step) if step is not None else []
        for partition, path in zip(partitions, paths, strict=True):
            ledger.append(_read_entry(context.asset_key.to_user_string(), partition, path))
        frame = absolute_paths(scan_tables(paths, keep_partition=len(partitions) > 1), self._root())
        if context.dagster_type.typing_type is pl.LazyFrame:
            return frame
        return frame.collect()


def load_partitions(
    context: dg.AssetExecutionContext, data_dir: str | Path, asset: str, partitions: list[str]
) -> pl.LazyFrame:
    """Read some partitions of a tabular asset inside an asset body, as `load_input` would.

    For an upstream declared in `deps` that only some partitions read (the wiki-car collection
    reads the Wikipedia segments, Cranfield does not): the reads join the step's lineage.
    """
    paths = [table_path(data_dir, asset.split("/"), p) for p in partitions]
    ledger = _ledger(*asset_step(context))
    for partition, path in zip(partitions, paths, strict=True):
        ledger.append(_read_entry(asset, partition, path))
    if not paths:
        return pl.LazyFrame()
    return absolute_paths(scan_tables(paths, keep_partition=True), Path(data_dir))


PATH_COLUMN = "path"  # a table's column of files or folders an asset wrote (stored relative)
# columns holding a checkpoint under the data directory or a model's name ("bundled", a Hugging Face
# name): a path under the data directory is stored "./<relative path>"
PATH_LIKE_COLUMNS = ("init", "relevance_path", "selection_path")


def relative_to(path: str | Path, root: Path) -> str:
    """`path` relative to `root` when it lies under it, else as it is."""
    try:
        return Path(path).relative_to(root).as_posix()
    except ValueError:
        return str(path)


def _string_columns(frame: pl.DataFrame | pl.LazyFrame, names: tuple[str, ...]) -> list[str]:
    schema = frame.collect_schema()
    return [name for name in names if schema.get(name) == pl.String]


def relative_paths(frame: pl.DataFrame | pl.LazyFrame, root: Path) -> pl.DataFrame | pl.LazyFrame:
    """`frame` with its `path` column relative to `root` where it lies under it, and its path-like
    columns `./<relative path>` there."""
    prefix = f"{root.as_posix().rstrip('/')}/"
    marks = {PATH_COLUMN: "", **{name: "./" for name in PATH_LIKE_COLUMNS}}
    return frame.with_columns(
        pl.when(pl.col(name) == prefix.rstrip("/"))
        .then(pl.lit("."))
        .when(pl.col(name).str.starts_with(prefix))
        .then(pl.lit(marks[name]) + pl.col(name).str.strip_prefix(prefix))
        .otherwise(pl.col(name))
        .alias(name)
        for name in _string_columns(frame, (PATH_COLUMN, *PATH_LIKE_COLUMNS))
    )


def absolute_paths(frame: pl.LazyFrame, root: Path) -> pl.LazyFrame:
    """`frame` with a relative `path` column, and `./` paths of its path-like columns, resolved under
    `root` (absolute paths and model names as they are)."""
    base = f"{root.as_posix().rstrip('/')}/"
    resolved = [
        pl.when(pl.col(PATH_COLUMN).is_null() | pl.col(PATH_COLUMN).str.starts_with("/"))
        .then(pl.col(PATH_COLUMN))
        .otherwise(pl.lit(base) + pl.col(PATH_COLUMN))
        .alias(PATH_COLUMN)
        for _ in _string_columns(frame, (PATH_COLUMN,))
    ]
    resolved += [
        pl.when(pl.col(name) == ".")
        .then(pl.lit(base.rstrip("/")))
        .when(pl.col(name).str.starts_with("./"))
        .then(pl.lit(base) + pl.col(name).str.strip_prefix("./"))
        .otherwise(pl.col(name))
        .alias(name)
        for name in _string_columns(frame, PATH_LIKE_COLUMNS)
    ]
    return frame.with_columns(resolved)


def _op_config(context: dg.OutputContext) -> dict:
    return json.loads(json.dumps(output_op_config(context), default=str))


__all__ = ["PolarsParquetIOManager", "DATA_DIR_ENV", "load_partitions"]
