"""Atomic file writes: write a temporary file beside the target, then rename it into place.

A reader never sees a half-written file, and a crash mid-write leaves the previous version intact.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(target: str | os.PathLike[str], *, directory: bool = False) -> Iterator[Path]:
    """Yield a temporary path next to `target`; on success move it onto `target` atomically.

    With `directory=True` the temporary path is an empty directory that replaces `target` whole
    (the old directory is removed only after the new one is complete).
    On any exception the temporary file or directory is removed and `target` is left untouched.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    if directory:
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    else:
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        os.close(fd)
        tmp = Path(name)
    try:
        yield tmp
        if directory:
            _replace_directory(tmp, target)
        else:
            os.replace(tmp, target)
    except BaseException:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
        raise


def _replace_directory(tmp: Path, target: Path) -> None:
    if not target.exists():
        os.replace(tmp, target)
        return
    old = target.with_name(f".{target.name}.old-{os.getpid()}")
    os.replace(target, old)
    os.replace(tmp, target)
    shutil.rmtree(old, ignore_errors=True)


def write_text_atomic(target: str | os.PathLike[str], text: str) -> Path:
    """Write `text` to `target` atomically and return the target path."""
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(target)
