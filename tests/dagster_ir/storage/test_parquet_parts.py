"""Storing a table from Parquet part files a row group at a time (`write_part`, `write_parts`)."""

import polars as pl
import pyarrow.parquet as pq
import pytest

from dagster_ir.storage.parquet import ParquetParts, write_part, write_parts, write_table

SCHEMA = {"id": pl.String, "n": pl.Int32, "text": pl.String}


def _frame(start: int, rows: int) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "id": [f"a{i}" for i in range(start, start + rows)],
            "n": list(range(start, start + rows)),
            "text": ["word " * (i % 7) for i in range(start, start + rows)],
        },
        schema=SCHEMA,
    )


def test_parts_stored_as_one_table_in_order_with_the_partition(tmp_path):
    frames = [_frame(0, 500), _frame(500, 0), _frame(500, 1200)]
    parts = []
    for i, frame in enumerate(frames):
        parts.append(tmp_path / f"part-{i}.parquet")
        write_part(frame, parts[-1], row_group_bytes=4096)  # several row groups per part
    assert pq.ParquetFile(parts[0]).metadata.num_row_groups > 1
    out = tmp_path / "table" / "data.parquet"
    rows = write_parts(parts, out, partition="dump-1", row_group_bytes=8192)
    expected = pl.concat(frames).with_columns(partition=pl.lit("dump-1"))
    stored = pl.read_parquet(out)
    assert rows == 1700 == stored.height
    assert stored.equals(expected)
    assert stored.schema == {**SCHEMA, "partition": pl.String}
    assert pq.ParquetFile(out).metadata.num_row_groups > 2  # bounded row groups, not one table-sized one
    # The same rows as the LazyFrame path, and without a partition no partition column.
    write_table(pl.scan_parquet([str(p) for p in parts]), tmp_path / "lazy.parquet", partition="dump-1")
    assert pl.read_parquet(tmp_path / "lazy.parquet").equals(stored)
    assert write_parts(parts, tmp_path / "plain.parquet") == 1700
    assert pl.read_parquet(tmp_path / "plain.parquet").equals(pl.concat(frames))
    assert ParquetParts(tuple(parts)).schema() == pl.Schema(SCHEMA)


def test_empty_parts_give_an_empty_table_with_the_columns(tmp_path):
    write_part(_frame(0, 0), tmp_path / "part.parquet")
    out = tmp_path / "data.parquet"
    assert write_parts([tmp_path / "part.parquet"], out, partition="p") == 0
    assert pl.read_parquet(out).schema == {**SCHEMA, "partition": pl.String}


def test_bad_parts_raise_and_leave_no_file(tmp_path):
    write_part(_frame(0, 3), tmp_path / "a.parquet")
    _frame(0, 3).drop("text").write_parquet(tmp_path / "b.parquet")
    out = tmp_path / "data.parquet"
    with pytest.raises(ValueError, match="b.parquet: its columns"):
        write_parts([tmp_path / "a.parquet", tmp_path / "b.parquet"], out)
    assert not out.exists() and list(tmp_path.glob(".data.parquet*")) == []
    with pytest.raises(ValueError, match="no part files"):
        write_parts([], out)
    with pytest.raises(ValueError, match="at least one part"):
        ParquetParts(())
