"""The DuckDB catalog: one row per materialization, and one view per tabular asset.

DuckDB admits a single writing process, while Dagster's multiprocess executor runs steps in
parallel and a user may hold the catalog open in a duckdb shell. So a writer never waits on DuckDB
inside a run:

1. `Catalog.record` writes the record as a JSON file under `catalog/pending/` (atomic rename);
   that can never fail on a lock and loses nothing.
2. `Catalog.sync` takes an inter-process file lock, opens DuckDB briefly, folds every pending
   record into the `materializations` table, refreshes the views and deletes the files it folded.
   If DuckDB is held by someone else, the records stay pending and the next sync (the next
   materialization, or `dagster-ir catalog sync`) folds them in.

Views read the Parquet files directly, so a view always shows the newest data of every partition.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from dagster_ir.storage.atomic import write_text_atomic

CATALOG_FILE = "catalog.duckdb"
PARTITION_COLUMN = "partition"

_TABLE_DDL = """
create table if not exists materializations (
    record_id varchar primary key,
    asset_key varchar not null,
    partition varchar,
    run_id varchar,
    code_version varchar,
    config json,
    inputs json,
    data_version varchar,
    rows bigint,
    bytes bigint,
    path varchar,
    table_root varchar,
    partitioned boolean,
    columns json,
    materialized_at timestamptz not null
)
"""


@dataclass(frozen=True)
class MaterializationRecord:
    """What the catalog keeps of one materialization of one asset partition."""

    asset_key: str
    partition: str | None
    path: str
    rows: int | None = None
    bytes: int | None = None
    data_version: str | None = None
    code_version: str | None = None
    run_id: str | None = None
    config: dict = field(default_factory=dict)
    inputs: list[dict] = field(default_factory=list)
    columns: dict[str, str] = field(default_factory=dict)
    table_root: str | None = None  # folder of the asset's Parquet files, for its view
    partitioned: bool = False
    materialized_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    record_id: str = field(default_factory=lambda: uuid.uuid4().hex)


class Catalog:
    """A DuckDB catalog under `data_dir`, fed through a lock-free journal of pending records."""

    def __init__(self, data_dir: str | os.PathLike[str]):
        self.data_dir = Path(data_dir)
        self.path = self.data_dir / CATALOG_FILE
        self.pending_dir = self.data_dir / "catalog" / "pending"
        self._lock_path = self.data_dir / "catalog" / "catalog.lock"

    def record(self, record: MaterializationRecord, *, sync: bool = True) -> bool:
        """Journal `record`, then try to fold the journal into DuckDB. Returns whether it synced."""
        self.pending_dir.mkdir(parents=True, exist_ok=True)
        stamp = f"{time.time_ns():020d}-{record.record_id}.json"
        write_text_atomic(self.pending_dir / stamp, json.dumps(asdict(record), default=str))
        return self.sync() if sync else False

    def pending(self) -> list[Path]:
        """Journal files not yet folded into DuckDB, oldest first."""
        if not self.pending_dir.exists():
            return []
        return sorted(self.pending_dir.glob("*.json"))

    def sync(self, *, lock_timeout: float = 10.0, open_timeout: float = 5.0) -> bool:
        """Fold pending records into DuckDB and refresh views; False if the catalog is busy."""
        with _file_lock(self._lock_path, lock_timeout) as locked:
            if not locked:
                return False
            files = self.pending()
            con = _connect(self.path, open_timeout)
            if con is None:
                return False
            try:
                con.execute(_TABLE_DDL)
                records = [json.loads(f.read_text(encoding="utf-8")) for f in files]
                _insert(con, records)
                _refresh_views(con, records)
            finally:
                con.close()
            for f in files:
                f.unlink(missing_ok=True)
            return True

    def query(self, sql: str, params: list | None = None):
        """Run a read query on the catalog (after a sync) and return a Polars frame."""
        self.sync()
        with duckdb.connect(str(self.path), read_only=True) as con:
            return con.sql(sql, params=params).pl()

    def register_table(self, name: str, table_root: Path, *, partitioned: bool) -> None:
        """Create or replace the view `name` over the Parquet files under `table_root`."""
        with _file_lock(self._lock_path, 10.0) as locked:
            if not locked:
                raise TimeoutError(f"catalog {self.path} is locked")
            con = _connect(self.path, 5.0)
            if con is None:
                raise TimeoutError(f"catalog {self.path} is held by another process")
            try:
                _create_view(con, name, str(table_root), partitioned)
            finally:
                con.close()


def view_name(asset_key: str) -> str:
    """The view for an asset key: path parts joined by '__' (`wiki/links` -> `wiki__links`)."""
    return asset_key.replace("/", "__")


def _insert(con: duckdb.DuckDBPyConnection, records: list[dict]) -> None:
    columns = [
        "record_id", "asset_key", "partition", "run_id", "code_version", "config", "inputs",
        "data_version", "rows", "bytes", "path", "table_root", "partitioned", "columns",
        "materialized_at",
    ]
    rows = []
    for r in records:
        row = {c: r.get(c) for c in columns}
        for c in ("config", "inputs", "columns"):
            row[c] = json.dumps(row[c])
        rows.append([row[c] for c in columns])
    if rows:
        placeholders = ", ".join("?" for _ in columns)
        con.executemany(
            f"insert or ignore into materializations ({', '.join(columns)}) values ({placeholders})",
            rows,
        )


def _refresh_views(con: duckdb.DuckDBPyConnection, records: list[dict]) -> None:
    roots = {
        r["asset_key"]: (r["table_root"], bool(r.get("partitioned")))
        for r in records
        if r.get("table_root")
    }
    for asset_key, (root, partitioned) in roots.items():
        _create_view(con, view_name(asset_key), root, partitioned)


def _create_view(con: duckdb.DuckDBPyConnection, name: str, root: str, partitioned: bool) -> None:
    root_sql = root.replace("'", "''")
    if partitioned:
        source = f"read_parquet('{root_sql}/*/*.parquet', union_by_name = true)"
        select = f"select * from {source}"
    else:
        source = f"read_parquet('{root_sql}/*.parquet', union_by_name = true)"
        select = f"select *, null::varchar as {PARTITION_COLUMN} from {source}"
    con.execute(f'create or replace view "{name}" as {select}')


def _connect(path: Path, timeout: float) -> duckdb.DuckDBPyConnection | None:
    """Open the catalog for writing, retrying while another process holds DuckDB's lock."""
    path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        try:
            return duckdb.connect(str(path))
        except duckdb.IOException as error:
            if "lock" not in str(error).lower() or time.monotonic() >= deadline:
                if "lock" in str(error).lower():
                    return None
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.5)


@contextmanager
def _file_lock(path: Path, timeout: float) -> Iterator[bool]:
    """An exclusive inter-process lock (flock); yields False if not acquired within `timeout`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    yield False
                    return
                time.sleep(0.02)
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
