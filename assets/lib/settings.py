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

Profiles: a collection's `profile: demo | paper` fills the `profile` field (and GHRM's `sweep_profile`)
of every config that has one, for that collection's partitions; a run-wide profile (`--profile` of
`dagster-ir update` and `reproduce`, carried by the run's `dagster_ir/profile` tag) replaces the
collection's; a profile in the collection's `assets` settings or in the run's own config wins over
both. The unpartitioned PHP pre-training assets take the run-wide profile alone (`with_profile`).
The command line also sets $DAGSTER_IR_PROFILE in its own process, so that observing the settings
(`collection_settings`, `run_profile_setting`) makes what a profile change touches stale; the UI's
observation runs carry the last observed profile as their tag instead (assets.defs.observation).

An asset takes settings when it is listed in `SETTABLE` (with its config class, so a misspelt
field is an error naming the file and the field when the definitions load), calls
`with_settings` on its config and depends on `collection_settings`, the observable source whose
version per collection hashes that collection's `assets` field alone: editing the settings makes
the assets that read them stale and nothing else.
"""

from __future__ import annotations

import inspect
import os
import warnings

import dagster as dg
from pydantic import ValidationError

from assets.lib.metadata import source_metadata, source_tags
from assets.lib.partitions import UNITS_OF_COLLECTION, collection_partitions
from assets.lib.project import collection_specs, config_path
from dagster_ir.collections.config import PROFILE_NAMES, CollectionConfigError, settings_versions

PROFILE_TAG = "dagster_ir/profile"  # the run-wide profile of a run (`--profile` of the command line)
PROFILE_ENV = "DAGSTER_IR_PROFILE"  # the same in the command line's process, for observing the settings
PROFILE_FIELDS = ("profile", "sweep_profile")  # config fields a profile fills


def env_profile() -> str | None:
    """The run-wide profile of this process ($DAGSTER_IR_PROFILE), checked."""
    return _checked(os.environ.get(PROFILE_ENV) or None, f"${PROFILE_ENV}")


def run_profile(context) -> str | None:
    """The run-wide profile of the run `context` belongs to (its `dagster_ir/profile` tag), or None."""
    tags = {}
    if context is not None:
        try:
            tags = context.run.tags
        except dg.DagsterError:  # a context built for a direct call (tests) has no run, only its tags
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                tags = context.run_tags
    return _checked(tags.get(PROFILE_TAG) or None, f"run tag {PROFILE_TAG}")


def _checked(profile: str | None, where: str) -> str | None:
    if profile is not None and profile not in PROFILE_NAMES:
        raise ValueError(f"{where}: unknown profile {profile!r} (choose from {list(PROFILE_NAMES)})")
    return profile


@dg.observable_source_asset(
    group_name="collections",
    partitions_def=collection_partitions,
    tags=source_tags("yaml"),
    metadata=source_metadata(
        "the `assets:` settings of the collection in the collections YAML",
        "the assets those settings configure (neural_baselines)",
    ),
)
def collection_settings(context) -> dg.DataVersionsByPartition:
    """Each collection's `assets` settings and profile (a hash; "none" without any)."""
    versions = settings_versions(config_path(), observed_profile(context))
    return dg.DataVersionsByPartition(
        {name: dg.DataVersion(versions.get(name, "none")) for name in collection_partitions.get_partition_keys()}
    )


@dg.observable_source_asset(group_name="collections")
def run_profile_setting(context) -> dg.DataVersion:
    """The run-wide profile the command line asked for ("default" without --profile), for the PHP pre-training."""
    return dg.DataVersion(observed_profile(context) or "default")


def observed_profile(context) -> str | None:
    """The run-wide profile a source is observed with: the observing run's tag (the UI's observation
    sensor carries the last observed one), else this process's (the command line's `--profile`)."""
    return run_profile(context) or env_profile()


# Dependency of a unit-partitioned asset on its collection's settings.
UNIT_SETTINGS = dg.AssetDep(collection_settings, partition_mapping=UNITS_OF_COLLECTION)


def with_settings(config: dg.Config, asset: str, collection: str, context=None) -> dg.Config:
    """`config` with the collection's settings for `asset` (and the profile: the run's, else the
    collection's) filled in where the run's config left a field unset."""
    spec = collection_specs()[collection]
    given = {**_profile_defaults(type(config), run_profile(context) or spec.profile), **spec.assets.get(asset, {})}
    explicit = {name: getattr(config, name) for name in config.model_fields_set}
    return _build(type(config), {**given, **explicit}, asset, collection)


def with_profile(config: dg.Config, context) -> dg.Config:
    """`config` with the run-wide profile where the run's config left the profile unset (unpartitioned assets)."""
    defaults = _profile_defaults(type(config), run_profile(context))
    if not defaults:
        return config
    return type(config)(**{**defaults, **{name: getattr(config, name) for name in config.model_fields_set}})


def _profile_defaults(cls: type[dg.Config], profile: str | None) -> dict[str, str]:
    return {name: profile for name in PROFILE_FIELDS if profile and name in cls.model_fields}


def settable_configs(assets) -> dict[str, type[dg.Config]]:
    """{asset name: config class} of the assets that read their collection's settings (they depend on
    `collection_settings`, directly or by training unit)."""
    settable = {}
    for asset in assets:
        if not isinstance(asset, dg.AssetsDefinition) or collection_settings.key not in asset.dependency_keys:
            continue
        cls = _config_class(asset.node_def)
        if cls is not None:
            settable.update({key.to_user_string(): cls for key in asset.keys})
    return settable


def _config_class(node) -> type[dg.Config] | None:
    """The `config` parameter's class of an asset's function (None without one)."""
    for parameter in inspect.signature(node.compute_fn.decorated_fn).parameters.values():
        if isinstance(parameter.annotation, type) and issubclass(parameter.annotation, dg.Config):
            return parameter.annotation
    return None


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
    return CollectionConfigError(
        f"{config_path() or 'built-in config'}: collections.{collection}.assets.{where}: {message}"
    )
