"""Bring every asset up to date, materializing only what is missing or stale.

What is missing or stale is `assets.lib.staleness`'s answer.

Each round materializes the pending asset partitions whose upstream is done, one run per partition
key. A failed run does not stop the others: its asset partitions and everything downstream that
reads them are skipped, the rest goes on, and the report lists each failure with its error on one
line. An asset states in its metadata (`UPSTREAM_READ_BY`) when only some of its partitions read an
upstream asset, so a failing dump does not block the collections that do not use Wikipedia.

Concurrency: a run first takes the file locks of its asset partitions (in one global order, so two
processes never deadlock), then reads their status again: a second `update` on the same data
directory waits for the first and then finds the work done instead of doing it twice. A run with
a step in a pool (`training`) then waits for a free slot in `assets.cli.instance.wait_for_pool_slots`,
saying who holds it; the runs of dead processes are released before and while it waits, so a killed
update's slot or place in the queue never blocks the next one.
"""

from __future__ import annotations

import os
import warnings
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field
from multiprocessing import get_context

import dagster as dg

from assets.cli.instance import (
    HOST_TAG,
    PID_TAG,
    releasing_dead_runs,
    wait_for_pool_slots,
)
from assets.cli.launch import launch_run
from assets.cli.progress import Progress

# Dagster's stale-status resolver (what the UI's "stale" badges use) has no public entry point:
# assets.lib.dagster_private wraps it, with the in-process `observe`.
from assets.lib.dagster_private import FRESH, quiet_log_watchers
from assets.lib.staleness import Key, _State, failure_message, observe_sources, without_failure_events
from dagster_ir.storage.atomic import host_tag
from dagster_ir.storage.locks import file_lock, partition_lock_path

# What a run launched by `dagster-ir` is (shown in the UI's Runs page under its asset job's name):
# the command and the assets it materializes.
COMMAND_TAG, ASSETS_TAG = "dagster_ir/command", "dagster_ir/assets"


@dataclass
class UpdateReport:
    """What an update did to each asset partition of its selection; the counts add up to `planned`:
    materialized + unchanged + fresh + failed + skipped + done elsewhere + not started."""

    runs: list[tuple[str | None, list[str]]] = field(default_factory=list)  # (partition, asset keys)
    fresh: int = 0  # up to date before the update did anything, and not run by it
    planned: int = 0  # asset partitions of the selection
    unchanged: int = 0  # stale at the start, found up to date once their upstream ran again with the same data
    not_started: int = 0  # still pending when an interrupt stopped the update
    failures: list[tuple[str | None, list[str], str]] = field(default_factory=list)  # (partition, keys, error)
    skipped: list[Key] = field(default_factory=list)  # downstream of a failure
    done_elsewhere: list[Key] = field(default_factory=list)  # materialized by another process meanwhile
    interrupted: bool = False  # a run was interrupted (SIGTERM, Ctrl-C): the update stopped there

    @property
    def materialized(self) -> int:
        return sum(len(keys) for _, keys in self.runs)

    @property
    def failed(self) -> int:
        return sum(len(keys) for _, keys, _ in self.failures)

    @property
    def ok(self) -> bool:
        return not self.failures

    def summary(self) -> str:
        """One line of counts that add up to the planned asset partitions (zeros left out)."""
        parts = [
            (self.materialized, "materialized"),
            (self.unchanged, "unchanged (their upstream ran again with the same data)"),
            (self.fresh, "already up to date"),
            (self.failed, "failed"),
            (len(self.skipped), "skipped (downstream of a failure)"),
            (len(self.done_elsewhere), "materialized by another run meanwhile"),
            (self.not_started, "not started (interrupted)"),
        ]
        said = [f"{n} {what}" for n, what in parts if n] or ["nothing to do"]
        return f"{self.planned} asset partition{'' if self.planned == 1 else 's'}: " + ", ".join(said)

    def _close(self, start: dict, last: dict, attempted: set) -> None:
        """Count what was not run: `start` and `last` are the statuses at the first and the last round."""
        touched = {(dg.AssetKey.from_user_string(k), p) for p, keys in self.runs for k in keys}
        touched |= {(dg.AssetKey.from_user_string(k), p) for p, keys, _ in self.failures for k in keys}
        touched |= set(self.skipped) | set(self.done_elsewhere)
        self.planned = len(start)
        self.fresh = self.unchanged = self.not_started = 0
        for key, status in start.items():
            if key in touched:
                continue
            if last.get(key, status) != FRESH and key not in attempted:
                self.not_started += 1
            elif status != FRESH:
                self.unchanged += 1
            else:
                self.fresh += 1


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
    `tags` are added to every run (e.g. the run-wide profile, `assets.lib.settings.PROFILE_TAG`).
    Never raises for a failed run: see `UpdateReport.failures` and `UpdateReport.ok`.
    `progress` prints one line per run (default: to `log`, or to the terminal when `log` is `print`).
    `traces=False` keeps Dagster's failure events (each with its stack trace) out of the console:
    the one-line message of each failure is in the report, the trace in the run's log in the UI.
    """
    quiet_log_watchers()  # Ctrl-C: the one "interrupted" line, no traceback from Dagster's log watchers
    progress = progress or Progress(None if log is print else log)
    observe_sources(defs, instance, resources, log=progress.note, traces=traces)
    state = _State(defs, instance, resources, selection, only)
    assets = list(defs.assets or [])
    checks = list(defs.asset_checks or [])
    report = UpdateReport()
    attempted: set[Key] = set()
    failed: set[Key] = set()
    at_start: dict | None = None
    for _ in range(max_rounds):
        statuses = state.statuses()
        if at_start is None:  # what was up to date before this update did anything
            at_start = statuses
        pending = {k for k, s in statuses.items() if s != FRESH}
        todo = pending - attempted
        blocked = _downstream_of(failed, todo, state)
        todo -= blocked
        progress.expect(len(todo))
        if not todo:
            report.skipped = sorted(blocked, key=_order)
            report._close(at_start, statuses, attempted)
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
                progress.note("interrupted: the update stops here; the next `update` goes on from where it stopped")
                report._close(at_start, statuses, attempted)
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
            report.failures.append((partition, names, message))
            failed.update((k, partition) for k in together)
            return
        stack.enter_context(releasing_dead_runs(state.instance, progress.note) if pools else nullcontext())
        result = launch_run(  # a run of the named asset job of these assets (assets.cli.launch)
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
    report.interrupted = _interrupted(result)
    message = "interrupted (Ctrl-C or SIGTERM)" if report.interrupted else failure_message(result)
    if not report.interrupted:  # an interrupt's one line is update_all's
        progress.note(f"FAILED {', '.join(names)}" + (f" [{partition}]" if partition else "") + f": {message}")
    report.failures.append((partition, names, message))
    failed.update((k, partition) for k in together)


def quiet_dagster_warnings() -> None:
    """Dagster warns about its own beta and preview features at every definition load; nothing a user can act on."""
    for category in (dg.BetaWarning, dg.PreviewWarning):
        warnings.filterwarnings("ignore", category=category)


def _dump_partitioned(state: _State, keys: list[dg.AssetKey]) -> bool:
    from assets.lib.partitions import wiki_dump_partitions  # reads the collections YAML at import

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
    from assets.definitions import defs, resources  # reads the collections YAML at import

    keys = [dg.AssetKey.from_user_string(name) for name in names]
    with dg.DagsterInstance.from_ref(dg.deserialize_value(ref)) as instance:
        state = _State(defs, instance, resources(root), dg.AssetSelection.assets(*keys))
        report, attempted, failed, lines = UpdateReport(), set(), set(), []
        definitions = [*(defs.assets or []), *(defs.asset_checks or [])]
        progress = Progress(lines.append, quiet=True)  # the parent prints the run lines
        _run_group(partition, keys, state, definitions, report, attempted, failed, progress, log_level, traces=traces)
    return report, lines, attempted, failed, progress.timings


def _interrupted(result) -> bool:
    """Whether a step of the failed run was interrupted (Dagster turns SIGTERM and SIGINT into this)."""
    for event in result.get_step_failure_events():
        error = event.step_failure_data.error if event.step_failure_data else None
        while error is not None:
            if error.cls_name == "DagsterExecutionInterruptedError":
                return True
            error = error.cause
    return False


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
