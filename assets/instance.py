"""The Dagster instance's dagster.yaml: written when absent, completed with the pool limit when not.

`dagster-ir` (every command) and `make ui` call `ensure_instance_config(DAGSTER_HOME)`. The file
turns telemetry off (this may run offline) and limits every pool to one step at a time by default
(`concurrency.pools.default_limit: 1`, op granularity), so the `training` pool (see
`assets.automation`) never runs two trainings at once, across runs and processes: `dagster-ir
update`'s in-process runs claim the same slots as the UI's runs. Opening the instance frees the
slots that runs which have ended still hold (`free_slots_of_ended_runs`). A file without a
`concurrency` section gets it appended; one that has it is left as the user wrote it. Change the
limit with

    concurrency:
      pools:
        default_limit: 2
"""

import os
import sys
from pathlib import Path

import dagster as dg

from dagster_ir.storage.atomic import write_text_atomic
from dagster_ir.storage.locks import file_lock

TELEMETRY = "telemetry:\n  enabled: false\n"
CONCURRENCY = (
    "concurrency:\n"
    "  pools:\n"
    "    default_limit: 1      # training steps (pool `training`) one at a time; see assets/automation.py\n"
    "    granularity: op\n"
)


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


def open_instance(home: str | os.PathLike[str]) -> dg.DagsterInstance:
    """The persistent instance in `home` (its dagster.yaml completed first), opened under a file lock.

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
        free_slots_of_ended_runs(instance)
    return instance


_ENDED = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}


def free_slots_of_ended_runs(instance: dg.DagsterInstance) -> list[str]:
    """Free the pool slots (claimed or pending) of runs that have ended or are gone; their run ids.

    A run whose process died in a step (a full disk, a crash) is marked failed but can keep its
    `training` slot; with no daemon to free it, the next `update` or `reproduce` then waits for the
    slot for ever (found on a full disk: the next call spun at 100% of a core for 25 minutes). A run
    still marked started is left alone: its process may still be alive.
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


if __name__ == "__main__":  # `python -m assets.instance [DAGSTER_HOME]` (the Makefile's `ui`)
    print(ensure_instance_config(sys.argv[1] if len(sys.argv) > 1 else os.environ["DAGSTER_HOME"]))
