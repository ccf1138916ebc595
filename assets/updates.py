"""Bring every asset up to date, materializing only what is missing or stale.

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

Each round materializes the pending asset partitions whose upstream is done, one run per partition
key. A failed run does not stop the others: its asset partitions and everything downstream that
reads them are skipped, the rest goes on, and the report lists each failure with its error on one
line. An asset states in its metadata (`UPSTREAM_READ_BY`) when only some of its partitions read an
upstream asset, so a failing dump does not block the collections that do not use Wikipedia.

Concurrency: a run first takes the file locks of its asset partitions (in one global order, so two
processes never deadlock), then reads their status again: a second `update` on the same data
directory waits for the first and then finds the work done instead of doing it twice. A run with
a step in a pool (`training`) then waits for a free slot in `assets.instance.wait_for_pool_slots`,
saying who holds it; the runs of dead processes are released before and while it waits, so a killed
update's slot or place in the queue never blocks the next one.
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from collections import defaultdict
from collections.abc import Callable
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg

# Dagster's stale-status resolver (what the UI's "stale" badges use) has no public entry point:
# assets.dagster_private wraps it, with the in-process `observe`.
from assets.dagster_private import FRESH, MISSING, STALE, StaleResolver, observe
from assets.instance import (  # noqa: F401 (mark_dead_runs_failed re-exported)
    HOST_TAG,
    PID_TAG,
    mark_dead_runs_failed,
    releasing_dead_runs,
    wait_for_pool_slots,
)
from assets.launch import launch_run
from assets.progress import Progress
from dagster_ir.storage.atomic import host_tag
from dagster_ir.storage.catalog import Catalog
from dagster_ir.storage.locks import file_lock, partition_lock_path
from dagster_ir.storage.parquet import table_path

# Asset metadata {upstream asset: [partitions of this asset that read it]}: the other partitions
# do not wait for, and are not blocked by, that upstream asset.
UPSTREAM_READ_BY = "dagster_ir/upstream_read_by"
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
    table file that is gone, or the partition it read that no longer exists. Sorted by asset."""
    if resources is not None:
        observe_sources(defs, instance, resources)
    state = _State(defs, instance, resources, selection)
    resolver = StaleResolver(instance, state.graph)
    statuses = state.statuses(resolver=resolver)
    out = []
    for (key, partition), status in sorted(
        statuses.items(), key=lambda item: (item[0][0].to_user_string(), item[0][1] or "")
    ):
        if status == FRESH:
            continue
        dagster_says = resolver.status(key, partition)
        if status == MISSING and dagster_says == FRESH:
            reasons = [f"its table file is gone ({table_path(state.root, list(key.path), partition)})"]
        elif status == STALE and dagster_says == FRESH:
            reasons = [
                "it read a partition that no longer exists (a removed dump, or a collection dropped from the YAML)"
            ]
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
    tags: dict[str, str] | None = None,
    traces: bool = True,
) -> UpdateReport:
    """Materialize stale and missing asset partitions (of `selection`, default all), upstream first.

    `only` restricts the work to those asset partitions (`needed_by` lists what some need).
    `parallel > 1` runs the ready dump partitions of a round (several dump files, or the byte-range
    parts of one multistream dump) in that many worker processes at once; `defs` must then be
    `assets.definitions.defs` (each worker imports it) and `instance` a persistent one.
    `tags` are added to every run (e.g. the run-wide profile, `assets.settings.PROFILE_TAG`).
    Never raises for a failed run: see `UpdateReport.failures` and `UpdateReport.ok`.
    `progress` prints one line per run (default: to `log`, or to the terminal when `log` is `print`).
    `traces=False` keeps Dagster's failure events (each with its stack trace) out of the console:
    the one-line message of each failure is in the report, the trace in the run's log in the UI.
    """
    progress = progress or Progress(None if log is print else log)
    observe_sources(defs, instance, resources, log=progress.note, traces=traces)
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
            _run_groups_in_processes(dumps, state, report, attempted, failed, progress, log_level, parallel, traces)
            groups = [group for group in groups if group not in dumps]
        for partition, keys in groups:
            _run_group(
                partition,
                keys,
                state,
                [*assets, *checks],
                report,
                attempted,
                failed,
                progress,
                log_level,
                command,
                tags or {},
                traces,
            )
            if report.interrupted:  # a `timeout` or Ctrl-C means stop, not "go on past a failure"
                progress.note("interrupted: the update stops here")
                return report
    raise RuntimeError(f"assets still pending after {max_rounds} rounds")


def _run_group(
    partition,
    keys,
    state: _State,
    definitions,
    report: UpdateReport,
    attempted: set,
    failed: set,
    progress: Progress,
    log_level,
    command: str = "update",
    tags: dict[str, str] | None = None,
    traces: bool = True,
) -> None:
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
            progress.note(
                f"up to date (materialized by another run meanwhile): {names}"
                + (f" [{partition}]" if partition else "")
            )
            return
        names = [k.to_user_string() for k in stale]
        started = progress.start(names, partition)
        stack.enter_context(nullcontext() if traces else without_failure_events())
        pools = {pool for key in stale for pool in state.graph.get(key).pools or ()}
        try:
            wait_for_pool_slots(state.instance, pools, progress.note)
        except KeyboardInterrupt:  # Ctrl-C while waiting for a slot: nothing was started
            report.interrupted = True
            message = "interrupted while waiting for a pool slot"
            progress.finished(names, partition, started, 0.0, ok=False)
            progress.note(f"FAILED {', '.join(names)}" + (f" [{partition}]" if partition else "") + f": {message}")
            report.failures.append((partition, names, message))
            failed.update((k, partition) for k in together)
            return
        stack.enter_context(releasing_dead_runs(state.instance, progress.note) if pools else nullcontext())
        result = launch_run(  # a run of the named asset job of these assets (assets.launch)
            definitions,
            defs=state.defs,
            # a multi-asset that cannot be subset runs whole, even if only some outputs are stale
            selection=dg.AssetSelection.assets(*stale).required_multi_asset_neighbors(),
            instance=state.instance,
            resources=state.resources,
            partition_key=partition,
            raise_on_error=False,
            tags={
                **(tags or {}),
                PID_TAG: str(os.getpid()),
                HOST_TAG: host_tag(),
                COMMAND_TAG: command,
                ASSETS_TAG: ", ".join(names)[:4000],
            },
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


def quiet_dagster_warnings() -> None:
    """Dagster warns about its own beta and preview features at every definition load; nothing a user can act on."""
    for category in (dg.BetaWarning, dg.PreviewWarning):
        warnings.filterwarnings("ignore", category=category)


def _dump_partitioned(state: _State, keys: list[dg.AssetKey]) -> bool:
    from assets.partitions import wiki_dump_partitions

    return all(state.graph.get(k).partitions_def == wiki_dump_partitions for k in keys)


def _run_groups_in_processes(
    groups,
    state: _State,
    report: UpdateReport,
    attempted: set,
    failed: set,
    progress: Progress,
    log_level,
    parallel: int,
    traces: bool = True,
) -> None:
    """`_run_group` for each (partition, keys), `parallel` at a time in spawned worker processes."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    ref = dg.serialize_value(state.instance.get_ref())  # Dagster records travel as JSON, not pickles
    root = str(state.root) if state.root is not None else ""
    with ProcessPoolExecutor(min(parallel, len(groups)), mp_context=get_context("spawn")) as pool:
        jobs = [
            pool.submit(
                _run_group_in_worker, ref, root, partition, [k.to_user_string() for k in keys], log_level, traces
            )
            for partition, keys in groups
        ]
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


def _run_group_in_worker(ref: str, root: str, partition: str, names: list[str], log_level: str, traces: bool = True):
    """One partition's run in a worker process, against the same instance and data directory
    (the resources are `assets.definitions.resources(root)`); returns what `_run_group` recorded."""
    quiet_dagster_warnings()  # before the definitions load: a spawned worker starts with default filters
    from assets.definitions import defs, resources

    keys = [dg.AssetKey.from_user_string(name) for name in names]
    with dg.DagsterInstance.from_ref(dg.deserialize_value(ref)) as instance:
        state = _State(defs, instance, resources(root), dg.AssetSelection.assets(*keys))
        report, attempted, failed, lines = UpdateReport(), set(), set(), []
        definitions = [*(defs.assets or []), *(defs.asset_checks or [])]
        progress = Progress(lines.append, quiet=True)  # the parent prints the run lines
        _run_group(partition, keys, state, definitions, report, attempted, failed, progress, log_level, traces=traces)
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
