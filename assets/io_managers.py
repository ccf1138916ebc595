"""The one IO manager for tabular assets: Polars frames as Parquet files, recorded in the catalog.

Paths come from the asset key and partition (see `dagster_ir.storage.parquet`); every write is a
temp file then a rename; every materialization lands in the DuckDB catalog with its code version,
run config, the exact upstream files it read (with their content versions), rows, bytes and path.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import dagster as dg
import polars as pl

from dagster_ir.settings import DATA_DIR_ENV, data_dir
from dagster_ir.storage.catalog import Catalog, MaterializationRecord
from dagster_ir.storage.parquet import content_version, scan_tables, table_path, table_root, write_table

# Inputs each step loaded: step key -> [{asset, partition, path, data_version}]. A step runs in one
# process, so this process-local ledger is how handle_output learns the lineage of what it writes.
_LOADED: dict[str, list[dict]] = defaultdict(list)


class PolarsParquetIOManager(dg.ConfigurableIOManager):
    """Stores DataFrames (or LazyFrames, streamed) as Parquet under the data directory."""

    data_dir: str = ""  # empty: $DAGSTER_IR_DATA, else ./data

    def _root(self) -> Path:
        return data_dir(self.data_dir or None)

    def handle_output(self, context: dg.OutputContext, obj: pl.DataFrame | pl.LazyFrame | None) -> None:
        if obj is None:
            return
        if not isinstance(obj, (pl.DataFrame, pl.LazyFrame)):
            raise TypeError(
                f"{context.asset_key.to_user_string()}: PolarsParquetIOManager stores Polars frames, "
                f"got {type(obj).__name__}"
            )
        asset_path = list(context.asset_key.path)
        partition = context.asset_partition_key if context.has_asset_partitions else None
        path = table_path(self._root(), asset_path, partition)
        rows = write_table(obj, path, partition=partition)
        columns = {name: str(dtype) for name, dtype in obj.collect_schema().items()}
        size = path.stat().st_size
        record = MaterializationRecord(
            asset_key=context.asset_key.to_user_string(),
            partition=partition,
            path=str(path),
            rows=rows,
            bytes=size,
            data_version=content_version(path),
            code_version=context.asset_spec.code_version,
            run_id=context.run_id,
            config=_op_config(context),
            inputs=_LOADED.pop(context.step_key, []),
            columns=columns,
            table_root=str(table_root(self._root(), asset_path)),
            partitioned=partition is not None,
        )
        metadata = {
            "row_count": dg.MetadataValue.int(rows),
            "path": dg.MetadataValue.path(str(path)),
            "bytes": dg.MetadataValue.int(size),
            "content_version": record.data_version,
            "dagster/column_schema": dg.TableSchema(
                columns=[dg.TableColumn(name, dtype) for name, dtype in columns.items()]
            ),
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
        ledger = _LOADED[context.step_context.step.key] if context.step_context else []
        for partition, path in zip(partitions, paths, strict=True):
            version = content_version(path) if path.exists() else None
            ledger.append(
                {"asset": context.asset_key.to_user_string(), "partition": partition,
                 "path": str(path), "data_version": version}
            )
        frame = scan_tables(paths, keep_partition=len(partitions) > 1)
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
    ledger = _LOADED[context.get_step_execution_context().step.key]
    for partition, path in zip(partitions, paths, strict=True):
        ledger.append({"asset": asset, "partition": partition, "path": str(path),
                       "data_version": content_version(path) if path.exists() else None})
    if not paths:
        return pl.LazyFrame()
    return scan_tables(paths, keep_partition=True)


def _op_config(context: dg.OutputContext) -> dict:
    return json.loads(json.dumps(context.step_context.op_config or {}, default=str))


__all__ = ["PolarsParquetIOManager", "DATA_DIR_ENV", "load_partitions"]
