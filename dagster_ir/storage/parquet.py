"""Parquet tables under the data directory: one folder per asset, one file per partition.

Layout: `<data_dir>/tables/<asset path>/data.parquet` for an unpartitioned asset and
`<data_dir>/tables/<asset path>/<quoted partition key>/data.parquet` for a partitioned one. A
partitioned file carries its key in a `partition` column, so a view over all files can filter on it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import polars as pl

from dagster_ir.storage.atomic import atomic_path
from dagster_ir.storage.catalog import PARTITION_COLUMN, TABLES_DIR

FILE_NAME = "data.parquet"


def table_root(data_dir: str | os.PathLike[str], asset_path: list[str]) -> Path:
    """The folder that holds every file of one asset."""
    return Path(data_dir, TABLES_DIR, *asset_path)


def table_path(data_dir: str | os.PathLike[str], asset_path: list[str], partition: str | None) -> Path:
    """The Parquet file of one asset partition (or of the whole asset when unpartitioned)."""
    root = table_root(data_dir, asset_path)
    if partition is None:
        return root / FILE_NAME
    return root / quote(partition, safe="") / FILE_NAME


def write_table(frame: pl.DataFrame | pl.LazyFrame, path: Path, *, partition: str | None = None) -> int:
    """Write `frame` atomically to `path` and return its row count.

    A LazyFrame is streamed to disk (memory bounded by Polars' streaming engine, not the table).
    A partitioned asset's file gets the partition column.
    """
    if partition is not None:
        frame = frame.with_columns(pl.lit(partition, dtype=pl.String).alias(PARTITION_COLUMN))
    with atomic_path(path) as tmp:
        if isinstance(frame, pl.LazyFrame):
            frame.sink_parquet(tmp, compression="zstd", statistics=True)
        else:
            frame.write_parquet(tmp, compression="zstd", statistics=True)
    return pl.scan_parquet(path).select(pl.len()).collect().item()


ROW_GROUP_BYTES = 8 << 20  # in-memory (Arrow) bytes of one row group of a part or a table written from parts


@dataclass(frozen=True)
class ParquetParts:
    """A table held as Parquet part files, in row order, to be stored as one table file.

    What an asset returns when it has streamed its rows to parts: the IO manager copies them into
    the table file one row group at a time (`write_parts`), so storing it holds a row group, never
    the table (a LazyFrame over the parts, sunk by Polars, held more the more parts there were).
    """

    paths: tuple[Path, ...]

    def __post_init__(self) -> None:
        if not self.paths:
            raise ValueError("ParquetParts needs at least one part file")

    def schema(self) -> pl.Schema:
        return pl.scan_parquet(self.paths[0]).collect_schema()

    def scan(self) -> pl.LazyFrame:
        return pl.scan_parquet([str(p) for p in self.paths])


def write_part(frame: pl.DataFrame, path: Path, *, row_group_bytes: int = ROW_GROUP_BYTES) -> None:
    """Write one part file in row groups of about `row_group_bytes`, so it can be read back a row
    group at a time (`write_parts`); not atomic: parts live in a folder replaced whole."""
    rows = max(1, int(row_group_bytes * frame.height / max(1, frame.estimated_size()))) if frame.height else 1
    frame.write_parquet(path, compression="zstd", statistics=True, row_group_size=rows)


def write_parts(
    parts: Sequence[Path], path: Path, *, partition: str | None = None, row_group_bytes: int = ROW_GROUP_BYTES
) -> int:
    """Copy the rows of the Parquet `parts` (same schema, in order) into one table file at `path`
    (atomic), with the partition column as `write_table` adds it; returns the row count.

    Memory: a part's row group and one output row group (about `row_group_bytes`), whatever the
    number or size of the parts.
    """
    import pyarrow as pa  # here, not at import: it adds about 50 MB to every process that loads this module
    import pyarrow.parquet as pq

    if not parts:
        raise ValueError(f"no part files to store into {path}")
    columns = pq.ParquetFile(parts[0]).schema_arrow.remove_metadata()
    schema = columns.append(pa.field(PARTITION_COLUMN, pa.large_string())) if partition is not None else columns
    rows = 0
    pending: list[pa.Table] = []
    with atomic_path(path) as tmp, pq.ParquetWriter(tmp, schema, compression="zstd") as writer:

        def flush() -> None:
            if pending:
                writer.write_table(pa.concat_tables(pending), row_group_size=sum(t.num_rows for t in pending))
                pending.clear()

        for part in parts:
            source = pq.ParquetFile(part)
            if source.schema_arrow.remove_metadata() != columns:
                raise ValueError(f"{part}: its columns {source.schema_arrow} differ from those of {parts[0]}")
            for group in range(source.num_row_groups):
                table = source.read_row_group(group).replace_schema_metadata(None)
                if partition is not None:
                    table = table.append_column(
                        PARTITION_COLUMN, pa.array([partition] * table.num_rows, pa.large_string())
                    )
                rows += table.num_rows
                pending.append(table)
                if sum(t.nbytes for t in pending) >= row_group_bytes:
                    flush()
        flush()
    return rows


def scan_tables(paths: list[Path], *, keep_partition: bool) -> pl.LazyFrame:
    """Lazily read one or more table files; drop the partition column unless asked to keep it."""
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise FileNotFoundError(f"table files not materialized yet: {', '.join(missing)}")
    frame = pl.scan_parquet([str(p) for p in paths], missing_columns="insert")
    if not keep_partition and PARTITION_COLUMN in frame.collect_schema():
        frame = frame.drop(PARTITION_COLUMN)
    return frame


def content_version(path: Path, *, chunk_size: int = 1 << 20) -> str:
    """A short content hash of a file: the data version a catalog record carries."""
    digest = hashlib.blake2b(digest_size=12)
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


def spool_batches(batches: Iterable[pl.DataFrame | pl.LazyFrame], directory: Path) -> pl.LazyFrame:
    """Write an iterator of frames as numbered Parquet parts in `directory` (replaced atomically);
    a LazyFrame batch is streamed to its part (`sink_parquet`).

    Returns a LazyFrame over the parts, so a corpus of any size passes through bounded memory.
    """
    with atomic_path(directory, directory=True) as tmp:
        written = 0
        for i, batch in enumerate(batches):
            if isinstance(batch, pl.LazyFrame):
                batch.sink_parquet(tmp / f"part-{i:06d}.parquet")
            else:
                batch.write_parquet(tmp / f"part-{i:06d}.parquet")
            written += 1
        if written == 0:
            raise ValueError(f"no rows to spool into {directory}")
    return pl.scan_parquet(str(directory / "part-*.parquet"))


def frame_version(frame: pl.DataFrame) -> str:
    """A short content hash of a frame's rows, in order (stable within one Polars version)."""
    digest = hashlib.blake2b(digest_size=12)
    digest.update(",".join(f"{n}:{t}" for n, t in frame.schema.items()).encode())
    digest.update(frame.hash_rows(seed=0).to_numpy().tobytes())
    return digest.hexdigest()


def files_version(paths: Iterable[Path]) -> str:
    """A short content hash over several files (e.g. the parts of a spooled table)."""
    digest = hashlib.blake2b(digest_size=12)
    for path in sorted(paths):
        digest.update(content_version(path).encode())
    return digest.hexdigest()
