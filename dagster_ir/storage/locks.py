"""Inter-process file locks (flock) for the data directory.

`file_lock` is an exclusive lock on a lock file that yields whether it was acquired in time.
`partition_lock` is the lock of one asset partition's outputs: writers of the same partition in
different processes take it in turn (the lock files live under `<data_dir>/locks/`).
A lock dies with its process, so a killed writer never leaves a partition locked.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

LOCKS_DIR = "locks"


@contextmanager
def file_lock(path: str | os.PathLike[str], timeout: float | None) -> Iterator[bool]:
    """An exclusive inter-process lock; yields False if not acquired within `timeout` (None: wait)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.02
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if deadline is not None and time.monotonic() >= deadline:
                    yield False
                    return
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def remove_lock(path: str | os.PathLike[str]) -> bool:
    """Remove the lock file at `path` unless a process holds it (then it stays); whether it went.

    For the lock of something that no longer exists (a removed dump's partitions): taken first, so
    a holder keeps a file it still uses.
    """
    path = Path(path)
    if not path.exists():
        return False
    with file_lock(path, 0) as acquired:
        if acquired:
            path.unlink(missing_ok=True)
        return acquired


def is_locked(path: str | os.PathLike[str]) -> bool:
    """Whether another process holds the lock at `path` right now."""
    if not Path(path).exists():
        return False
    with file_lock(path, 0) as acquired:
        return not acquired


def partition_lock_path(data_dir: str | os.PathLike[str], asset_key: str, partition: str | None) -> Path:
    """The lock file of one asset partition (or of an unpartitioned asset)."""
    name = quote(asset_key, safe="") + ("" if partition is None else "@" + quote(partition, safe=""))
    return Path(data_dir, LOCKS_DIR, f"{name}.lock")


FOLDER_LOCK = ".lock"


@contextmanager
def folder_lock(folder: str | os.PathLike[str]) -> Iterator[None]:
    """Hold `<folder>/.lock` while working in `folder` (waits for another holder first).

    A training run holds its checkpoint folder's lock, so a second process training into the
    same folder waits and then resumes from (or finds done) the first one's work, and
    `remove_unlocked_siblings` never deletes a folder in use.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with file_lock(folder / FOLDER_LOCK, None):
        yield


def remove_unlocked_siblings(folder: str | os.PathLike[str]) -> list[Path]:
    """Remove the other folders beside `folder` (older settings' work) that no process is using.

    A folder whose `.lock` is held (a run training into it right now) stays.
    """
    from dagster_ir.storage.atomic import remove

    folder = Path(folder)
    removed: list[Path] = []
    if not folder.parent.is_dir():
        return removed
    for other in folder.parent.iterdir():
        if other.name == folder.name or not other.is_dir() or other.name.startswith("."):
            continue
        with file_lock(other / FOLDER_LOCK, 0) as acquired:
            if acquired:
                remove(other)
                removed.append(other)
    return removed
