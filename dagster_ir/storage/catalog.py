"""The DuckDB catalog: one row per materialization, and one view per tabular asset.

DuckDB admits a single writing process, while Dagster's multiprocess executor runs steps in
parallel and a user may hold the catalog open in a duckdb shell. So a writer never waits on DuckDB
inside a run:

1. `Catalog.record` writes the record as a JSON file under `catalog/pending/` (atomic rename);
   it never raises: a record that cannot even be journaled is reported in the returned status.
2. `Catalog.sync` takes an inter-process file lock, opens DuckDB briefly and folds the pending
   records into the `materializations` table one by one, refreshes the views and deletes the files
   it folded. A record that cannot be folded (empty, torn, not a record) moves to
   `catalog/rejected/` beside a `.reason.txt` that says why; it never blocks the others. If DuckDB
   is held by someone else, the records stay pending and the next sync (the next materialization,
   or `dagster-ir catalog sync`) folds them in.

Views read the Parquet files directly, so a view always shows the newest data of every partition.
Their paths are relative to the data directory (our connections set DuckDB's `file_search_path`
to it; a duckdb shell started in the data directory resolves them too), so a copied or moved data
directory reads its own tables. `Catalog.query` and `Catalog.lineage` are reads and never write:
they open DuckDB read-only, leave the journal to `sync`, and can read the data directory's tables
and nothing else on the host.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from dagster_ir.storage.atomic import write_text_atomic
from dagster_ir.storage.lineage import LineageNode, create_lineage_sql, walk
from dagster_ir.storage.locks import file_lock

CATALOG_FILE = "catalog.duckdb"
PARTITION_COLUMN = "partition"
TABLES_DIR = "tables"  # under the data directory: the Parquet tables the views read (storage.parquet)

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
_META_DDL = "create table if not exists catalog_meta (key varchar primary key, value varchar)"


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


class CatalogQueryError(ValueError):
    """A catalog query was refused (not a read statement) or is not valid SQL."""


class CatalogBusyError(RuntimeError):
    """Another process holds the catalog's DuckDB file."""


_READ_STATEMENTS = (duckdb.StatementType.SELECT,)
_VIEWS_LAYOUT = "relative-1"  # catalog_meta: views read paths relative to the data directory


class Catalog:
    """A DuckDB catalog under `data_dir`, fed through a lock-free journal of pending records."""

    def __init__(self, data_dir: str | os.PathLike[str]):
        self.data_dir = Path(data_dir).absolute()
        self.path = self.data_dir / CATALOG_FILE
        self.pending_dir = self.data_dir / "catalog" / "pending"
        self.rejected_dir = self.data_dir / "catalog" / "rejected"
        self._lock_path = self.data_dir / "catalog" / "catalog.lock"
        self.last_sync_error: str | None = None

    def record(self, record: MaterializationRecord, *, sync: bool = True) -> str:
        """Journal `record`, then try to fold the journal into DuckDB; never raises.

        Returns "synced", "pending" (journaled; the catalog was busy or unreadable, see
        `last_sync_error`) or "not journaled: <why>".
        """
        try:
            self.pending_dir.mkdir(parents=True, exist_ok=True)
            stamp = f"{time.time_ns():020d}-{record.record_id}.json"
            write_text_atomic(self.pending_dir / stamp, json.dumps(asdict(record), default=str))
        except Exception as error:  # a catalog problem never fails the step that made the data
            return f"not journaled: {type(error).__name__}: {error}"
        if not sync:
            return "pending"
        try:
            return "synced" if self.sync() else "pending"
        except Exception as error:
            self.last_sync_error = f"{type(error).__name__}: {error}"
            return "pending"

    def pending(self) -> list[Path]:
        """Journal files not yet folded into DuckDB, oldest first."""
        if not self.pending_dir.is_dir():
            return []
        return sorted(self.pending_dir.glob("*.json"))

    def rejected(self) -> list[Path]:
        """Journal files that could not be folded (each beside a `.reason.txt`)."""
        if not self.rejected_dir.is_dir():
            return []
        return sorted(p for p in self.rejected_dir.iterdir() if p.is_file() and not p.name.endswith(".reason.txt"))

    def _strays(self) -> list[Path]:
        """Files in the journal folder that no writer makes (not `.json`; temporary files, named with a
        leading dot, belong to `clean_orphans`): folded never, so rejected rather than kept for ever."""
        if not self.pending_dir.is_dir():
            return []
        return sorted(
            p for p in self.pending_dir.iterdir() if p.is_file() and not p.name.startswith(".") and p.suffix != ".json"
        )

    def sync(self, *, lock_timeout: float = 10.0, open_timeout: float = 5.0) -> bool:
        """Fold pending records into DuckDB and refresh views; False if the catalog is busy."""
        with file_lock(self._lock_path, lock_timeout) as locked:
            if not locked:
                self.last_sync_error = "another process is folding the journal"
                return False
            for stray in self._strays():
                self._reject(
                    stray, _Unfoldable("not a journal record (records are .json files written by the IO manager)")
                )
            files = self.pending()
            con = _connect(self.path, open_timeout, self.data_dir)
            if con is None:
                self.last_sync_error = f"{self.path} is held by another process"
                return False
            folded: list[Path] = []
            try:
                con.execute(_TABLE_DDL)
                con.execute(_META_DDL)
                records = []
                for file in files:
                    try:
                        record = _read_record(file)
                        _insert(con, record)
                    except duckdb.IOException:
                        raise  # the catalog's trouble, not the record's: it stays pending
                    except (_Unfoldable, duckdb.Error) as problem:
                        self._reject(file, problem)
                        continue
                    records.append(record)
                    folded.append(file)
                _refresh_views(con, self.data_dir, records)
                try:
                    create_lineage_sql(con)  # lineage_edges, lineage(...), report_sources (see storage.lineage)
                except duckdb.Error as error:
                    self.last_sync_error = f"lineage views: {error}"
            finally:
                con.close()
            for file in folded:
                file.unlink(missing_ok=True)
            self.last_sync_error = None
            return True

    def query(self, sql: str, params: list | None = None, *, open_timeout: float = 5.0):
        """Run a read query on the catalog and return a Polars frame; never writes.

        The catalog is opened read-only (a read-only data directory will do), the journal is not
        folded (see `pending()`; `sync` folds it), and DuckDB may read no file but the data
        directory's own tables (`enable_external_access` off, `allowed_directories` = tables/).
        Raises CatalogQueryError for anything but read (SELECT) statements, CatalogBusyError when
        another process holds the catalog, FileNotFoundError when there is no catalog yet.
        """
        check_read_only(sql)
        with self._reader(open_timeout) as con:
            return con.sql(sql, params=params).pl()

    def lineage(self, asset: str, partition: str | None = None, *, open_timeout: float = 5.0) -> list[LineageNode]:
        """The upstream trees of `asset`'s newest record (of `partition`, or each partition's); never writes.

        Raises KeyError naming the asset when the catalog has no record of it.
        """
        with self._reader(open_timeout) as con:
            return walk(con, asset, partition)

    def _reader(self, open_timeout: float) -> duckdb.DuckDBPyConnection:
        """A read-only connection that can read the catalog's own tables and nothing else on the host."""
        if not self.path.is_file():
            waiting = (
                f" ({len(self.pending())} records pending: `dagster-ir catalog sync` folds them)"
                if self.pending()
                else ""
            )
            raise FileNotFoundError(f"{self.path}: no catalog yet{waiting}")
        con = _connect(self.path, open_timeout, self.data_dir, read_only=True)
        if con is None:
            raise CatalogBusyError(
                f"{self.path} is held by another process (a duckdb shell?); close it, or query while it is free"
            )
        try:
            tables = self.data_dir / TABLES_DIR
            con.execute("set allowed_directories = ?", [[f"{tables}{os.sep}"]])
            con.execute("set enable_external_access = false")
            con.execute("set lock_configuration = true")  # a query cannot turn them back
            _shadow_views(con, self.data_dir)
        except BaseException:
            con.close()
            raise
        return con

    def register_table(self, name: str, table_root: Path, *, partitioned: bool) -> None:
        """Create or replace the view `name` over the Parquet files under `table_root`."""
        with file_lock(self._lock_path, 10.0) as locked:
            if not locked:
                raise TimeoutError(f"catalog {self.path} is locked")
            con = _connect(self.path, 5.0, self.data_dir)
            if con is None:
                raise CatalogBusyError(f"catalog {self.path} is held by another process")
            try:
                _create_view(con, name, _view_root(str(table_root), name, self.data_dir), partitioned)
            finally:
                con.close()

    def _reject(self, file: Path, problem: Exception) -> None:
        """Move an unfoldable journal file to `rejected/` with the reason beside it."""
        self.rejected_dir.mkdir(parents=True, exist_ok=True)
        reason = f"{file}: {problem}\n"
        write_text_atomic(self.rejected_dir / f"{file.name}.reason.txt", reason)
        os.replace(file, self.rejected_dir / file.name)


def check_read_only(sql: str) -> None:
    """Raise CatalogQueryError unless every statement of `sql` is a read (SELECT) statement."""
    try:
        with duckdb.connect(":memory:") as parser:
            statements = parser.extract_statements(sql)
    except duckdb.Error as error:
        raise CatalogQueryError(f"not valid SQL: {error}") from None
    refused = [s.type.name for s in statements if s.type not in _READ_STATEMENTS]
    if refused or not statements:
        raise CatalogQueryError(
            "the catalog accepts only read statements (select, with ... select, from, describe, show, "
            f"summarize); refused: {', '.join(refused) or 'an empty query'}"
        )


class _Unfoldable(ValueError):
    """A journal file that is not a materialization record."""


_REQUIRED = {"asset_key": str, "path": str, "materialized_at": str, "record_id": str}


def _read_record(file: Path) -> dict:
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise _Unfoldable(f"unreadable: {error}") from None
    if not text.strip():
        raise _Unfoldable("empty file (a write cut short)")
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        raise _Unfoldable(f"not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})") from None
    if not isinstance(record, dict):
        raise _Unfoldable(f"expected a JSON object, found {type(record).__name__}")
    for key, kind in _REQUIRED.items():
        if not isinstance(record.get(key), kind) or not record[key]:
            raise _Unfoldable(f"field {key!r} must be a non-empty {kind.__name__}, found {record.get(key)!r}")
    try:
        datetime.fromisoformat(record["materialized_at"])
    except ValueError:
        raise _Unfoldable(f"materialized_at is not a timestamp: {record['materialized_at']!r}") from None
    return record


def view_name(asset_key: str) -> str:
    """The view for an asset key: path parts joined by '__' (`wiki/links` -> `wiki__links`)."""
    return asset_key.replace("/", "__")


_COLUMNS = [
    "record_id",
    "asset_key",
    "partition",
    "run_id",
    "code_version",
    "config",
    "inputs",
    "data_version",
    "rows",
    "bytes",
    "path",
    "table_root",
    "partitioned",
    "columns",
    "materialized_at",
]


def _insert(con: duckdb.DuckDBPyConnection, record: dict) -> None:
    row = {c: record.get(c) for c in _COLUMNS}
    for c in ("config", "inputs", "columns"):
        row[c] = json.dumps(row[c])
    placeholders = ", ".join("?" for _ in _COLUMNS)
    con.execute(
        f"insert or ignore into materializations ({', '.join(_COLUMNS)}) values ({placeholders})",
        [row[c] for c in _COLUMNS],
    )


def _refresh_views(con: duckdb.DuckDBPyConnection, data_dir: Path, records: list[dict]) -> None:
    """Views of the assets just recorded; every view once if they still use the old layout."""
    layout = con.execute("select value from catalog_meta where key = 'views'").fetchone()
    if layout is None or layout[0] != _VIEWS_LAYOUT:
        latest = con.execute(
            "select asset_key, arg_max(table_root, materialized_at), arg_max(partitioned, materialized_at) "
            "from materializations where table_root is not null group by asset_key"
        ).fetchall()
        records = [*({"asset_key": k, "table_root": r, "partitioned": p} for k, r, p in latest), *records]
        con.execute("insert or replace into catalog_meta values ('views', ?)", [_VIEWS_LAYOUT])
    roots = {
        r["asset_key"]: (_view_root(r["table_root"], r["asset_key"], data_dir), bool(r.get("partitioned")))
        for r in records
        if r.get("table_root")
    }
    for asset_key, (root, partitioned) in roots.items():
        try:
            _create_view(con, view_name(asset_key), root, partitioned)
        except duckdb.Error:  # no files (yet, or any more): the view keeps its last definition
            continue


def _view_root(table_root: str, asset_key: str, data_dir: Path) -> str:
    """`table_root` relative to the data directory, also when it was recorded in another copy of it."""
    root = Path(table_root)
    if not root.is_absolute():
        return root.as_posix()
    try:
        return root.relative_to(data_dir).as_posix()
    except ValueError:
        pass
    tail = ("tables", *asset_key.split("/"))
    if root.parts[-len(tail) :] == tail:
        return "/".join(tail)
    return root.as_posix()


def _shadow_views(con: duckdb.DuckDBPyConnection, data_dir: Path) -> None:
    """Temporary views (in memory, over this connection's stored ones) that read each table by its
    absolute path under `data_dir`: a relative path would read a `tables/` folder of the working
    directory first, and only the data directory's own tables are allowed."""
    try:
        latest = con.execute(
            "select asset_key, arg_max(table_root, materialized_at), arg_max(partitioned, materialized_at) "
            "from materializations where table_root is not null group by asset_key"
        ).fetchall()
    except duckdb.CatalogException:  # a catalog without records
        return
    for asset_key, root, partitioned in latest:
        where = Path(_view_root(root, asset_key, data_dir))
        try:
            _create_view(con, view_name(asset_key), (data_dir / where).as_posix(), bool(partitioned), temporary=True)
        except duckdb.Error:  # no files (yet, or any more), or outside the data directory: not readable
            continue


def _create_view(
    con: duckdb.DuckDBPyConnection, name: str, root: str, partitioned: bool, *, temporary: bool = False
) -> None:
    root_sql = root.replace("'", "''")
    if partitioned:
        source = f"read_parquet('{root_sql}/*/*.parquet', union_by_name = true)"
        select = f"select * from {source}"
    else:
        source = f"read_parquet('{root_sql}/*.parquet', union_by_name = true)"
        select = f"select *, null::varchar as {PARTITION_COLUMN} from {source}"
    con.execute(f'create or replace {"temp " if temporary else ""}view "{name}" as {select}')


def _connect(
    path: Path, timeout: float, data_dir: Path, *, read_only: bool = False
) -> duckdb.DuckDBPyConnection | None:
    """Open the catalog, retrying while another process holds DuckDB's lock (None if it still does).

    Relative paths (the views') resolve against the data directory.
    """
    if not read_only:
        path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        try:
            con = duckdb.connect(str(path), read_only=read_only)
            break
        except duckdb.IOException as error:
            if "lock" not in str(error).lower():
                raise
            if time.monotonic() >= deadline:
                return None
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
    con.execute("set file_search_path = ?", [str(data_dir)])
    return con
