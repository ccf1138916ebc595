"""Asset config per collection: the `assets:` field of a collection in the YAML.

    collections:
      cranfield:
        kind: cranfield
        path: ../shared/data/cranfield
        assets:
          neural_baselines: {models: [drmm, knrm, bert-maxp, cedr-knrm]}

gives those config fields to every partition of that collection (its training units included),
however it is materialized (`update`, `reproduce`, the UI, a schedule). A field given in the run's
own config (the UI's launchpad) wins over the YAML, which wins over the config class's default.

An asset takes settings when it is listed in `SETTABLE` (with its config class, so a misspelt
field is an error naming the file and the field when the definitions load), calls
`with_settings` on its config and depends on `collection_settings`, the observable source whose
version per collection hashes that collection's `assets` field alone: editing the settings makes
the assets that read them stale and nothing else.
"""

from __future__ import annotations

import dagster as dg
from pydantic import ValidationError

from assets.metadata import source_metadata, source_tags
from assets.partitions import UNITS_OF_COLLECTION, collection_partitions
from assets.project import collection_specs, config_path
from dagster_ir.collections.config import CollectionConfigError, settings_versions


@dg.observable_source_asset(group_name="collections", partitions_def=collection_partitions, tags=source_tags("yaml"),
                             metadata=source_metadata("the `assets:` settings of the collection in the collections YAML",
                                                      "the assets those settings configure (neural_baselines)"))
def collection_settings() -> dg.DataVersionsByPartition:
    """Each collection's `assets` settings (a hash; "none" without any)."""
    versions = settings_versions(config_path())
    return dg.DataVersionsByPartition(
        {name: dg.DataVersion(versions.get(name, "none")) for name in collection_partitions.get_partition_keys()}
    )


# Dependency of a unit-partitioned asset on its collection's settings.
UNIT_SETTINGS = dg.AssetDep(collection_settings, partition_mapping=UNITS_OF_COLLECTION)


def with_settings(config: dg.Config, asset: str, collection: str) -> dg.Config:
    """`config` with the collection's settings for `asset` filled in where the run's config left a field unset."""
    given = collection_specs()[collection].assets.get(asset, {})
    explicit = {name: getattr(config, name) for name in config.model_fields_set}
    return _build(type(config), {**given, **explicit}, asset, collection)


def check_settings(settable: dict[str, type[dg.Config]]) -> None:
    """Every collection's settings name an asset of `settable` and fields of its config class."""
    for name, spec in collection_specs().items():
        for asset, values in spec.assets.items():
            if asset not in settable:
                raise _error(name, asset, f"this asset takes no settings here (those that do: {sorted(settable)})")
            _build(settable[asset], values, asset, name)


def _build(cls: type[dg.Config], values: dict, asset: str, collection: str) -> dg.Config:
    unknown = sorted(set(values) - set(cls.model_fields))
    if unknown:
        raise _error(collection, f"{asset}.{unknown[0]}", f"unknown config field (known: {sorted(cls.model_fields)})")
    try:
        return cls(**values)
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        raise _error(collection, f"{asset}.{field}", first["msg"]) from None


def _error(collection: str, where: str, message: str) -> CollectionConfigError:
    return CollectionConfigError(f"{config_path() or 'built-in config'}: collections.{collection}.assets.{where}: {message}")
