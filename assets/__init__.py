"""The Dagster layer of dagster-ir: assets, resources, IO managers, checks, jobs and sensors.

The Definitions live in `assets.definitions` (what workspace.yaml loads); `assets.defs` imports
them on first use, so that `dagster-ir` (assets.cli) can report a bad collections YAML on one line.
"""

import warnings

# Output(data_version=...) is how content hashes and file identities become data versions; Dagster
# marks the parameter beta. Said once here rather than in every run's log.
warnings.filterwarnings("ignore", message="Parameter `data_version`", category=Warning)

__all__ = ["defs"]


def __getattr__(name: str):
    if name == "defs":
        from assets.definitions import defs

        return defs
    raise AttributeError(f"module 'assets' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), "defs"])
