"""Partitions: one dynamic partition per Wikipedia dump file, one static partition per collection."""

import dagster as dg

from assets.project import collection_specs

wiki_dump_partitions = dg.DynamicPartitionsDefinition(name="wiki_dump")
collection_partitions = dg.StaticPartitionsDefinition(sorted(collection_specs()))
