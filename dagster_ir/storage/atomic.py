"""Atomic file writes: write a temporary entry beside the target, then rename it into place.

A reader never sees a half-written file, and a crash mid-write leaves the previous version intact:
- Temporary entries are named `.<target name>.<host>-<pid>-<random>.tmp`, so two processes (or two
  writers in one) never share one, and `clean_orphans` can tell a dead writer's leftovers from a
  live writer's work in progress.
- The data and its folder are fsynced before the rename and the folder again after it, so a power
  cut cannot leave a renamed but empty file.
- A folder replaces a folder by an atomic exchange (Linux `renameat2(RENAME_EXCHANGE)`), so the
  target is never missing; where the file system cannot exchange, the old folder is parked as
  `.<name>.old-<host>-<pid>-<random>` for the instant between two renames.
- New files get the mode `0o666 & ~umask` and folders `0o777 & ~umask`, like any file the process
  creates (not the 0600/0700 of `mkstemp`/`mkdtemp`), so a group-shared data directory stays readable.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

_ORPHAN = re.compile(r"^\..+\.(?:old-)?(?P<host>[0-9a-f]{8})-(?P<pid>\d+)-[A-Za-z0-9_]+(?:\.tmp)?$")


@cache
def host_tag() -> str:
    """Eight hex digits naming this machine in temporary names (a data directory may be shared)."""
    return hashlib.blake2b(socket.gethostname().encode(), digest_size=4).hexdigest()


def writer_tag() -> str:
    """`<host>-<pid>`: who writes a temporary entry."""
    return f"{host_tag()}-{os.getpid()}"


def temp_name(target: str | os.PathLike[str]) -> Path:
    """A fresh temporary name beside `target` (nothing is created)."""
    target = Path(target)
    return target.with_name(f".{target.name}.{writer_tag()}-{os.urandom(4).hex()}.tmp")


@contextmanager
def atomic_path(target: str | os.PathLike[str], *, directory: bool = False) -> Iterator[Path]:
    """Yield a temporary path next to `target`; on success move it onto `target` atomically.

    With `directory=True` the temporary path is an empty directory that replaces `target` whole
    (the old directory is removed only after the new one is in place).
    On any exception the temporary file or directory is removed and `target` is left untouched.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    prefix = f".{target.name}.{writer_tag()}-"
    if directory:
        tmp = Path(tempfile.mkdtemp(prefix=prefix, suffix=".tmp", dir=target.parent))
        os.chmod(tmp, 0o777 & ~umask())
    else:
        fd, name = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=target.parent)
        os.fchmod(fd, 0o666 & ~umask())
        os.close(fd)
        tmp = Path(name)
    try:
        yield tmp
        sync_tree(tmp)
        if directory:
            replace_directory(tmp, target)
        else:
            os.replace(tmp, target)
        _fsync(target.parent)
    except BaseException:
        remove(tmp)
        raise


def write_text_atomic(target: str | os.PathLike[str], text: str) -> Path:
    """Write `text` to `target` atomically and return the target path."""
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(target)


def replace_directory(new: Path, target: Path) -> None:
    """Move the complete folder `new` onto `target` (which may exist); `target` is never missing."""
    new, target = Path(new), Path(target)
    try:
        os.rename(new, target)  # no target yet (rename, unlike replace, fails on any existing target)
        return
    except OSError as error:
        if error.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR, errno.ENOTDIR):
            raise
    if _exchange(new, target):  # `new` now holds the old folder
        remove(new)
        return
    old = target.with_name(f".{target.name}.old-{writer_tag()}-{os.urandom(4).hex()}")
    os.replace(target, old)
    os.replace(new, target)
    remove(old)


def remove(path: Path) -> None:
    """Remove a file or folder if it exists (errors ignored: it is only ever our own leftover)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def clean_orphans(root: str | os.PathLike[str]) -> list[Path]:
    """Remove temporary and parked `.old-*` entries under `root` whose writer on this host is gone.

    Entries of a live process, of another host, and anything not named by this module stay.
    Returns what was removed.
    """
    removed: list[Path] = []
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            match = _ORPHAN.match(name)
            if match and match["host"] == host_tag() and not pid_alive(int(match["pid"])):
                path = Path(folder, name)
                remove(path)
                removed.append(path)
        dirs[:] = [d for d in dirs if Path(folder, d).exists()]
    return removed


def sync_tree(path: Path) -> None:
    """fsync a file, or every file and folder under a folder (the folder last), each file first given at
    least the mode `0o666 & ~umask` (safetensors creates its files 0600 whatever the umask)."""
    shared = 0o666 & ~umask()
    if path.is_dir():
        for folder, _, files in os.walk(path, topdown=False):
            for name in files:
                _share(Path(folder, name), shared)
                _fsync(Path(folder, name))
            _fsync(Path(folder))
    else:
        _share(path, shared)
        _fsync(path)


def _share(path: Path, mode: int) -> None:
    current = os.stat(path).st_mode & 0o7777
    if current | mode != current:
        os.chmod(path, current | mode)


def umask() -> int:
    """The process umask, read without changing it where Linux allows."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def pid_alive(pid: int) -> bool:
    """Whether a process with this id runs on this host (a zombie, killed but not yet waited for by
    its parent, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # Linux: the state after the command's closing parenthesis; Z is a zombie
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


@cache
def _renameat2():
    try:
        return ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically; False where the system or file system cannot."""
    renameat2 = _renameat2()
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM):
        return False
    raise OSError(code, os.strerror(code), str(b))
