"""Bring every asset up to date, materializing only what is missing or stale.

Staleness is Dagster's own (an asset partition is stale when its code version or the data version
of an upstream asset changed since it was materialized), with the data outside the code brought in:
- the observable source assets (each collection's section of the collections YAML, the imported
  run files, each dump file) are observed first, so a change there makes exactly its readers stale;
- an asset partition whose Parquet table is gone counts as missing;
- one whose catalog record read a partition that no longer exists (a removed dump, a collection
  dropped from the YAML) counts as stale.

Each round materializes the pending asset partitions whose upstream is done, one run per partition
key. A failed run does not stop the others: its asset partitions and everything downstream that
reads them are skipped, the rest goes on, and the report lists each failure with its error on one
line. An asset states in its metadata (`UPSTREAM_READ_BY`) when only some of its partitions read an
upstream asset, so a failing dump does not block the collections that do not use Wikipedia.

Concurrency: a run first takes the file locks of its asset partitions (in one global order, so two
processes never deadlock), then reads their status again: a second `update` on the same data
directory waits for the first and then finds the work done instead of doing it twice.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg

# Dagster's stale-status resolver (what the UI's "stale" badges use) has no public entry point:
# assets.dagster_private wraps it, with the in-process `observe`.
from assets.dagster_private import FRESH, MISSING, STALE, StaleResolver, observe
from assets.launch import launch_run
from assets.progress import Progress
from dagster_ir.storage.atomic import host_tag, pid_alive
from dagster_ir.storage.catalog import Catalog
from dagster_ir.storage.locks import file_lock, partition_lock_path
from dagster_ir.storage.parquet import table_path

# Asset metadata {upstream asset: [partitions of this asset that read it]}: the other partitions
# do not wait for, and are not blocked by, that upstream asset.
UPSTREAM_READ_BY = "dagster_ir/upstream_read_by"
PID_TAG, HOST_TAG = "dagster_ir/pid", "dagster_ir/host"
# What a run launched by `dagster-ir` is (shown in the UI's Runs page under its asset job's name):
# the command and the assets it materializes.
COMMAND_TAG, ASSETS_TAG = "dagster_ir/command", "dagster_ir/assets"

Key = tuple[dg.AssetKey, str | None]


@dataclass
class UpdateReport:
    runs: list[tuple[str | None, list[str]]] = field(default_factory=list)  # (partition, asset keys)
    fresh: int = 0
    failures: list[tuple[str | None, list[str], str]] = field(default_factory=list)  # (partition, keys, error)
    skipped: list[Key] = field(default_factory=list)  # downstream of a failure
    done_elsewhere: list[Key] = field(default_factory=list)  # materialized by another process meanwhile
    interrupted: bool = False  # a run was interrupted (SIGTERM, Ctrl-C): the update stopped there

    @property
    def materialized(self) -> int:
        return sum(len(keys) for _, keys in self.runs)

    @property
    def ok(self) -> bool:
        return not self.failures


class _State:
    """Statuses, partitions and upstream partitions of one definitions object, read on demand."""

    def __init__(self, defs: dg.Definitions, instance: dg.DagsterInstance, resources: dict | None,
                 selection: dg.AssetSelection | None, only: set[Key] | None = None) -> None:
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

    def statuses(self, only: tuple[list[dg.AssetKey], str | None] | None = None, resolver: StaleResolver | None = None
                 ) -> dict[Key, object]:
        """Status (FRESH, STALE, MISSING) of every selected asset partition (or of `only` = (keys, partition)),
        files included."""
        resolver = resolver or StaleResolver(self.instance, self.graph)
        wanted = [(k, p) for k in self.selected for p in self.partitions[k]] if only is None else [
            (k, only[1]) for k in only[0] if only[1] in self.partitions[k]]
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
        return statuses

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
                child_def.subset_with_partition_keys([partition]), child_def, parent_def,
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
    table file that is gone, or the partition it read that no longer exists. Sorted by asset."""
    if resources is not None:
        observe_sources(defs, instance, resources)
    state = _State(defs, instance, resources, selection)
    resolver = StaleResolver(instance, state.graph)
    statuses = state.statuses(resolver=resolver)
    out = []
    for (key, partition), status in sorted(statuses.items(), key=lambda item: (item[0][0].to_user_string(),
                                                                             item[0][1] or "")):
        if status == FRESH:
            continue
        dagster_says = resolver.status(key, partition)
        if status == MISSING and dagster_says == FRESH:
            reasons = [f"its table file is gone ({table_path(state.root, list(key.path), partition)})"]
        elif status == STALE and dagster_says == FRESH:
            reasons = ["it read a partition that no longer exists (a removed dump, or a collection dropped from the YAML)"]
        elif status == MISSING:
            reasons = ["never materialized"]
        else:
            reasons = resolver.causes(key, partition) or ["stale (Dagster names no cause)"]
        out.append(((key, partition), "missing" if status == MISSING else "stale", reasons))
    return out


def update_all(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    *,
    resources: dict,
    log: Callable[[str], None] = print,
    log_level: str = "WARNING",
    selection: dg.AssetSelection | None = None,
    max_rounds: int = 100,
    parallel: int = 1,
    command: str = "update",
    only: set[Key] | None = None,
    progress: Progress | None = None,
) -> UpdateReport:
    """Materialize stale and missing asset partitions (of `selection`, default all), upstream first.

    `only` restricts the work to those asset partitions (`needed_by` lists what some need).
    `parallel > 1` runs the ready dump partitions of a round (several dump files, or the byte-range
    parts of one multistream dump) in that many worker processes at once; `defs` must then be
    `assets.definitions.defs` (each worker imports it) and `instance` a persistent one.
    Never raises for a failed run: see `UpdateReport.failures` and `UpdateReport.ok`.
    `progress` prints one line per run (default: to `log`, or to the terminal when `log` is `print`).
    """
    progress = progress or Progress(None if log is print else log)
    observe_sources(defs, instance, resources, log=progress.note)
    state = _State(defs, instance, resources, selection, only)
    assets = list(defs.assets or [])
    checks = list(defs.asset_checks or [])
    report = UpdateReport()
    attempted: set[Key] = set()
    failed: set[Key] = set()
    fresh_at_start = None
    for _ in range(max_rounds):
        statuses = state.statuses()
        pending = {k for k, s in statuses.items() if s != FRESH}
        if fresh_at_start is None:  # up to date before this update did anything (not what it materialized)
            fresh_at_start = len(statuses) - len(pending)
        todo = pending - attempted
        blocked = _downstream_of(failed, todo, state)
        todo -= blocked
        progress.expect(len(todo))
        if not todo:
            report.fresh = fresh_at_start
            report.skipped = sorted(blocked, key=_order)
            return report
        ready: dict[str | None, list[dg.AssetKey]] = defaultdict(list)
        for key, partition in sorted(todo, key=_order):
            if not any(parent in todo for parent in state.parents(key, partition)):
                ready[partition].append(key)
        groups = list(ready.items())
        dumps = [(p, keys) for p, keys in groups if p is not None and _dump_partitioned(state, keys)]
        if parallel > 1 and len(dumps) > 1:
            _run_groups_in_processes(dumps, state, report, attempted, failed, progress, log_level, parallel)
            groups = [group for group in groups if group not in dumps]
        for partition, keys in groups:
            _run_group(partition, keys, state, [*assets, *checks], report, attempted, failed, progress, log_level,
                       command)
            if report.interrupted:  # a `timeout` or Ctrl-C means stop, not "go on past a failure"
                progress.note("interrupted: the update stops here")
                return report
    raise RuntimeError(f"assets still pending after {max_rounds} rounds")


def _run_group(partition, keys, state: _State, definitions, report: UpdateReport, attempted: set, failed: set,
               progress: Progress, log_level, command: str = "update") -> None:
    """Materialize `keys` of one partition under their locks, unless another process did meanwhile."""
    selection = dg.AssetSelection.assets(*keys).required_multi_asset_neighbors()
    together = sorted(selection.resolve(state.graph), key=lambda k: k.to_user_string())
    with ExitStack() as stack:
        if state.root is not None:
            for key in together:
                stack.enter_context(file_lock(partition_lock_path(state.root, key.to_user_string(), partition), None))
        now = state.statuses((together, partition))
        stale = [k for k in keys if now.get((k, partition)) != FRESH]
        attempted.update((k, partition) for k in together)
        done = [(k, partition) for k in keys if k not in stale]
        report.done_elsewhere.extend(done)
        if not stale:
            names = ", ".join(k.to_user_string() for k in keys)
            progress.note(f"up to date (materialized by another run meanwhile): {names}"
                          + (f" [{partition}]" if partition else ""))
            return
        names = [k.to_user_string() for k in stale]
        started = progress.start(names, partition)
        result = launch_run(  # a run of the named asset job of these assets (assets.launch)
            definitions,
            defs=state.defs,
            # a multi-asset that cannot be subset runs whole, even if only some outputs are stale
            selection=dg.AssetSelection.assets(*stale).required_multi_asset_neighbors(),
            instance=state.instance,
            resources=state.resources,
            partition_key=partition,
            raise_on_error=False,
            tags={PID_TAG: str(os.getpid()), HOST_TAG: host_tag(), COMMAND_TAG: command,
                  ASSETS_TAG: ", ".join(names)[:4000]},
            run_config={"loggers": {"console": {"config": {"log_level": log_level}}}},
        )
        progress.end(names, partition, started, ok=result.success)
    if result.success:
        report.runs.append((partition, names))
        return
    message = failure_message(result)
    report.interrupted = _interrupted(result)
    progress.note(f"FAILED {', '.join(names)}" + (f" [{partition}]" if partition else "") + f": {message}")
    report.failures.append((partition, names, message))
    failed.update((k, partition) for k in together)


def _dump_partitioned(state: _State, keys: list[dg.AssetKey]) -> bool:
    from assets.partitions import wiki_dump_partitions

    return all(state.graph.get(k).partitions_def == wiki_dump_partitions for k in keys)


def _run_groups_in_processes(groups, state: _State, report: UpdateReport, attempted: set, failed: set,
                             progress: Progress, log_level, parallel: int) -> None:
    """`_run_group` for each (partition, keys), `parallel` at a time in spawned worker processes."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    ref = dg.serialize_value(state.instance.get_ref())  # Dagster records travel as JSON, not pickles
    root = str(state.root) if state.root is not None else ""
    with ProcessPoolExecutor(min(parallel, len(groups)), mp_context=get_context("spawn")) as pool:
        jobs = [pool.submit(_run_group_in_worker, ref, root, partition, [k.to_user_string() for k in keys], log_level)
                for partition, keys in groups]
        for (partition, keys), job in zip(groups, jobs, strict=True):
            try:
                part, lines, part_attempted, part_failed, timings = job.result()
            except Exception as error:  # the worker died: its partition failed, the others go on
                message = f"worker process failed: {type(error).__name__}: {error}"
                progress.note(f"FAILED {', '.join(k.to_user_string() for k in keys)} [{partition}]: {message}")
                report.failures.append((partition, [k.to_user_string() for k in keys], message))
                attempted.update((k, partition) for k in keys)
                failed.update((k, partition) for k in keys)
                continue
            for part_partition, names, started, seconds, ok in timings:
                progress.finished(names, part_partition, started, seconds, ok=ok)
            for line in lines:
                progress.note(line)
            report.runs += part.runs
            report.failures += part.failures
            report.done_elsewhere += part.done_elsewhere
            attempted.update(part_attempted)
            failed.update(part_failed)


def _run_group_in_worker(ref: str, root: str, partition: str, names: list[str], log_level: str):
    """One partition's run in a worker process, against the same instance and data directory
    (the resources are `assets.definitions.resources(root)`); returns what `_run_group` recorded."""
    from assets.definitions import defs, resources

    keys = [dg.AssetKey.from_user_string(name) for name in names]
    with dg.DagsterInstance.from_ref(dg.deserialize_value(ref)) as instance:
        state = _State(defs, instance, resources(root), dg.AssetSelection.assets(*keys))
        report, attempted, failed, lines = UpdateReport(), set(), set(), []
        definitions = [*(defs.assets or []), *(defs.asset_checks or [])]
        progress = Progress(lines.append, quiet=True)  # the parent prints the run lines
        _run_group(partition, keys, state, definitions, report, attempted, failed, progress, log_level)
    return report, lines, attempted, failed, progress.timings


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


def _interrupted(result) -> bool:
    """Whether a step of the failed run was interrupted (Dagster turns SIGTERM and SIGINT into this)."""
    for event in result.get_step_failure_events():
        error = event.step_failure_data.error if event.step_failure_data else None
        while error is not None:
            if error.cls_name == "DagsterExecutionInterruptedError":
                return True
            error = error.cause
    return False


def failure_message(result) -> str:
    """The errors of a failed run's steps, one line each: `step: ErrorClass: message`."""
    lines = []
    for event in result.get_step_failure_events():
        error = event.step_failure_data.error if event.step_failure_data else None
        while error is not None and error.cause is not None:
            error = error.cause  # the user's exception, under Dagster's wrapper
        text = (error.message.strip().splitlines() or ["?"])[0] if error is not None else "failed"
        lines.append(f"{event.step_key}: {text}")
    return "; ".join(lines) or f"run {result.run_id} failed"


def observe_sources(
    defs: dg.Definitions, instance: dg.DagsterInstance, resources: dict, *, log: Callable[[str], None] = print
) -> None:
    """Observe every observable source asset (their data versions are what staleness compares)."""
    sources = [a for a in defs.assets or []
               if isinstance(a, dg.AssetsDefinition | dg.SourceAsset) and a.is_observable]
    for source in sources:  # one run each: a run holds one partitions definition
        result = observe(source, instance=instance, resources=resources,
                         run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}})
        if not result.success:
            log(f"observing {source.key.to_user_string()} failed: {failure_message(result)}")


def mark_dead_runs_failed(instance: dg.DagsterInstance) -> list[str]:
    """Runs of `update` on this host still marked started whose process is gone become failed."""
    runs = instance.get_runs(filters=dg.RunsFilter(
        statuses=[dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING], tags={HOST_TAG: host_tag()}))
    marked = []
    for run in runs:
        pid = run.tags.get(PID_TAG, "")
        if pid.isdigit() and not pid_alive(int(pid)):
            instance.report_run_failed(run, f"the process that ran it (pid {pid}) is gone: killed or crashed")
            marked.append(run.run_id)
    return marked


def _downstream_of(failed: set[Key], todo: set[Key], state: _State) -> set[Key]:
    """The pending asset partitions that read, directly or not, an asset partition that failed."""
    memo: dict[Key, bool] = {}

    def blocked(key_partition: Key) -> bool:
        if key_partition not in memo:
            memo[key_partition] = False  # guards against cycles
            memo[key_partition] = any(p in failed or (p in todo and blocked(p)) for p in state.parents(*key_partition))
        return memo[key_partition]

    return {k for k in todo if k not in failed and blocked(k)} if failed else set()


def _order(key_partition: Key) -> tuple[str, str]:
    return key_partition[1] or "", key_partition[0].to_user_string()


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
    from assets.io_managers import PolarsParquetIOManager

    keys = set()
    for assets_def in defs.assets or []:
        if not isinstance(assets_def, dg.AssetsDefinition) or not assets_def.is_materializable:
            continue
        for key in assets_def.keys:
            manager = resources.get(assets_def.get_io_manager_key_for_asset_key(key))
            if isinstance(manager, PolarsParquetIOManager):
                keys.add(key)
    return keys
