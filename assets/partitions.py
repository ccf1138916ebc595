"""Partitions: one dynamic partition per Wikipedia dump file."""

import dagster as dg

wiki_dump_partitions = dg.DynamicPartitionsDefinition(name="wiki_dump")
