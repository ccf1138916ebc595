"""Which asset partitions are missing or stale, and why (what `dagster-ir update` and `status` ask).

Staleness is Dagster's own (an asset partition is stale when its code version or the data version
of an upstream asset changed since it was materialized), with the data outside the code brought in:
- the observable source assets (each collection's section of the collections YAML, the imported
  run files, each dump file) are observed first, so a change there makes exactly its readers stale;
- an asset partition whose Parquet table is gone counts as missing;
- one whose catalog record read a partition that no longer exists (a removed dump, a collection
  dropped from the YAML) counts as stale;
- one downstream of a stale or missing one counts as stale too (Dagster looks one level up only).

Every asset that reads a partitioned observable source gives its output a content-based data
version: Dagster records such a source's version in its readers as the hash of no materialization
(it looks only at materializations), so a reader's own version, computed from its inputs', would not
change when the file did, and its readers would never see the change.

An asset states in its metadata (`UPSTREAM_READ_BY`) when only some of its partitions read an
upstream asset, so a failing dump does not block the collections that do not use Wikipedia.
Everything here takes the definitions as an argument.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from pathlib import Path

import dagster as dg

# Dagster's stale-status resolver (what the UI's "stale" badges use) has no public entry point:
# assets.lib.dagster_private wraps it, with the in-process `observe`.
from assets.lib.dagster_private import FRESH, MISSING, STALE, StaleResolver, observe
from assets.lib.io_managers import PolarsParquetIOManager
from dagster_ir.storage.catalog import Catalog
from dagster_ir.storage.parquet import table_path

# Asset metadata {upstream asset: [partitions of this asset that read it]}: the other partitions
# do not wait for, and are not blocked by, that upstream asset.
UPSTREAM_READ_BY = "dagster_ir/upstream_read_by"


Key = tuple[dg.AssetKey, str | None]


class _State:
    """Statuses, partitions and upstream partitions of one definitions object, read on demand."""

    def __init__(
        self,
        defs: dg.Definitions,
        instance: dg.DagsterInstance,
        resources: dict | None,
        selection: dg.AssetSelection | None,
        only: set[Key] | None = None,
    ) -> None:
        self.defs, self.instance, self.resources = defs, instance, resources or {}
        self.only = only  # if given, the asset partitions looked at (others count as not wanted)
        self.graph = defs.resolve_asset_graph()
        self.root = _data_root(self.resources)
        self.selected = selection.resolve(self.graph) if selection is not None else self.graph.materializable_asset_keys
        self.partitions = {
            key: _partition_keys(self.graph.get(key).partitions_def, instance)
            for key in self.graph.materializable_asset_keys
        }
        self.tables = _parquet_assets(defs, self.resources)

    def statuses(
        self, only: tuple[list[dg.AssetKey], str | None] | None = None, resolver: StaleResolver | None = None
    ) -> dict[Key, object]:
        """Status (FRESH, STALE, MISSING) of every selected asset partition (or of `only` = (keys, partition)),
        files included."""
        resolver = resolver or StaleResolver(self.instance, self.graph)
        wanted = (
            [(k, p) for k in self.selected for p in self.partitions[k]]
            if only is None
            else [(k, only[1]) for k in only[0] if only[1] in self.partitions[k]]
        )
        if self.only is not None:
            wanted = [kp for kp in wanted if kp in self.only]
        statuses = {(k, p): resolver.status(k, p) for k, p in wanted}
        if self.root is None:
            return statuses
        for (key, pk), status in statuses.items():
            if status == FRESH and key in self.tables and not table_path(self.root, list(key.path), pk).exists():
                statuses[(key, pk)] = MISSING
        for key_partition in self._read_removed_partitions():
            if statuses.get(key_partition) == FRESH:
                statuses[key_partition] = STALE
        return self._downstream_of_pending(statuses)

    def _downstream_of_pending(self, statuses: dict[Key, str]) -> dict[Key, str]:
        """A fresh asset partition that reads, directly or not, a stale or missing one counts as stale.

        Dagster's own status looks one level up only, so the readers of a reader of a changed file
        would show fresh until their upstream is redone (then, with content-based data versions,
        only those whose input did change are redone).
        """
        memo: dict[Key, bool] = {}

        def waits(key_partition: Key) -> bool:
            if key_partition not in memo:
                memo[key_partition] = False  # guards against cycles
                memo[key_partition] = any(
                    p in statuses and (statuses[p] != FRESH or waits(p)) for p in self.parents(*key_partition)
                )
            return memo[key_partition]

        return {k: STALE if s == FRESH and waits(k) else s for k, s in statuses.items()}

    def parents(self, key: dg.AssetKey, partition: str | None) -> list[Key]:
        """The upstream asset partitions `(key, partition)` reads (materializable ones only)."""
        node = self.graph.get(key)
        read_by = _metadata_value(node.metadata.get(UPSTREAM_READ_BY)) or {}
        parents = []
        for parent in node.parent_keys:
            if parent not in self.partitions:
                continue
            readers = read_by.get(parent.to_user_string())
            if readers is not None and partition not in readers:
                continue
            parents.extend((parent, pp) for pp in self._mapped(key, partition, parent))
        return parents

    def _mapped(self, child: dg.AssetKey, partition: str | None, parent: dg.AssetKey) -> list[str | None]:
        keys = self.partitions[parent]
        if keys == [None] or partition is None:
            return keys
        mapping = self.graph.get_partition_mapping(child, parent)
        if isinstance(mapping, dg.IdentityPartitionMapping):
            return [partition] if partition in keys else []
        if isinstance(mapping, dg.AllPartitionMapping):
            return keys
        child_def, parent_def = self.graph.get(child).partitions_def, self.graph.get(parent).partitions_def
        try:
            result = mapping.get_upstream_mapped_partitions_result_for_partitions(
                child_def.subset_with_partition_keys([partition]),
                child_def,
                parent_def,
                dynamic_partitions_store=self.instance,
            )
            return list(result.partitions_subset.get_partition_keys())
        except Exception:  # a mapping we cannot evaluate here: assume it reads every partition
            return keys

    def _read_removed_partitions(self) -> set[Key]:
        """Asset partitions whose latest catalog record read a partition that no longer exists."""
        catalog = Catalog(self.root)
        if not catalog.path.exists():
            return set()
        valid = {k.to_user_string(): set(v) for k, v in self.partitions.items() if v != [None]}
        try:
            latest = catalog.query(
                "select asset_key, partition, inputs::varchar as inputs from materializations "
                "qualify row_number() over (partition by asset_key, partition order by materialized_at desc) = 1"
            )
        except Exception:  # a busy or unreadable catalog only loses this refinement
            return set()
        removed = set()
        for asset, partition, inputs in latest.iter_rows():
            for read in json.loads(inputs or "[]") or []:
                name, read_partition = read.get("asset"), read.get("partition")
                if read_partition is not None and name in valid and read_partition not in valid[name]:
                    removed.add((dg.AssetKey.from_user_string(asset), partition))
                    break
        return removed


def stale_partitions(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    selection: dg.AssetSelection | None = None,
    *,
    resources: dict | None = None,
) -> list[tuple[dg.AssetKey, str | None]]:
    """Every (asset, partition) that is missing or stale (within `selection`), in no particular order.

    With `resources`, the source assets are observed first and the table files are looked at.
    """
    if resources is not None:
        observe_sources(defs, instance, resources)
    statuses = _State(defs, instance, resources, selection).statuses()
    return [k for k, s in statuses.items() if s != FRESH]


def stale_reasons(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    selection: dg.AssetSelection | None = None,
    *,
    resources: dict | None = None,
) -> list[tuple[Key, str, list[str]]]:
    """Every missing or stale (asset, partition) with its status ("missing" / "stale") and why:
    the upstream asset partition that has a new data version, the code version that changed, the
    table file that is gone, or the partition it read that no longer exists. One stale only because
    something further upstream is pending names that asset partition and its own reason. Sorted by asset."""
    if resources is not None:
        observe_sources(defs, instance, resources)
    state = _State(defs, instance, resources, selection)
    resolver = StaleResolver(instance, state.graph)
    statuses = state.statuses(resolver=resolver)
    removed = state._read_removed_partitions() if state.root is not None else set()
    own: dict[Key, list[str] | None] = {}  # None: stale only through a pending upstream (see `_downstream_of_pending`)
    for (key, partition), status in statuses.items():
        if status == FRESH:
            continue
        dagster_says = resolver.status(key, partition)
        if status == MISSING and dagster_says == FRESH:
            own[key, partition] = [f"its table file is gone ({table_path(state.root, list(key.path), partition)})"]
        elif status == STALE and dagster_says == FRESH:
            read_removed = (
                "it read a partition that no longer exists (a removed dump, or a collection dropped from the YAML)"
            )
            own[key, partition] = [read_removed] if (key, partition) in removed else None
        elif status == MISSING:
            own[key, partition] = ["never materialized"]
        else:
            own[key, partition] = resolver.causes(key, partition) or ["stale (Dagster names no cause)"]
    out = []
    for (key, partition), reasons in sorted(own.items(), key=lambda item: _order_key(item[0])):
        if reasons is None:
            reasons = [
                f"reads {_key_name(origin)}, {'missing' if statuses[origin] == MISSING else 'stale'}: {own[origin][0]}"
                for origin in _pending_origins((key, partition), state, own)
            ] or ["an upstream asset partition is stale"]
        status = statuses[key, partition]
        out.append(((key, partition), "missing" if status == MISSING else "stale", reasons))
    return out


def _pending_origins(start: Key, state: _State, own: dict[Key, list[str] | None]) -> list[Key]:
    """The nearest pending upstream asset partitions of `start` that are stale or missing for a reason of
    their own (not only through their upstream), in asset order."""
    found, seen, todo = set(), {start}, [start]
    while todo:
        for parent in state.parents(*todo.pop()):
            if parent in seen or parent not in own:
                continue
            seen.add(parent)
            if own[parent] is not None:
                found.add(parent)
            else:
                todo.append(parent)
    return sorted(found, key=_order_key)


def _order_key(key_partition: Key) -> tuple[str, str]:
    return key_partition[0].to_user_string(), key_partition[1] or ""


def _key_name(key_partition: Key) -> str:
    key, partition = key_partition
    return key.to_user_string() + (f"[{partition}]" if partition else "")


_FAILURE_EVENTS = {"STEP_FAILURE", "RUN_FAILURE", "PIPELINE_FAILURE"}


class _NoFailureEvents(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        event = getattr(record, "dagster_event", None) or (getattr(record, "dagster_meta", None) or {}).get(
            "dagster_event"
        )
        return getattr(event, "event_type_value", None) not in _FAILURE_EVENTS


@contextmanager
def without_failure_events():
    """Dagster's console loggers made meanwhile leave out step and run failures (their stack traces).

    Dagster makes a new console logger per run, of the current logging class, and offers no hook
    for a filter; so the class is swapped while the run starts. The run's own log keeps everything.
    """
    base = logging.getLoggerClass()

    class Filtered(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.addFilter(_NoFailureEvents())

    logging.setLoggerClass(Filtered)
    try:
        yield
    finally:
        logging.setLoggerClass(base)


def needed_by(defs: dg.Definitions, instance: dg.DagsterInstance, targets: list[Key]) -> set[Key]:
    """`targets` and every materializable asset partition they read, directly or not.

    Upstream partitions follow the assets' partition mappings (and `UPSTREAM_READ_BY`), as `update`
    follows them: a collection's report needs that collection's partitions, all of its training
    units, and the unpartitioned and dump-partitioned assets it reads, not other collections'.
    """
    state = _State(defs, instance, None, None)
    needed: set[Key] = set()
    todo = [kp for kp in targets if kp[1] in state.partitions.get(kp[0], [])]
    while todo:
        key_partition = todo.pop()
        if key_partition not in needed:
            needed.add(key_partition)
            todo.extend(state.parents(*key_partition))
    return needed


def failure_message(result) -> str:
    """The errors of a failed run's steps, one line each: `step: message`.

    The message is the user's exception under Dagster's wrappers (not the deepest cause: a
    `DumpError` naming the file and page keeps them over the XML error it wraps); the module path
    of our own errors' class is left out, their message names the file, line or field.
    """
    lines = []
    for event in result.get_step_failure_events():
        error = event.step_failure_data.error if event.step_failure_data else None
        while error is not None and error.cause is not None and error.cls_name.startswith("Dagster"):
            error = error.cause  # the user's exception, under Dagster's wrapper
        lines.append(f"{event.step_key}: {_error_line(error)}")
    return "; ".join(lines) or f"run {result.run_id} failed"


def _error_line(error) -> str:
    if error is None:
        return "failed"
    text = (error.message.strip().splitlines() or ["?"])[0]
    qualified, sep, rest = text.partition(": ")
    if sep and qualified.startswith("dagster_ir.") and qualified.endswith(f".{error.cls_name}"):
        return rest
    return text


def observe_sources(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    resources: dict,
    *,
    log: Callable[[str], None] = print,
    traces: bool = True,
) -> None:
    """Observe every observable source asset (their data versions are what staleness compares)."""
    sources = [a for a in defs.assets or [] if isinstance(a, dg.AssetsDefinition | dg.SourceAsset) and a.is_observable]
    groups: list[list] = []  # one run per partitions definition (a run holds one), not one per source
    for source in sources:
        group = next((g for g in groups if g[0].partitions_def == source.partitions_def), None)
        if group is None:
            groups.append([source])
        else:
            group.append(source)
    for group in groups:
        with nullcontext() if traces else without_failure_events():
            result = observe(
                group,
                instance=instance,
                resources=resources,
                run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
            )
        if not result.success:
            names = ", ".join(source.key.to_user_string() for source in group)
            log(f"observing {names} failed: {failure_message(result)}")


def _partition_keys(partitions_def, instance) -> list[str | None]:
    if partitions_def is None:
        return [None]
    return list(partitions_def.get_partition_keys(dynamic_partitions_store=instance))


def _metadata_value(value):
    return getattr(value, "value", value)


def _data_root(resources: dict) -> Path | None:
    data = resources.get("data")
    if data is not None and hasattr(data, "root"):
        return data.root()
    io_manager = resources.get("io_manager")
    return io_manager._root() if hasattr(io_manager, "_root") else None


def _parquet_assets(defs: dg.Definitions, resources: dict) -> set[dg.AssetKey]:
    """Asset keys whose outputs the Parquet IO manager stores (their table file must exist)."""

    keys = set()
    for assets_def in defs.assets or []:
        if not isinstance(assets_def, dg.AssetsDefinition) or not assets_def.is_materializable:
            continue
        for key in assets_def.keys:
            manager = resources.get(assets_def.get_io_manager_key_for_asset_key(key))
            if isinstance(manager, PolarsParquetIOManager):
                keys.add(key)
    return keys
