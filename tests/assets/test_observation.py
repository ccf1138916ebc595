"""The observation sensor: a YAML edited while the UI runs makes what reads it stale, without a command.

The project's own sources, jobs and sensor, over a YAML and a data directory the test makes; a small
asset partitioned by collection stands in for the readers of the settings (the real ones train).
Ticks are the sensor's own evaluation (`dg.build_sensor_context`), each requested run executed as the
daemon would launch it: a run of the job the request names.
"""

import dagster as dg
import pytest

from assets.defs.collections import collection_config
from assets.defs.observation import (
    COLLECTION_SOURCES_JOB,
    DUMP_SOURCES_JOB,
    observation_jobs,
    source_observation_sensor,
)
from assets.defs.retrieval import imported_runs
from assets.defs.wiki import wiki_dump_file
from assets.lib import settings
from assets.lib.dagster_private import FRESH, STALE, StaleResolver, latest_observed_version, observe
from assets.lib.partitions import collection_partitions
from assets.lib.project import CONFIG_ENV
from assets.lib.resources import DataDirResource
from assets.lib.settings import PROFILE_TAG, collection_settings, run_profile_setting

COLLECTION = collection_partitions.get_partition_keys()[0]


@dg.asset(partitions_def=collection_partitions, deps=[collection_settings], code_version="1")
def settings_reader() -> int:
    """Reads its collection's settings (as neural_baselines does)."""
    return 1


@pytest.fixture
def setup(tmp_path, monkeypatch):
    config = tmp_path / "dagster-ir.yaml"
    config.write_text(f"collections:\n  {COLLECTION}: {{kind: wiki-car}}\n")
    monkeypatch.setenv(CONFIG_ENV, str(config))
    monkeypatch.delenv(settings.PROFILE_ENV, raising=False)
    resources = {
        "data": DataDirResource(path=str(tmp_path / "data")),
        "io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path / "io")),
    }
    defs = dg.Definitions(
        assets=[
            wiki_dump_file,
            collection_config,
            collection_settings,
            run_profile_setting,
            imported_runs,
            settings_reader,
        ],
        jobs=observation_jobs,
        sensors=[source_observation_sensor],
        resources=resources,
    )
    with dg.instance_for_test() as instance:
        yield config, defs, resources, instance


class Sensor:
    """Successive ticks of the sensor, each requested run executed as a run of the job it names."""

    def __init__(self, defs, resources, instance) -> None:
        self.defs, self.resources, self.instance, self.cursor = defs, resources, instance, None

    def tick(self) -> tuple[list[str], str | None]:
        with dg.build_sensor_context(
            instance=self.instance, cursor=self.cursor, resources=self.resources, definitions=self.defs
        ) as context:
            data = source_observation_sensor.evaluate_tick(context)
        self.cursor = data.cursor or self.cursor
        jobs = []
        for request in data.run_requests or []:
            result = self.defs.resolve_job_def(request.job_name).execute_in_process(
                instance=self.instance, tags=request.tags
            )
            assert result.success and result.dagster_run.job_name == request.job_name
            jobs.append(request.job_name)
        return jobs, data.skip_message


def settings_version(instance) -> str | None:
    records = instance.fetch_observations(
        dg.AssetRecordsFilter(asset_key=collection_settings.key, asset_partitions=[COLLECTION]), limit=1
    ).records
    return records[0].asset_observation.tags.get("dagster/data_version") if records else None


def test_an_edited_yaml_is_observed_at_the_next_tick_and_its_reader_reads_as_stale(setup):
    config, defs, resources, instance = setup
    sensor = Sensor(defs, resources, instance)
    assert sensor.tick()[0] == [COLLECTION_SOURCES_JOB, DUMP_SOURCES_JOB]  # the first tick observes everything
    before = settings_version(instance)
    assert before is not None
    assert dg.materialize([settings_reader], partition_key=COLLECTION, instance=instance, resources=resources).success
    resolver = lambda: StaleResolver(instance, defs.resolve_asset_graph())  # noqa: E731
    assert resolver().status(settings_reader.key, COLLECTION) == FRESH
    assert sensor.tick() == ([], "no source changed since the last observation")  # nothing launched, no run

    config.write_text(f"collections:\n  {COLLECTION}: {{kind: wiki-car, profile: paper}}\n")  # edited in place
    assert sensor.tick()[0] == [COLLECTION_SOURCES_JOB]  # the dump files did not change: not observed
    assert settings_version(instance) not in (None, before)  # a new observation, a new data version
    resolver_ = resolver()
    assert resolver_.status(settings_reader.key, COLLECTION) == STALE
    assert any(
        cause.startswith(f"collection_settings[{COLLECTION}]")
        for cause in resolver_.causes(settings_reader.key, COLLECTION)
    )


def test_a_yaml_that_does_not_load_skips_the_tick_and_names_the_file(setup):
    config, defs, resources, instance = setup
    sensor = Sensor(defs, resources, instance)
    sensor.tick()
    config.write_text("collections: [\n")
    jobs, skipped = sensor.tick()
    assert jobs == [] and skipped.startswith("not observed: ") and str(config) in skipped
    config.write_text(f"collections:\n  {COLLECTION}: {{kind: wiki-car, profile: paper}}\n")
    assert sensor.tick()[0] == [COLLECTION_SOURCES_JOB]  # retried once the file loads again


def test_observing_in_the_ui_keeps_the_profile_the_command_line_last_observed(setup, monkeypatch):
    config, defs, resources, instance = setup
    monkeypatch.setenv(settings.PROFILE_ENV, "paper")  # `dagster-ir update --profile paper` observes first
    observe(run_profile_setting, instance=instance, resources=resources, run_config={})
    observe(collection_settings, instance=instance, resources=resources, run_config={})
    paper = settings_version(instance)
    monkeypatch.delenv(settings.PROFILE_ENV)  # the UI's processes have no run-wide profile
    sensor = Sensor(defs, resources, instance)
    sensor.tick()
    runs = instance.get_runs(filters=dg.RunsFilter(job_name=COLLECTION_SOURCES_JOB))
    assert runs and runs[0].tags[PROFILE_TAG] == "paper"
    assert latest_observed_version(instance, run_profile_setting.key) == "paper"
    assert settings_version(instance) == paper  # not switched to the collection's own profile
