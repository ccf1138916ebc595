"""Partitions: one dynamic partition per Wikipedia dump file, one static partition per collection,
and one static partition per training unit (collection, fold, seed) for every trained method asset.

A trained asset is partitioned by `unit_partitions` and reads the collection assets through
`unit_ins(...)` (each unit reads its collection's partition); the collection's report reads the
trained runs back through `units_in(...)` (a collection's partition reads all of its units: every
fold and seed). `training_unit(context)` is the unit an asset body runs for, and
`dagster_ir.collections.unit_queries(query_splits, unit)` its train / validation / fusion / test
queries:

    @dg.asset(partitions_def=unit_partitions, ins=unit_ins("queries", "query_splits", ...))
    def my_model(context, queries, query_splits, ...):
        unit = training_unit(context)
        roles = unit_queries(query_splits, unit)      # roles.train, roles.validation, roles.test
        domain = offset_seeds(config.to_domain(), unit.seed)
"""

import dagster as dg

from assets.lib.project import collection_specs, training_units
from dagster_ir.collections import TrainingUnit

wiki_dump_partitions = dg.DynamicPartitionsDefinition(name="wiki_dump")
collection_partitions = dg.StaticPartitionsDefinition(sorted(collection_specs()))
unit_partitions = dg.StaticPartitionsDefinition(list(training_units()))

# collection -> its units (a unit reads its collection), and unit -> its collection (a report reads every unit).
UNITS_OF_COLLECTION = dg.StaticPartitionMapping(
    {name: [key for key, unit in training_units().items() if unit.collection == name] for name in collection_specs()}
)
COLLECTION_OF_UNIT = dg.StaticPartitionMapping({key: unit.collection for key, unit in training_units().items()})


def unit_ins(*names: str) -> dict[str, dg.AssetIn]:
    """Inputs of a unit-partitioned asset from collection-partitioned assets (the unit's collection)."""
    return {name: dg.AssetIn(partition_mapping=UNITS_OF_COLLECTION) for name in names}


def units_in(*names: str) -> dict[str, dg.AssetIn]:
    """Inputs of a collection-partitioned asset from unit-partitioned assets (all of its units)."""
    return {name: dg.AssetIn(partition_mapping=COLLECTION_OF_UNIT) for name in names}


def training_unit(context: dg.AssetExecutionContext) -> TrainingUnit:
    """The training unit of the partition being materialized."""
    key = context.partition_key
    units = training_units()
    if key not in units:
        raise ValueError(f"{key!r} is not a training unit of the configured collections (have {sorted(units)})")
    return units[key]
