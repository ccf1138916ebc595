"""The Dagster layer of dagster-ir: assets, resources, IO managers, checks, jobs and sensors."""

from assets.definitions import defs

__all__ = ["defs"]
