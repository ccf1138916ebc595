"""The registry of Wikipedia dump files: partition key (the file name) -> path on disk.

Dump files are large and live wherever the user keeps them; the pipeline refers to each by its file
name and records the path here, in `<data_dir>/wiki_dumps.json` (written atomically). `dump_identity`
is a dump file's version: its size, modification time and a hash of its first and last 64 KiB, so
a file replaced in place gets a new version.

A multistream dump may be registered as N partitions (`add_ranges`): keys `<file>@001-of-N`, each
a byte range of whole bz2 streams (the ranges, from `dagster_ir.wiki.split_ranges`, are kept in
`<data_dir>/wiki_dump_ranges.json`), so each part is parsed on its own: in parallel processes now,
on other machines later. A part's version is the file's identity and its range.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from pathlib import Path

from dagster_ir.storage.atomic import write_text_atomic

REGISTRY_FILE = "wiki_dumps.json"
RANGES_FILE = "wiki_dump_ranges.json"
PART_SEPARATOR = "@"
SAMPLE_DUMP = "test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
DUMP_SUFFIXES = (".xml", ".xml.bz2", ".bz2")


def sample_dump_path() -> Path:
    """The real enwiki sample that ships inside the gensim wheel (found, never copied)."""
    spec = importlib.util.find_spec("gensim")  # finds the package without importing it (gensim imports SciPy)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    if not folders:
        raise FileNotFoundError("gensim's bundled Wikipedia sample is missing: gensim is not installed")
    path = Path(folders[0]) / SAMPLE_DUMP
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
        self.ranges_path = Path(data_dir) / RANGES_FILE

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

    def add_ranges(self, dump: str | os.PathLike[str], ranges: list[tuple[int, int]]) -> list[str]:
        """Register a dump as one partition per byte range (whole streams); returns the keys.

        One range registers the whole file under its file name, as `add` does.
        """
        if len(ranges) <= 1:
            return [self.add(dump)]
        path = Path(dump).expanduser().resolve()
        size = path.stat().st_size if path.is_file() else None
        bounds = [b for r in ranges for b in r]
        if (
            bounds[0] != 0
            or bounds[-1] != size
            or any(a >= b for a, b in ranges)
            or any(ranges[i][1] != ranges[i + 1][0] for i in range(len(ranges) - 1))
        ):
            raise ValueError(f"{path}: byte ranges must cover the file in order, got {ranges}")
        name = path.name
        keys = [f"{name}{PART_SEPARATOR}{i + 1:03d}-of-{len(ranges):03d}" for i in range(len(ranges))]
        registered = self.parts_of(name)
        if registered and registered != keys:
            raise ValueError(f"{name}: already registered as {registered}; remove it first (`dagster-ir remove-dump`)")
        self.add(dump)  # checks the file and the name; the whole-file key is replaced below
        entries = self.entries()
        del entries[name]
        stored = self._ranges()
        for key, (start, end) in zip(keys, ranges, strict=True):
            entries[key] = str(path)
            stored[key] = [start, end]
        write_text_atomic(self.ranges_path, json.dumps(stored, indent=2, sort_keys=True) + "\n")
        write_text_atomic(self.path, json.dumps(entries, indent=2, sort_keys=True) + "\n")
        return keys

    def byte_range(self, key: str) -> tuple[int, int] | None:
        """The byte range of partition `key`, None when it is a whole file."""
        found = self._ranges().get(key)
        return None if found is None else (int(found[0]), int(found[1]))

    def identity(self, key: str) -> str:
        """The version of partition `key`: its file's identity and, for a part, its byte range."""
        found = self.byte_range(key)
        identity = dump_identity(self.path_of(key))
        return identity if found is None else f"{identity}@{found[0]}-{found[1]}"

    def parts_of(self, name: str) -> list[str]:
        """The keys registered for the dump file `name`: itself, or its byte-range parts."""
        return sorted(k for k in self.entries() if k == name or k.startswith(name + PART_SEPARATOR))

    def remove(self, key: str) -> Path:
        """Unregister the dump `key` and return the path it pointed to (the file is left alone)."""
        entries = self.entries()
        if key not in entries:
            raise KeyError(f"no dump registered as {key!r} in {self.path} (registered: {sorted(entries)})")
        path = Path(entries.pop(key))
        write_text_atomic(self.path, json.dumps(entries, indent=2, sort_keys=True) + "\n")
        stored = self._ranges()
        if stored.pop(key, None) is not None:
            write_text_atomic(self.ranges_path, json.dumps(stored, indent=2, sort_keys=True) + "\n")
        return path

    def _ranges(self) -> dict[str, list[int]]:
        if not self.ranges_path.exists():
            return {}
        try:
            stored = json.loads(self.ranges_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise ValueError(f"{self.ranges_path}: line {error.lineno}: not valid JSON ({error.msg})") from error
        if not isinstance(stored, dict):
            raise ValueError(f"{self.ranges_path}: expected an object of key -> [start, end]")
        return stored

    def path_of(self, key: str) -> Path:
        entries = self.entries()
        if key not in entries:
            raise KeyError(f"no dump registered as {key!r} in {self.path}; add it with `dagster-ir add-dump PATH`")
        return Path(entries[key])
