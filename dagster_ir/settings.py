"""Where dagster-ir keeps its data: one directory, set by `DAGSTER_IR_DATA` (default `./data`)."""

from __future__ import annotations

import os
from pathlib import Path

DATA_DIR_ENV = "DAGSTER_IR_DATA"
DEFAULT_DATA_DIR = "data"


def data_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The data directory: `explicit` if given, else $DAGSTER_IR_DATA, else ./data (absolute)."""
    chosen = explicit or os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR
    return Path(chosen).expanduser().resolve()
