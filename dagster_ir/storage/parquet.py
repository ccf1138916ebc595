"""Parquet tables under the data directory: one folder per asset, one file per partition.

Layout: `<data_dir>/tables/<asset path>/data.parquet` for an unpartitioned asset and
`<data_dir>/tables/<asset path>/<quoted partition key>/data.parquet` for a partitioned one. A
partitioned file carries its key in a `partition` column, so a view over all files can filter on it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import quote

import polars as pl

from dagster_ir.storage.atomic import atomic_path
from dagster_ir.storage.catalog import PARTITION_COLUMN

TABLES_DIR = "tables"
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
