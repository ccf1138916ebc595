"""The registry of Wikipedia dump files: partition key (the file name) -> path on disk.

Dump files are large and live wherever the user keeps them; the pipeline refers to each by its file
name and records the path here, in `<data_dir>/wiki_dumps.json` (written atomically). `dump_identity`
is a dump file's version: its size, modification time and a hash of its first and last 64 KiB, so
a file replaced in place gets a new version.
"""

from __future__ import annotations

import hashlib
import json
import os
from importlib import resources
from pathlib import Path

from dagster_ir.storage.atomic import write_text_atomic

REGISTRY_FILE = "wiki_dumps.json"
SAMPLE_DUMP = "test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
DUMP_SUFFIXES = (".xml", ".xml.bz2", ".bz2")


def sample_dump_path() -> Path:
    """The real enwiki sample that ships inside the gensim wheel (found, never copied)."""
    path = Path(str(resources.files("gensim") / SAMPLE_DUMP))
    if not path.exists():
        raise FileNotFoundError(f"gensim's bundled Wikipedia sample is missing: {path}")
    return path


def dump_identity(path: str | os.PathLike[str]) -> str:
    """The version of a dump file: size, mtime and a hash of its head and tail ("missing" if gone)."""
    path = Path(path)
    try:
        stat = path.stat()
        digest = hashlib.blake2b(digest_size=6)
        with open(path, "rb") as handle:
            digest.update(handle.read(1 << 16))
            handle.seek(max(0, stat.st_size - (1 << 16)))
            digest.update(handle.read(1 << 16))
    except OSError:
        return "missing"
    return f"{stat.st_size}-{stat.st_mtime_ns}-{digest.hexdigest()}"


class DumpRegistry:
    """Maps dump partition keys to files; keys are file names, unique within the registry."""

    def __init__(self, data_dir: str | os.PathLike[str]):
        self.path = Path(data_dir) / REGISTRY_FILE

    def entries(self) -> dict[str, str]:
        if not self.path.exists():
            return {}
        try:
            entries = json.loads(self.path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise ValueError(f"{self.path}: line {error.lineno}: not valid JSON ({error.msg})") from error
        if not isinstance(entries, dict):
            raise ValueError(f"{self.path}: expected an object of key -> path")
        return entries

    def add(self, dump: str | os.PathLike[str]) -> str:
        """Register a dump file and return its partition key (its file name)."""
        path = Path(dump).expanduser().resolve()
        if not path.is_file():
            raise FileNotFoundError(f"dump file does not exist: {path}")
        if not path.name.endswith(DUMP_SUFFIXES):
            raise ValueError(f"{path}: a dump must be .xml or .xml.bz2")
        entries = self.entries()
        key = path.name
        if entries.get(key, str(path)) != str(path):
            raise ValueError(f"{key}: already registered for another file, {entries[key]}")
        entries[key] = str(path)
        write_text_atomic(self.path, json.dumps(entries, indent=2, sort_keys=True) + "\n")
        return key

    def remove(self, key: str) -> Path:
        """Unregister the dump `key` and return the path it pointed to (the file is left alone)."""
        entries = self.entries()
        if key not in entries:
            raise KeyError(f"no dump registered as {key!r} in {self.path} (registered: {sorted(entries)})")
        path = Path(entries.pop(key))
        write_text_atomic(self.path, json.dumps(entries, indent=2, sort_keys=True) + "\n")
        return path

    def path_of(self, key: str) -> Path:
        entries = self.entries()
        if key not in entries:
            raise KeyError(f"no dump registered as {key!r} in {self.path}; add it with `dagster-ir add-dump PATH`")
        return Path(entries[key])
