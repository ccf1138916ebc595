"""The Dagster layer of dagster-ir: assets, resources, IO managers, checks, jobs and sensors.

Three layers, imports running downward: `assets.lib` (Dagster helpers: partitions, resources, IO
managers, metadata, settings, staleness), `assets.defs` (the asset modules, one per group, with their
checks, jobs, schedules and sensors), `assets.definitions` (the one Definitions object, what
workspace.yaml loads) and `assets.cli.main` (the `dagster-ir` command line, which imports the definitions
where it needs them, so that it can report a bad collections YAML on one line).
"""

import warnings

# Output(data_version=...) is how content hashes and file identities become data versions; Dagster
# marks the parameter beta. Said once here rather than in every run's log.
warnings.filterwarnings("ignore", message="Parameter `data_version`", category=Warning)
