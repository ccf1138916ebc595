"""The project's configuration file, read once when the Definitions are built.

`$DAGSTER_IR_CONFIG`, else `./dagster-ir.yaml` if present, else the built-in default (wiki-car).
The configured collections become the static partitions of every collection asset, their training
units (collection, fold, seed; see `dagster_ir.collections.protocol`) the static partitions of
every trained method asset; the optional
top-level `runs:` mapping names external TREC run files to import per collection:

    runs:
      cranfield:
        ance-top100: runs/cranfield-ance.trec     # relative to the YAML file
"""

import os
from functools import cache
from pathlib import Path

from dagster_ir.collections import TrainingUnit, load_collections_config, units_of
from dagster_ir.collections.config import DEFAULT_CONFIG_FILE, load_run_imports

CONFIG_ENV = "DAGSTER_IR_CONFIG"


def config_path() -> Path | None:
    """The project's config file, or None for the built-in default."""
    explicit = os.environ.get(CONFIG_ENV)
    if explicit:
        return Path(explicit)
    return DEFAULT_CONFIG_FILE if DEFAULT_CONFIG_FILE.is_file() else None


@cache
def collection_specs() -> dict:
    """Collection specs by name (the partition keys)."""
    return load_collections_config(config_path())


@cache
def training_units() -> dict[str, TrainingUnit]:
    """Every collection's training units by partition key, collections in name order."""
    specs = collection_specs()
    return {unit.key: unit for name in sorted(specs) for unit in units_of(specs[name])}


@cache
def run_imports() -> dict[str, dict[str, Path]]:
    """External run files by collection and run name."""
    path = config_path()
    return load_run_imports(path) if path else {}
