"""Resources: where the data lives and which dump files are registered."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from dagster_ir.settings import data_dir
from dagster_ir.storage.catalog import Catalog
from dagster_ir.storage.dumps import DumpRegistry


class DataDirResource(dg.ConfigurableResource):
    """The one data directory: tables, files, the catalog and the dump registry."""

    path: str = ""  # empty: $DAGSTER_IR_DATA, else ./data

    def root(self) -> Path:
        return data_dir(self.path or None)

    def files(self, *parts: str) -> Path:
        """A folder for non-tabular outputs (indexes, checkpoints, reports) under the data dir."""
        folder = self.root().joinpath("files", *parts)
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def relative(self, path: str | Path) -> str:
        """`path` as a metadata entry or a stored record names it: relative to the data directory when it
        lies under it (`files/...`, `tables/...`), so a moved or copied directory's entries stay true."""
        try:
            return Path(path).resolve().relative_to(self.root().resolve()).as_posix()
        except ValueError:
            return str(path)

    def catalog(self) -> Catalog:
        return Catalog(self.root())

    def dumps(self) -> DumpRegistry:
        return DumpRegistry(self.root())
