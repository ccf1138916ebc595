"""The Dagster layer of dagster-ir: assets, resources, IO managers, checks, jobs and sensors."""

import warnings

# Output(data_version=...) is how content hashes and file identities become data versions; Dagster
# marks the parameter beta. Said once here rather than in every run's log.
warnings.filterwarnings("ignore", message="Parameter `data_version`", category=Warning)

from assets.definitions import defs  # noqa: E402

__all__ = ["defs"]
