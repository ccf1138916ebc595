"""The Dagster instance's dagster.yaml: written when absent, completed with the pool limit when not.

`dagster-ir` (every command) and `make ui` call `ensure_instance_config(DAGSTER_HOME)`. The file
turns telemetry off (this may run offline) and limits every pool to one step at a time by default
(`concurrency.pools.default_limit: 1`, op granularity), so the `training` pool (see
`assets.defs.automation`) never runs two trainings at once, across runs and processes: `dagster-ir
update`'s in-process runs claim the same slots as the UI's runs. A file without a `concurrency`
section gets it appended; one that has it is left as the user wrote it. Change the limit with

    concurrency:
      pools:
        default_limit: 2

A run killed in a training step (SIGKILL, a crash, a full disk) keeps its slot, and a run killed
while it waited for one keeps its place in the pool's queue: Dagster frees neither without a daemon.
`release_dead_runs` marks the runs of `dagster-ir` whose process is gone failed (each run records its
host and pid in tags), then frees every slot and queue entry of a run that has ended. Opening the
instance does it, and `update` does it again while it waits for a slot, so no update waits on a dead
run. A run started elsewhere (the UI's, another host's) is freed once it is marked ended.
"""

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg

from dagster_ir.storage.atomic import host_tag, pid_alive, write_text_atomic
from dagster_ir.storage.locks import file_lock

TELEMETRY = "telemetry:\n  enabled: false\n"
CONCURRENCY = (
    "concurrency:\n"
    "  pools:\n"
    "    default_limit: 1      # training steps (pool `training`) one at a time; see assets/defs/automation.py\n"
    "    granularity: op\n"
)
# Tags of every run `dagster-ir` starts: where its process runs, so a later command can tell it died.
PID_TAG, HOST_TAG = "dagster_ir/pid", "dagster_ir/host"


def ensure_instance_config(home: str | os.PathLike[str]) -> Path:
    """Write `home`/dagster.yaml if absent, or add the concurrency section it lacks; returns its path."""
    home = Path(home)
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        write_text_atomic(config, TELEMETRY + CONCURRENCY)
        return config
    text = config.read_text(encoding="utf-8")
    if not any(line.startswith("concurrency:") for line in text.splitlines()):
        write_text_atomic(config, text.rstrip("\n") + "\n" + CONCURRENCY)
    return config


def open_instance(home: str | os.PathLike[str], log: Callable[[str], None] | None = None) -> dg.DagsterInstance:
    """The persistent instance in `home` (its dagster.yaml completed first), opened under a file lock,
    with the runs of dead processes released (`release_dead_runs`; what it did goes to `log`).

    Opening a new home creates its SQLite run, event and schedule databases; two processes doing that
    at once (two `dagster-ir update` on a fresh DAGSTER_HOME) race in the migrations ("table runs
    already exists"). The lock makes the second wait until the first has created them.
    """
    home = Path(home)
    ensure_instance_config(home)
    os.environ["DAGSTER_HOME"] = str(home)
    with file_lock(home / ".dagster-ir-storage.lock", timeout=600):
        instance = dg.DagsterInstance.get()
        instance.get_runs(limit=1)  # the event log's per-run shards and asset index open lazily
        instance.fetch_materializations(dg.AssetKey("dagster_ir_storage_probe"), limit=1)
        release_dead_runs(instance, log)
    return instance


_ENDED = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}


def release_dead_runs(instance: dg.DagsterInstance, log: Callable[[str], None] | None = None) -> list[str]:
    """Mark the runs of dead processes failed, then free the pool slots and queue entries of every
    run that has ended; the ids of the runs marked failed.

    The order matters: freeing first hands the slot to the next run in the queue, which may be a
    dead one not yet marked (an update killed while it waited), and the next update would wait
    behind it for ever.
    """
    marked = mark_dead_runs_failed(instance)
    freed = free_slots_of_ended_runs(instance)
    if log is not None:
        for run_id in marked:
            log(f"run {run_id}: its process is gone; marked failed")
        for run_id in freed:
            log(f"run {run_id}: ended; its pool slots and queue entries freed")
    return marked


def mark_dead_runs_failed(instance: dg.DagsterInstance) -> list[str]:
    """Runs of `dagster-ir` on this host not marked ended whose process is gone become failed."""
    runs = instance.get_runs(
        filters=dg.RunsFilter(
            statuses=[dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.NOT_STARTED],
            tags={HOST_TAG: host_tag()},
        )
    )
    marked = []
    for run in runs:
        pid = run.tags.get(PID_TAG, "")
        if pid.isdigit() and not pid_alive(int(pid)):
            instance.report_run_failed(run, f"the process that ran it (pid {pid}) is gone: killed or crashed")
            marked.append(run.run_id)
    return marked


def free_slots_of_ended_runs(instance: dg.DagsterInstance) -> list[str]:
    """Free the pool slots (claimed or queued) of runs that have ended or are gone; their run ids.

    A run whose process died in a step (a full disk, a crash, SIGKILL) keeps its `training` slot;
    with no daemon to free it, the next `update` or `reproduce` waited for it for ever, spinning at
    most of a core. A run still marked started is left alone: its process may still be alive.
    """
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return []
    freed = []
    for key in storage.get_concurrency_keys():
        info = storage.get_concurrency_info(key)
        for run_id in sorted({slot.run_id for slot in [*info.claimed_slots, *info.pending_steps]}):
            run = instance.get_run_by_id(run_id)
            if (run is None or run.status in _ENDED) and run_id not in freed:  # one run, several pools
                storage.free_concurrency_slots_for_run(run_id)
                freed.append(run_id)
    return freed


def wait_for_pool_slots(
    instance: dg.DagsterInstance, pools: set[str], log: Callable[[str], None] | None = None, poll: float = 1.0
) -> None:
    """Return once each of `pools` has a slot that no run holds or is next in line for, releasing the
    runs of dead processes at every look (`release_dead_runs`) and saying once who holds a slot.

    `update` waits here, before it starts a run, rather than in Dagster's executor, which waits
    without a word, polls the database at most of a core and ignores Ctrl-C and SIGTERM: here the
    wait says what it waits for and a signal ends it. Another process may still take the slot
    first; `releasing_dead_runs` covers the wait in the executor then.
    """
    storage = instance.event_log_storage
    if not pools or instance.is_ephemeral or not storage.supports_global_concurrency_limits:
        return
    told: set[str] = set()
    while True:
        release_dead_runs(instance, log)
        busy = {pool: holders for pool in sorted(pools) if (holders := _holders_of_full_pool(storage, pool))}
        if not busy:
            return
        for pool, holders in busy.items():
            line = f"waiting for a slot of pool `{pool}`, held by " + "; ".join(_describe(instance, r) for r in holders)
            if log is not None and line not in told:
                log(line)
            told.add(line)
        time.sleep(poll)


def _holders_of_full_pool(storage, pool: str) -> list[str]:
    """The runs holding (or next in line for) every slot of `pool`; empty if one is free or it has none yet."""
    info = storage.get_concurrency_info(pool)
    holders = sorted(
        {s.run_id for s in info.claimed_slots}
        | {s.run_id for s in info.pending_steps if s.assigned_timestamp is not None}
    )
    assigned = sum(1 for s in info.pending_steps if s.assigned_timestamp is not None)
    return holders if info.slot_count and max(assigned, len(info.claimed_slots)) >= info.slot_count else []


def _describe(instance: dg.DagsterInstance, run_id: str) -> str:
    run = instance.get_run_by_id(run_id)
    if run is None:
        return f"run {run_id}"
    tags = run.tags
    where = f"pid {tags[PID_TAG]}" if PID_TAG in tags else "not started by dagster-ir"
    what = f": {tags['dagster_ir/assets']}" if "dagster_ir/assets" in tags else ""
    return f"run {run_id[:8]} ({where}{what})"


@contextmanager
def releasing_dead_runs(
    instance: dg.DagsterInstance, log: Callable[[str], None] | None = None, every: float = 2.0
) -> Iterator[None]:
    """While the block runs, `release_dead_runs` every `every` seconds in a thread, so a run that
    waits in Dagster's executor for a slot gets it when the holder's process dies meanwhile."""
    if instance.is_ephemeral:
        yield
        return
    stop = threading.Event()

    def release() -> None:
        while not stop.wait(every):
            try:
                release_dead_runs(instance, log)
            except Exception:  # a busy database: released at the next look
                continue

    thread = threading.Thread(target=release, name="dagster-ir-release-dead-runs", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


if __name__ == "__main__":  # `python -m assets.cli.instance [DAGSTER_HOME]` (the Makefile's `ui`)
    print(ensure_instance_config(sys.argv[1] if len(sys.argv) > 1 else os.environ["DAGSTER_HOME"]))
