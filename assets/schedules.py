"""The `retraining` schedule: on its cron tick, request runs of the trained asset partitions that are stale.

The cron comes from the project's YAML (`schedules: {retraining: "0 3 * * 0"}`, UTC; default weekly,
Sunday 03:00). A tick asks Dagster's staleness (as `dagster-ir update` does: a code version, a config
section or an upstream data version changed, or the partition is missing) which trained asset
partitions are stale, and returns one `RunRequest` per partition key holding some (its stale assets
selected, `dagster/partition` set): plain asset runs (of Dagster's asset job `__ASSET_JOB`, the one the
UI's "Materialize" launches), each with its steps in its own event log and re-executable from the UI.
With none stale it launches nothing (the tick says why).

A stale partition that reads another stale partition of the same tick (a collection's report over
units being retrained) is not requested at that tick: both runs would start at once and the reader
would read the old checkpoints. It is requested at the next tick, or at once by the automation
sensor's conditions when that sensor is on.

The schedule is on by default (it runs whenever `dagster dev` or the daemon runs). The default
automation sensor's cron condition on the trained assets does the same retraining by the other
route; while that sensor is on, the schedule's ticks launch nothing (they say so), so the two never
retrain twice.
"""


from collections.abc import Callable
from pathlib import Path

import dagster as dg

from assets.automation import AUTOMATION_SENSOR, DEFAULT_RETRAINING_CRON, TIMEZONE, TRAINED_GROUPS
from assets.dagster_private import ASSET_JOB, sensor_running
from assets.project import config_path
from dagster_ir.collections import CollectionConfigError
from dagster_ir.collections.config import read_config_document

SECTION = "schedules"
TRAINED_SELECTION = dg.AssetSelection.groups(*TRAINED_GROUPS)
RETRAIN_TAG = "dagster_ir/retrain"  # what a retraining run was launched for


def retraining_cron(path: str | Path | None = None) -> str:
    """The retraining cron of the YAML file at `path` (default: the project's), else weekly."""
    path = config_path() if path is None else Path(path)
    if path is None:
        return DEFAULT_RETRAINING_CRON
    section = read_config_document(path).get(SECTION)
    if section is None:
        return DEFAULT_RETRAINING_CRON
    if not isinstance(section, dict):
        raise CollectionConfigError(f"{path}: {SECTION}: expected a mapping like {{retraining: '0 3 * * 0'}}")
    unknown = sorted(set(section) - {"retraining"})
    if unknown:
        raise CollectionConfigError(f"{path}: {SECTION}.{unknown[0]}: unknown key (allowed: retraining)")
    cron = section.get("retraining", DEFAULT_RETRAINING_CRON)
    if not isinstance(cron, str) or not is_valid_cron(cron):
        raise CollectionConfigError(
            f"{path}: {SECTION}.retraining: {cron!r} is not a cron expression (five fields, e.g. '0 3 * * 0')")
    return cron


def is_valid_cron(cron: str) -> bool:
    """Whether Dagster accepts `cron` as a schedule's cron string (asked through a throwaway definition)."""
    try:
        dg.ScheduleDefinition(name="cron_check", cron_schedule=cron, job_name="cron_check")
    except dg.DagsterInvalidDefinitionError:
        return False
    return True


def stale_trained(defs: dg.Definitions, instance: dg.DagsterInstance,
                  selection: dg.AssetSelection = TRAINED_SELECTION) -> list[tuple[dg.AssetKey, str | None]]:
    """The stale or missing asset partitions of `selection` (Dagster's staleness, as `update` sees it)."""
    from assets.updates import stale_partitions

    return sorted(stale_partitions(defs, instance, selection), key=lambda kp: (kp[0].to_user_string(), kp[1] or ""))


def retraining_requests(defs: dg.Definitions, instance: dg.DagsterInstance,
                        selection: dg.AssetSelection = TRAINED_SELECTION) -> list[dg.RunRequest]:
    """One run request per partition key holding stale trained asset partitions (its stale assets selected),
    upstream partitions first; a partition that reads another stale partition of this list waits (see the
    module docstring)."""
    from assets.updates import _State

    stale = set(stale_trained(defs, instance, selection))
    state = _State(defs, instance, None, selection)
    by_partition: dict[str | None, list[dg.AssetKey]] = {}
    for key, partition in sorted(stale, key=lambda kp: (kp[1] or "", kp[0].to_user_string())):
        by_partition.setdefault(partition, []).append(key)
    requests = []
    for partition, keys in sorted(by_partition.items(), key=lambda item: item[0] or ""):
        reads = {parent for key in keys for parent in state.parents(key, partition)}
        if any(parent in stale and parent[1] != partition for parent in reads):
            continue  # requested at a later tick, once what it reads was retrained
        names = [key.to_user_string() for key in keys]
        requests.append(dg.RunRequest(
            run_key=f"retrain:{partition or 'unpartitioned'}", asset_selection=keys, partition_key=partition,
            tags={RETRAIN_TAG: ", ".join(names)[:4000], "dagster_ir/command": "retraining",
                  "dagster_ir/assets": ", ".join(names)[:4000]},
        ))
    return requests


def make_retraining_schedule(cron: str, load_defs: Callable[[], dg.Definitions],
                             selection: dg.AssetSelection = TRAINED_SELECTION,
                             default_status: dg.DefaultScheduleStatus = dg.DefaultScheduleStatus.RUNNING,
                             ) -> dg.ScheduleDefinition:
    """The `retraining` schedule on `cron` over `selection` of the definitions `load_defs()` returns."""

    @dg.schedule(name="retraining", cron_schedule=cron, execution_timezone=TIMEZONE, job_name=ASSET_JOB,
                 default_status=default_status,
                 description=f"Retrain the stale trained assets (groups {', '.join(TRAINED_GROUPS)}) on '{cron}' "
                             f"({TIMEZONE}): one run per stale partition; a tick with nothing stale launches "
                             f"nothing, and none while {AUTOMATION_SENSOR} is on (it retrains them then). Set the "
                             "cron in dagster-ir.yaml (schedules: {retraining: ...}).")
    def retraining(context: dg.ScheduleEvaluationContext):
        if sensor_running(context.instance, AUTOMATION_SENSOR):
            return dg.SkipReason(f"{AUTOMATION_SENSOR} is on: the trained assets' automation conditions retrain "
                                 "them at this cron tick; launched nothing (stop one of the two)")
        requests = retraining_requests(load_defs(), context.instance, selection)
        if not requests:
            return dg.SkipReason("nothing stale among the trained assets: launched nothing")
        return requests

    return retraining


def _project_defs() -> dg.Definitions:
    from assets.definitions import defs

    return defs


retraining_schedule = make_retraining_schedule(retraining_cron(), _project_defs)
