"""Declarative automation and concurrency pools, applied centrally over the asset list.

- Data assets (groups `wikipedia`, `collections`, `retrieval`, `evaluation`) are *eager*: a new dump
  partition is parsed as soon as it exists, and the corpus-wide Wikipedia assets, the collections
  and the first-stage runs follow as soon as what they read was updated. The observable sources
  (`wiki_dump_file`, `collection_config`, `imported_runs`, ...) are observed by `dagster-ir update`
  and by the observation sensor (assets.defs.observation), not materialized, so a never-observed source
  does not count as missing.
- Trained assets (groups `php`, `model1`, `ghrm`, `cet`, `baselines`, `methods_report`) are *due on the
  retraining cron*: an asset partition is requested at a cron tick only if, since it was last
  requested or updated, an upstream asset was updated or its code version changed, or it is
  missing (never built, or a new partition). Downstream of a trained asset the wave goes on at once (a reranker follows the
  checkpoint it reads), since trained assets only change in such a wave.
- Both are Dagster's documented variants: `eager()` with `any_deps_missing` ignoring the observable
  sources (`.replace(...)`), and both wait for their upstream's blocking asset checks
  (`all_deps_blocking_checks_passed()`), so a failed invariant check stops the wave below it.
- Training steps carry the Dagster pool `training` (`@dg.asset(pool=TRAINING_POOL)` in their modules;
  limit 1 by default, set in the instance's dagster.yaml, see `assets.cli.instance`), so parallel steps or
  runs never train two models at once on the shared cores; IO-bound and light steps are not limited.
  `automate` refuses a training step declared without it.

`automate(assets)` maps the conditions over the list in `assets.definitions`.
The default automation sensor is declared (stopped, as Dagster's sensors are by default); turn it on
in the UI (Automation -> default_automation_condition_sensor) to let data flow without a person.
The retraining schedules (assets.defs.schedules, on by default) are the other route to the trained assets'
retraining; while this sensor is on, their ticks launch nothing, so they never retrain twice.
"""

from __future__ import annotations

from collections.abc import Iterable

import dagster as dg

DATA_GROUPS = ("wikipedia", "collections", "retrieval", "evaluation")
TRAINED_GROUPS = ("php", "model1", "ghrm", "cet", "baselines", "methods_report")
SOURCES = ("wiki_dump_file", "collection_config", "collection_settings", "run_profile_setting", "imported_runs")
TRAINING_POOL = "training"
# Steps that fit a model (checkpoints, EM tables, word vectors, per-fold GNNs, CET rankers).
TRAINING_STEPS = frozenset(
    {
        "php_hp",
        "php_shp",
        "php_mrds",
        "php_ablations",
        "php_baselines",
        "cross_encoder",
        "model1_em",
        "neural_model1",
        "bert_model1",
        "bert_vanilla",
        "word2vec",
        "ghrm_runs",
        "ghrm_sweeps",
        "cet",
        "neural_baselines",
    }
)
DEFAULT_RETRAINING_CRON = "0 3 * * 0"  # weekly: Sunday 03:00
TIMEZONE = "UTC"
AUTOMATION_SENSOR = "default_automation_condition_sensor"

AC = dg.AutomationCondition


def _sources_not_missing() -> dg.AutomationCondition:
    """`any_deps_missing`, with never-observed observable sources not counted as missing deps."""
    return AC.any_deps_missing().ignore(dg.AssetSelection.assets(*SOURCES))


def eager_condition() -> dg.AutomationCondition:
    """Dagster's `eager()`, sources excepted from `any_deps_missing`, after upstream blocking checks passed."""
    return (
        AC.eager().replace("any_deps_missing", _sources_not_missing()) & AC.all_deps_blocking_checks_passed()
    ).with_label("eager")


def retraining_condition(cron: str = DEFAULT_RETRAINING_CRON, timezone: str = TIMEZONE) -> dg.AutomationCondition:
    """Due at a cron tick when something it depends on changed; downstream of a retrained asset at once."""
    changed = (AC.any_deps_updated() | AC.code_version_changed()).since_last_handled() | AC.missing()
    trained_upstream_updated = AC.any_deps_match(AC.newly_updated()).allow(dg.AssetSelection.groups(*TRAINED_GROUPS))
    return (
        changed.with_label("missing, or upstream or code changed since last handled")
        & (
            AC.cron_tick_passed(cron, timezone)
            | trained_upstream_updated.with_label("a trained upstream was retrained")
        )
        & ~_sources_not_missing()
        & ~AC.any_deps_in_progress()
        & ~AC.in_progress()
        & AC.all_deps_blocking_checks_passed()
    ).with_label(f"retrain on cron '{cron}' when stale")


def condition_for(group: str | None, cron: str) -> dg.AutomationCondition | None:
    """The automation condition of an asset of `group` (None: not automated)."""
    if group in DATA_GROUPS:
        return eager_condition()
    if group in TRAINED_GROUPS:
        return retraining_condition(cron)
    return None


def automate(assets: Iterable, cron: str = DEFAULT_RETRAINING_CRON) -> list:
    """Every asset with its group's automation condition; a training step must be in the `training` pool."""
    out = []
    for item in assets:
        if isinstance(item, dg.AssetsDefinition) and item.is_executable and item.is_materializable:
            item = item.map_asset_specs(
                lambda spec: (
                    spec
                    if spec.automation_condition is not None
                    else spec.replace_attributes(automation_condition=condition_for(spec.group_name, cron))
                )
            )
            names = sorted(k.to_user_string() for k in item.keys if k.to_user_string() in TRAINING_STEPS)
            if names and TRAINING_POOL not in item.op.pools:
                raise ValueError(
                    f"{names[0]}: a training step must be declared with "
                    f"@dg.asset(pool=TRAINING_POOL) (assets.defs.automation)"
                )
        out.append(item)
    return out


def automation_sensor(target: dg.AssetSelection | None = None) -> dg.AutomationConditionSensorDefinition:
    """Dagster's default automation sensor over every asset (stopped until turned on in the UI)."""
    return dg.AutomationConditionSensorDefinition(
        AUTOMATION_SENSOR,
        target=target or dg.AssetSelection.all(),
        minimum_interval_seconds=30,
        description="Requests what the assets' automation conditions say is due: new dump partitions and the "
        "corpus-wide assets at once, trained assets at the retraining cron tick when stale (the "
        "retraining schedules then launch nothing). "
        "Stopped by default: start it here to let new data flow without a person.",
    )
