"""Bring every asset up to date, materializing only what is missing or stale.

Staleness is Dagster's own: an asset partition is stale when its code version or the data version
of an upstream asset changed since it was materialized. Each round materializes the stale or missing
asset partitions whose upstream is already fresh, one run per partition key, until nothing is left.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import dagster as dg

# Dagster's stale-status resolver is what the UI's "stale" badges use; it has no public entry point,
# so its three private imports are kept here, in one place.
from dagster._core.asset_graph_view.asset_graph_view import AssetGraphView, TemporalContext
from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
from dagster._time import get_current_datetime


@dataclass
class UpdateReport:
    runs: list[tuple[str | None, list[str]]] = field(default_factory=list)  # (partition, asset keys)
    fresh: int = 0

    @property
    def materialized(self) -> int:
        return sum(len(keys) for _, keys in self.runs)


def _status_map(
    defs: dg.Definitions, instance: dg.DagsterInstance, selection: dg.AssetSelection | None = None
) -> dict[tuple[dg.AssetKey, str | None], StaleStatus]:
    graph = defs.resolve_asset_graph()
    keys = selection.resolve(graph) if selection is not None else graph.materializable_asset_keys
    view = AssetGraphView(
        temporal_context=TemporalContext(effective_dt=get_current_datetime(), last_event_id=None),
        instance=instance,
        asset_graph=graph,
    )
    resolver = CachingStaleStatusResolver(instance=instance, asset_graph=graph, loading_context=view)
    statuses = {}
    for key in keys:
        partitions_def = graph.get(key).partitions_def
        if partitions_def is None:
            statuses[(key, None)] = resolver.get_status(key)
        else:
            for pk in partitions_def.get_partition_keys(dynamic_partitions_store=instance):
                statuses[(key, pk)] = resolver.get_status(key, pk)
    return statuses


def stale_partitions(
    defs: dg.Definitions, instance: dg.DagsterInstance, selection: dg.AssetSelection | None = None
) -> list[tuple[dg.AssetKey, str | None]]:
    """Every (asset, partition) that is missing or stale (within `selection`), in no particular order."""
    return [k for k, s in _status_map(defs, instance, selection).items() if s != StaleStatus.FRESH]


def update_all(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    *,
    resources: dict,
    log: Callable[[str], None] = print,
    log_level: str = "WARNING",
    selection: dg.AssetSelection | None = None,
    max_rounds: int = 40,
) -> UpdateReport:
    """Materialize stale and missing asset partitions (of `selection`, default all), upstream first."""
    graph = defs.resolve_asset_graph()
    assets = list(defs.assets or [])
    checks = list(defs.asset_checks or [])
    report = UpdateReport()
    for _ in range(max_rounds):
        statuses = _status_map(defs, instance, selection)
        pending = {k for k, s in statuses.items() if s != StaleStatus.FRESH}
        if not pending:
            report.fresh = len(statuses)
            return report
        pending_keys = {key for key, _ in pending}
        ready: dict[str | None, list[dg.AssetKey]] = defaultdict(list)
        for key, partition in sorted(pending, key=lambda kp: (kp[1] or "", kp[0].to_user_string())):
            if not (graph.get(key).parent_keys & pending_keys):
                ready[partition].append(key)
        for partition, keys in ready.items():
            names = [k.to_user_string() for k in keys]
            log(f"materializing {', '.join(names)}" + (f" [{partition}]" if partition else ""))
            result = dg.materialize(
                [*assets, *checks],
                # a multi-asset that cannot be subset runs whole, even if only some outputs are stale
                selection=dg.AssetSelection.assets(*keys).required_multi_asset_neighbors(),
                instance=instance,
                resources=resources,
                partition_key=partition,
                raise_on_error=True,
                run_config={"loggers": {"console": {"config": {"log_level": log_level}}}},
            )
            if not result.success:
                raise RuntimeError(f"run {result.run_id} failed")
            report.runs.append((partition, names))
    raise RuntimeError(f"assets still stale after {max_rounds} rounds")
