"""The `retraining` schedule: on its cron tick, retrain only the trained assets that are stale.

The cron comes from the project's YAML (`schedules: {retraining: "0 3 * * 0"}`, UTC; default weekly,
Sunday 03:00). A tick asks Dagster's staleness (as `dagster-ir update` does: a code version, a config
section or an upstream data version changed, or the partition is missing) which trained asset
partitions are stale. With none it launches nothing (the tick says why); otherwise it launches one
`retraining_job` run, which brings exactly those up to date in dependency order, one run per
partition, under the same partition locks as `dagster-ir update`. Like every Dagster schedule it is
stopped until turned on in the UI (Automation -> retraining).

The schedule and the default automation sensor's cron condition on the trained assets do the same
retraining by two routes; turn on one of them (see the README's "Operating it").
"""


from collections.abc import Callable
from pathlib import Path

import dagster as dg

from assets.automation import DEFAULT_RETRAINING_CRON, TIMEZONE, TRAINED_GROUPS
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


class RetrainConfig(dg.Config):
    """Which asset keys the run brings up to date (empty: every stale trained asset)."""

    assets: list[str] = []


@dg.op(description="Materialize the stale partitions of the trained assets, upstream first, like `dagster-ir update`.")
def retrain(context: dg.OpExecutionContext, config: RetrainConfig) -> None:
    from assets.definitions import defs, resources
    from assets.updates import update_all

    selection = dg.AssetSelection.assets(*config.assets) if config.assets else TRAINED_SELECTION
    report = update_all(defs, context.instance, resources=resources(), selection=selection,
                        log=context.log.info, command="retraining")
    context.log.info(f"{report.materialized} asset partitions materialized in {len(report.runs)} runs, "
                     f"{report.fresh} up to date")
    if not report.ok:
        lines = [f"{', '.join(keys)}" + (f" [{p}]" if p else "") + f": {message}" for p, keys, message in report.failures]
        raise dg.Failure(f"{len(report.failures)} retraining runs failed", description="\n".join(lines))


@dg.job(description="Retrain what is stale among the trained assets (launched by the `retraining` schedule).",
        tags={"dagster_ir/command": "retraining"})
def retraining_job():
    retrain()


def stale_trained(defs: dg.Definitions, instance: dg.DagsterInstance,
                  selection: dg.AssetSelection = TRAINED_SELECTION) -> list[tuple[dg.AssetKey, str | None]]:
    """The stale or missing asset partitions of `selection` (Dagster's staleness, as `update` sees it)."""
    from assets.updates import stale_partitions

    return sorted(stale_partitions(defs, instance, selection), key=lambda kp: (kp[0].to_user_string(), kp[1] or ""))


def make_retraining_schedule(cron: str, load_defs: Callable[[], dg.Definitions],
                             selection: dg.AssetSelection = TRAINED_SELECTION) -> dg.ScheduleDefinition:
    """The `retraining` schedule on `cron` over `selection` of the definitions `load_defs()` returns."""

    @dg.schedule(name="retraining", cron_schedule=cron, execution_timezone=TIMEZONE, job=retraining_job,
                 default_status=dg.DefaultScheduleStatus.STOPPED,
                 description=f"Retrain the stale trained assets (groups {', '.join(TRAINED_GROUPS)}) on '{cron}' "
                             f"({TIMEZONE}); a tick with nothing stale launches nothing. Set the cron in "
                             "dagster-ir.yaml (schedules: {retraining: ...}).")
    def retraining(context: dg.ScheduleEvaluationContext):
        stale = stale_trained(load_defs(), context.instance, selection)
        if not stale:
            return dg.SkipReason("nothing stale among the trained assets: launched nothing")
        names = sorted({key.to_user_string() for key, _ in stale})
        partitions = sorted({p for _, p in stale if p is not None})
        # The run brings every trained asset up to date: what is stale now, then what reads it.
        return dg.RunRequest(
            tags={RETRAIN_TAG: ", ".join(names)[:4000], "dagster_ir/partitions": ", ".join(partitions)[:4000]},
        )

    return retraining


def _project_defs() -> dg.Definitions:
    from assets.definitions import defs

    return defs


retraining_schedule = make_retraining_schedule(retraining_cron(), _project_defs)
