"""A data directory shared by several hosts: what is safe, and a probe to run on each host.

Every worker of a Dask cluster or a Kubernetes run mounts the one data directory (a POSIX shared
file system) at the same path. What the storage layer relies on, and why it holds there:

- **Atomic writes** (`storage.atomic`): a temporary entry is written *beside* its target, in the
  same folder, so the final rename never crosses file systems; temporary names carry the host and
  pid (`.<name>.<host>-<pid>-<random>.tmp`), so two hosts never share one. NFS, CephFS, Lustre
  and GPFS rename atomically within a folder. Folders are swapped with `renameat2(RENAME_EXCHANGE)`
  where the file system has it (local ext4/xfs/btrfs/tmpfs); NFS and most network file systems do
  not, and a folder replacement there falls back to two renames: for an instant the target is
  missing (a reader retries; nothing is ever half-written).
- **Locks** (`storage.locks`, the catalog's fold lock, partition locks, checkpoint folder locks)
  are `flock` locks. Linux's NFS client maps `flock` onto NFS byte-range locks (NFSv4, or NFSv3
  with lockd), so they exclude across hosts; CephFS supports `flock`; Lustre needs the `flock`
  mount option (`localflock` is NOT enough: it excludes only on one client). A lock dies with its
  process, also when a host dies (NFSv4: when its lease expires, 90 s by default).
- **The catalog journal** (`storage.catalog`): every process writes its own record file (a
  timestamp and a random id in the name); whoever holds the fold lock folds them into DuckDB, so
  at most one process opens `catalog.duckdb` for writing, from any host. Records are ordered by
  the writer's clock: keep the hosts' clocks in sync (NTP).
- **Parquet tables and `files/`** are written through `atomic_path`, each partition to its own file.

Not supported: object-store mounts (s3fs, gcsfuse, goofys, blobfuse, rclone: no `flock`, no atomic
rename), Lustre mounted with `localflock` or without `flock`, NFS mounted with `nolock` or
`local_lock=flock`/`all` (locks then exclude only on one host), and different mount paths on
different hosts for one run (tables record absolute paths for lineage; the catalog's views are
relative and survive a move). Clean-up of a killed writer's leftovers (`clean_orphans`, dead runs)
runs per host: each host removes only its own dead processes' entries.

`probe(folder)` checks a mount from the host it runs on (`python -m dagster_ir.storage.shared DIR`
prints its report; run it on every node): the file system type and mount options, whether a lock
held by another process excludes this one, whether folders can be exchanged atomically, and the
hosts that probed the folder before.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from dagster_ir.storage.atomic import _exchange, remove, temp_name, write_text_atomic
from dagster_ir.storage.locks import file_lock

PROBE_DIR = ".shared-mount-probe"
UNSUPPORTED_TYPES = (
    "fuse.s3fs",
    "fuse.gcsfuse",
    "fuse.goofys",
    "fuse.blobfuse",
    "fuse.blobfuse2",
    "fuse.rclone",
    "fuse.mountpoint-s3",
)
UNSAFE_OPTIONS = ("nolock", "local_lock=flock", "local_lock=all", "localflock")


@dataclass(frozen=True)
class MountReport:
    """What `probe` found; `problems` is empty where the folder is safe to share."""

    path: str
    fs_type: str
    options: str
    locks_exclude: bool
    folder_exchange: bool
    hosts: list[str]
    problems: list[str]


def mount_of(path: str | os.PathLike[str], mounts: str = "/proc/mounts") -> tuple[str, str, str]:
    """(mount point, file system type, options) of the mount holding `path` (longest prefix)."""
    target = os.path.realpath(path)
    best = ("/", "unknown", "")
    try:
        lines = Path(mounts).read_text(encoding="utf-8").splitlines()
    except OSError:
        return best
    for line in lines:
        parts = line.split()
        if len(parts) < 4:
            continue
        point = parts[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best[0]):
            best = (point, parts[2], parts[3])
    return best


def _try_lock(path: str, queue) -> None:
    with file_lock(path, 0) as acquired:
        queue.put(acquired)


def _lock_excludes(lock: Path) -> bool:
    """Whether a lock this process holds refuses a second process (spawned, so no inherited state)."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    with file_lock(lock, None):
        child = context.Process(target=_try_lock, args=(str(lock), queue))
        child.start()
        acquired = queue.get(timeout=120)
        child.join()
    return not acquired


def _folder_exchange(folder: Path) -> bool:
    a, b = temp_name(folder / "a"), temp_name(folder / "b")
    a.mkdir()
    b.mkdir()
    try:
        return _exchange(a, b)
    finally:
        remove(a)
        remove(b)


def probe(folder: str | os.PathLike[str]) -> MountReport:
    """Check that `folder` (the data directory) is safe to share, from this host; see the module doc."""
    root = Path(folder) / PROBE_DIR
    root.mkdir(parents=True, exist_ok=True)
    _, fs_type, options = mount_of(root)
    host = socket.gethostname()
    write_text_atomic(root / f"host-{host}.json", json.dumps({"host": host, "fs_type": fs_type}))
    hosts = sorted(json.loads(p.read_text(encoding="utf-8"))["host"] for p in root.glob("host-*.json"))
    locks = _lock_excludes(root / "probe.lock")
    exchange = _folder_exchange(root)
    problems = []
    if fs_type in UNSUPPORTED_TYPES:
        problems.append(f"{fs_type}: an object-store mount has no flock and no atomic rename")
    unsafe = [o for o in options.split(",") if o in UNSAFE_OPTIONS]
    if unsafe:
        problems.append(f"mount option {', '.join(unsafe)}: locks exclude only on one host")
    if not locks:
        problems.append("a lock held by one process did not exclude another")
    return MountReport(str(Path(folder).resolve()), fs_type, options, locks, exchange, hosts, problems)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m dagster_ir.storage.shared DATA_DIR", file=sys.stderr)
        return 2
    report = probe(args[0])
    print(json.dumps(asdict(report), indent=1))
    return 1 if report.problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
