"""The one Definitions object of dagster-ir."""

from __future__ import annotations

import dagster as dg

from assets.defs.automation import automate, automation_sensor
from assets.defs.baselines import baselines_assets, baselines_checks
from assets.defs.cet import cet_assets, cet_checks
from assets.defs.checks import collection_checks
from assets.defs.collections import collection_assets
from assets.defs.evaluation import evaluation_assets
from assets.defs.executors import executor_definition, project_executor_settings
from assets.defs.ghrm import ghrm_assets, ghrm_checks
from assets.defs.jobs import all_jobs, all_sensors
from assets.defs.model1 import model1_assets, model1_checks
from assets.defs.model_report import model_report_assets
from assets.defs.observation import observation_jobs, source_observation_sensor
from assets.defs.php import php_assets, php_checks
from assets.defs.retrieval import retrieval_assets
from assets.defs.schedules import retraining_cron, retraining_schedules
from assets.defs.wiki import wiki_assets, wiki_checks
from assets.lib.asset_jobs import asset_jobs
from assets.lib.dagster_private import quiet_log_watchers
from assets.lib.io_managers import PolarsParquetIOManager
from assets.lib.metadata import with_kinds
from assets.lib.resources import DataDirResource
from assets.lib.settings import check_settings, collection_settings, run_profile_setting, settable_configs

# Ctrl-C during a step prints the one "interrupted" line, not a traceback from each of Dagster's
# compute-log watchers: in every process that runs steps (each imports these definitions).
quiet_log_watchers()

all_assets = [
    *wiki_assets,
    *collection_assets,
    collection_settings,
    run_profile_setting,
    *retrieval_assets,
    *php_assets,
    *model1_assets,
    *ghrm_assets,
    *cet_assets,
    *evaluation_assets,
    *model_report_assets,
    *baselines_assets,
]
# Automation conditions by group, the `training` pool checked on training steps (see assets.defs.automation),
# and the UI's kind badges (assets.lib.metadata).
all_assets = with_kinds(automate(all_assets, retraining_cron()))
# The assets that take per-collection settings (`assets:` of a collection in the YAML; see assets.lib.settings).
SETTABLE = settable_configs(all_assets)
check_settings(SETTABLE)
all_checks = [
    *wiki_checks,
    *collection_checks,
    *php_checks,
    *model1_checks,
    *ghrm_checks,
    *cet_checks,
    *baselines_checks,
]


def resources(data_dir: str = "") -> dict:
    """The resources every asset uses, rooted at `data_dir` ("" = $DAGSTER_IR_DATA or ./data)."""
    return {
        "io_manager": PolarsParquetIOManager(data_dir=data_dir),
        "data": DataDirResource(path=data_dir),
    }


# `dagster-ir demo` and `update` materialize every asset (the four methods' demo profiles included);
# `--first-stage` stops at the first-stage evaluation report and leaves the method groups out.
METHOD_GROUPS = ("php", "model1", "ghrm", "cet", "methods_report", "baselines")
DEMO_SELECTION = dg.AssetSelection.all()
FIRST_STAGE_SELECTION = dg.AssetSelection.all() - dg.AssetSelection.groups(*METHOD_GROUPS)


def _project_defs() -> dg.Definitions:
    return defs


defs = dg.Definitions(
    assets=all_assets,
    asset_checks=all_checks,
    # one asset job per partitions definition: what `dagster-ir update` submits runs of (assets.cli.launch)
    # and the observation of the source assets, launched by source_observation_sensor (assets.defs.observation)
    jobs=[*all_jobs, *asset_jobs(all_assets), *observation_jobs],
    # one retraining schedule per named asset job holding trained assets (assets.defs.schedules)
    schedules=retraining_schedules(all_assets, retraining_cron(), _project_defs),
    sensors=[*all_sensors, automation_sensor(), source_observation_sensor],
    resources=resources(),
    executor=executor_definition(project_executor_settings()),  # `executor:` in dagster-ir.yaml
)
