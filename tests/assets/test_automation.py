"""Automation ticks and the retraining schedule, evaluated with Dagster's test utilities.

A small graph with the project's groups stands in for the pipeline (the real one trains for
minutes): an observable dump source, a dump-partitioned parse, a corpus-wide asset, two methods'
trained assets. The conditions, the pool helper and the schedule are the project's own.
"""

from datetime import UTC, datetime, timedelta

import dagster as dg
import pytest

from assets.defs.automation import AUTOMATION_SENSOR, TRAINING_POOL, automate, automation_sensor
from assets.defs.schedules import RETRAIN_TAG, retraining_cron, retraining_schedules
from assets.lib.asset_jobs import asset_jobs, job_name
from dagster_ir.collections import CollectionConfigError

CRON = "0 3 * * 0"  # Sundays 03:00 UTC


dumps = dg.DynamicPartitionsDefinition(name="dumps")
units = dg.StaticPartitionsDefinition(["wiki-car/seed-0"])
UNIT = "wiki-car/seed-0"


def graph(model_version: str = "1", rerank_version: str = "1") -> list:
    @dg.observable_source_asset(group_name="wikipedia", partitions_def=dumps)
    def wiki_dump_file():
        """Never observed here, as in the UI."""
        return dg.DataVersion("x")

    @dg.asset(group_name="wikipedia", partitions_def=dumps, deps=[wiki_dump_file], code_version="1")
    def wiki_articles(context) -> int:
        """One dump parsed."""
        return len(context.partition_key)

    @dg.asset(
        group_name="wikipedia",
        code_version="1",
        ins={"wiki_articles": dg.AssetIn(partition_mapping=dg.AllPartitionMapping())},
    )
    def wiki_links(wiki_articles) -> int:
        """Corpus-wide, over every dump (one dump loads as its value, several as a dict)."""
        return sum(wiki_articles.values()) if isinstance(wiki_articles, dict) else wiki_articles

    @dg.asset(group_name="php", code_version=model_version, pool=TRAINING_POOL)
    def php_hp(wiki_links: int) -> int:
        """A trained asset (a training step: pooled)."""
        return wiki_links + 1

    @dg.asset(group_name="php", code_version=rerank_version, partitions_def=units)
    def reranked_runs(php_hp: int) -> int:
        """Downstream of the trained asset, one partition per training unit (as cross_encoder reads php_mrds)."""
        return php_hp * 2

    @dg.asset(group_name="ghrm", code_version="1", pool=TRAINING_POOL)
    def ghrm_runs(wiki_links: int) -> int:
        """Another method's trained asset."""
        return wiki_links - 1

    return automate([wiki_dump_file, wiki_articles, wiki_links, php_hp, reranked_runs, ghrm_runs], CRON)


IO = {}


def definitions(tmp_path, model_version: str = "1", rerank_version: str = "1") -> dg.Definitions:
    IO["io_manager"] = dg.FilesystemIOManager(base_dir=str(tmp_path / "io"))
    return dg.Definitions(assets=graph(model_version, rerank_version), resources=dict(IO))


class Clock:
    """Evaluation times: a Monday noon, then forward; `past_cron` jumps over the next Sunday 03:00."""

    def __init__(self) -> None:
        self.now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

    def tick(self, minutes: int = 1) -> datetime:
        self.now += timedelta(minutes=minutes)
        return self.now

    def past_cron(self) -> datetime:
        days = (6 - self.now.weekday()) % 7 or 7
        self.now = (self.now + timedelta(days=days)).replace(hour=3, minute=5)
        return self.now


class Ticks:
    """Successive evaluations of the automation conditions, as the automation sensor makes them."""

    def __init__(self, instance) -> None:
        self.instance, self.cursor, self.clock = instance, None, Clock()

    def __call__(self, defs: dg.Definitions, *, past_cron: bool = False) -> set[tuple[str, str | None]]:
        when = self.clock.past_cron() if past_cron else self.clock.tick()
        result = dg.evaluate_automation_conditions(
            defs=defs, instance=self.instance, cursor=self.cursor, evaluation_time=when
        )
        self.cursor = result.cursor
        keys = {item.key for item in result.results if isinstance(item.key, dg.AssetKey)}
        requested = {(key.to_user_string(), p) for key in keys for p in result.get_requested_partitions(key)}
        return requested


def materialize(defs: dg.Definitions, instance, names: list[str], partition: str | None = None) -> None:
    assets = [a for a in defs.assets if isinstance(a, dg.AssetsDefinition) and a.is_materializable]
    result = dg.materialize(assets, selection=names, partition_key=partition, instance=instance, resources=dict(IO))
    assert result.success


def demo(defs, instance) -> None:
    """What `make demo` leaves: one dump, everything materialized."""
    instance.add_dynamic_partitions("dumps", ["d1"])
    materialize(defs, instance, ["wiki_articles"], "d1")
    materialize(defs, instance, ["wiki_links", "php_hp", "ghrm_runs"])
    materialize(defs, instance, ["reranked_runs"], UNIT)


def test_automation_after_demo_a_new_dump_and_a_code_change(tmp_path):
    defs = definitions(tmp_path)
    with dg.instance_for_test() as instance:
        demo(defs, instance)
        ticks = Ticks(instance)
        assert ticks(defs) == set()  # the first evaluation after the demo
        assert ticks(defs, past_cron=True) == set()  # a cron tick with nothing changed
        instance.add_dynamic_partitions("dumps", ["d2"])  # a new dump registered (the sensor adds it)
        assert ticks(defs) == {("wiki_articles", "d2")}  # parsed at once, no cron needed
        materialize(defs, instance, ["wiki_articles"], "d2")
        assert ticks(defs) == {("wiki_links", None)}  # then the corpus-wide asset
        materialize(defs, instance, ["wiki_links"])
        assert ticks(defs) == set()  # the trained assets wait for the cron
        assert ticks(defs) == set()
        assert ticks(defs, past_cron=True) == {("php_hp", None), ("ghrm_runs", None)}
        assert ticks(defs) == set()  # while they run
        materialize(defs, instance, ["php_hp", "ghrm_runs"])
        assert ticks(defs) == {("reranked_runs", UNIT)}  # the reader of a retrained asset follows at once
        materialize(defs, instance, ["reranked_runs"], UNIT)
        assert ticks(defs) == set()
        assert ticks(defs, past_cron=True) == set()  # the next cron tick: nothing changed since
        changed = definitions(tmp_path, model_version="2")  # one method's code changed
        assert ticks(changed) == set()
        assert ticks(changed, past_cron=True) == {("php_hp", None)}  # not ghrm_runs


def test_trained_assets_never_built_are_due_at_the_cron_tick(tmp_path):
    defs = definitions(tmp_path)
    with dg.instance_for_test() as instance:  # what `dagster-ir demo --first-stage` leaves
        instance.add_dynamic_partitions("dumps", ["d1"])
        materialize(defs, instance, ["wiki_articles"], "d1")
        materialize(defs, instance, ["wiki_links"])
        ticks = Ticks(instance)
        assert ticks(defs) == set()
        assert ticks(defs, past_cron=True) == {("php_hp", None), ("ghrm_runs", None)}
        materialize(defs, instance, ["php_hp", "ghrm_runs"])
        assert ticks(defs) == {("reranked_runs", UNIT)}


def schedule_tick(defs, instance, launch: bool = False) -> tuple[list[tuple[str, str | None]], str | None]:
    """One tick of each of the project's retraining schedules (frozen at a Sunday 03:00) as the daemon
    evaluates them: the requested (assets, partition) pairs, and the skip messages. With `launch`, each
    request is executed as the daemon launches it (a run of the schedule's job) and checked."""
    groups = ("php", "ghrm")
    schedules = retraining_schedules(defs.assets, CRON, lambda: defs, groups)
    repository = dg.Definitions(
        assets=defs.assets, resources=defs.resources, schedules=schedules, jobs=asset_jobs(defs.assets)
    ).get_repository_def()
    requests, skipped = [], []
    for schedule in schedules:
        with dg.build_schedule_context(
            instance=instance, repository_def=repository, scheduled_execution_time=datetime(2026, 12, 6, 3, tzinfo=UTC)
        ) as context:
            data = schedule.evaluate_tick(context)
        skipped += [data.skip_message] if data.skip_message else []
        for request in data.run_requests or []:  # runs of the schedule's named job, partition tag set
            assert request.job_name == schedule.job_name and repository.has_job(request.job_name)
            assert request.tags.get("dagster/partition") == request.partition_key
            assert request.tags[RETRAIN_TAG] == ", ".join(k.to_user_string() for k in request.asset_selection)
            if launch:
                result = repository.get_job(schedule.job_name).execute_in_process(
                    instance=instance,
                    asset_selection=list(request.asset_selection),
                    partition_key=request.partition_key,
                    tags=request.tags,
                )
                assert result.success and result.dagster_run.job_name == schedule.job_name
            requests.append(request)
    requested = sorted((", ".join(k.to_user_string() for k in r.asset_selection), r.partition_key) for r in requests)
    return requested, "; ".join(skipped) if not requested else None


def test_one_retraining_schedule_per_named_job_holding_trained_assets(tmp_path):
    defs = definitions(tmp_path)
    schedules = retraining_schedules(defs.assets, CRON, lambda: defs, ("php", "ghrm"))
    # php_hp and ghrm_runs are unpartitioned, reranked_runs is per unit: two jobs, no `__ASSET_JOB`
    units_job = job_name(units)
    assert {s.name: s.job_name for s in schedules} == {
        "retraining_unpartitioned_assets": "unpartitioned_assets_job",
        f"retraining_{units_job.removesuffix('_job')}": units_job,
    }
    assert all(s.cron_schedule == CRON for s in schedules)


def test_retraining_schedule_requests_exactly_the_stale_partitions(tmp_path):
    defs = definitions(tmp_path)
    with dg.instance_for_test() as instance:
        demo(defs, instance)
        requested, skipped = schedule_tick(defs, instance)
        assert requested == [] and "nothing stale" in skipped
        # one method's code changed: only its asset, not the other method's, not what reads it
        assert schedule_tick(definitions(tmp_path, model_version="2"), instance) == ([("php_hp", None)], None)
        # a unit-partitioned asset's code changed: its partition, with the partition key
        assert schedule_tick(definitions(tmp_path, rerank_version="2"), instance) == ([("reranked_runs", UNIT)], None)
        # both: the reader of a stale partition waits for the next tick (both runs would start at once)
        both = definitions(tmp_path, model_version="2", rerank_version="2")
        assert schedule_tick(both, instance) == ([("php_hp", None)], None)
        instance.add_dynamic_partitions("dumps", ["d2"])
        materialize(defs, instance, ["wiki_articles"], "d2")
        materialize(defs, instance, ["wiki_links"])
        assert schedule_tick(defs, instance) == ([("ghrm_runs, php_hp", None)], None)  # one run per partition


def test_retraining_runs_are_runs_of_the_named_jobs_and_leave_nothing_stale(tmp_path):
    defs = definitions(tmp_path)
    with dg.instance_for_test() as instance:
        demo(defs, instance)
        changed = definitions(tmp_path, model_version="2", rerank_version="2")
        assert schedule_tick(changed, instance, launch=True)[0] == [("php_hp", None)]
        assert schedule_tick(changed, instance, launch=True)[0] == [("reranked_runs", UNIT)]  # the next tick
        assert schedule_tick(changed, instance)[0] == []
        jobs = {run.job_name for run in instance.get_runs(filters=dg.RunsFilter(tags={RETRAIN_TAG: "php_hp"}))}
        assert jobs == {"unpartitioned_assets_job"}


def test_retraining_schedule_steps_aside_while_the_automation_sensor_is_on(tmp_path):
    from dagster._core.remote_origin import InProcessCodeLocationOrigin, RemoteInstigatorOrigin, RemoteRepositoryOrigin
    from dagster._core.scheduler.instigation import InstigatorState, InstigatorStatus, InstigatorType
    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

    defs = definitions(tmp_path)
    with dg.instance_for_test() as instance:
        demo(defs, instance)
        ticks = Ticks(instance)
        assert ticks(defs) == set()  # the sensor's evaluations before the code change
        changed = definitions(tmp_path, model_version="2")
        assert schedule_tick(changed, instance)[0] == [("php_hp", None)]
        repo = RemoteRepositoryOrigin(InProcessCodeLocationOrigin(LoadableTargetOrigin(python_file=__file__)), "r")
        sensor = RemoteInstigatorOrigin(repo, AUTOMATION_SENSOR)  # turned on, as the UI's toggle does
        instance.add_instigator_state(InstigatorState(sensor, InstigatorType.SENSOR, InstigatorStatus.RUNNING))
        requested, skipped = schedule_tick(changed, instance)
        assert requested == [] and f"{AUTOMATION_SENSOR} is on" in skipped
        # and its conditions do request it at the cron tick: the retraining happens once, by the sensor
        assert ticks(changed, past_cron=True) == {("php_hp", None)}


def test_training_steps_carry_the_pool_and_others_do_not(tmp_path):
    pools = {
        key.to_user_string(): node.pools
        for node in definitions(tmp_path).resolve_asset_graph().asset_nodes
        for key in [node.key]
    }
    assert pools["php_hp"] == {TRAINING_POOL}
    assert pools["reranked_runs"] == set() and pools["wiki_links"] == set()


def test_a_training_step_declared_without_the_pool_is_refused():
    @dg.asset(group_name="php")
    def php_hp() -> int:
        """A training step someone forgot to pool."""
        return 1

    with pytest.raises(ValueError, match="php_hp: a training step must be declared with"):
        automate([php_hp])


def test_conditions_wait_for_upstream_blocking_checks(tmp_path):
    """Both conditions contain Dagster's `all_deps_blocking_checks_passed()` and ignore the sources."""

    def labels(condition) -> set[str]:
        found, todo = set(), [condition]
        while todo:
            node = todo.pop()
            found.add(node.get_label() or "")
            todo.extend(node.children)
        return found

    nodes = {n.key.to_user_string(): n for n in definitions(tmp_path).resolve_asset_graph().asset_nodes}
    for name in ("wiki_links", "php_hp"):
        assert "all_deps_blocking_checks_passed" in labels(nodes[name].automation_condition), name


def test_project_definitions_declare_the_schedule_sensors_conditions_and_pools():
    from assets.definitions import defs

    # (the Definitions' own lists: building the repository here would reuse a closed test instance)
    schedules = {s.name: s for s in defs.schedules}
    sensors = {s.name: s for s in defs.sensors}
    # the schedules are the retraining route on by default; the automation sensor is off (see the schedule's test)
    assert {name: s.job_name for name, s in schedules.items()} == {
        "retraining_unpartitioned_assets": "unpartitioned_assets_job",
        "retraining_collection_assets": "collection_assets_job",
        "retraining_unit_assets": "unit_assets_job",
    }
    job_names = {job.name for job in defs.jobs}
    for schedule in schedules.values():
        assert (
            schedule.cron_schedule == retraining_cron() and schedule.default_status == dg.DefaultScheduleStatus.RUNNING
        )
        assert schedule.job_name in job_names
    assert sensors["source_observation_sensor"].default_status == dg.DefaultSensorStatus.RUNNING
    sensor = sensors["default_automation_condition_sensor"]
    assert sensor.default_status == dg.DefaultSensorStatus.STOPPED
    assert "start" in sensors["wiki_dump_sensor"].description.lower()
    assert {"unpartitioned_assets_job", "dump_assets_job", "collection_assets_job", "unit_assets_job"} <= {
        job.name for job in defs.jobs
    }
    graph_ = defs.resolve_asset_graph()
    labels = {
        node.key.to_user_string(): node.automation_condition.get_label()
        for node in graph_.asset_nodes
        if node.is_materializable
    }
    assert labels["wiki_links"] == labels["wiki_articles"] == labels["corpus"] == "eager"
    assert labels["cross_encoder"].startswith("retrain on cron") and labels["model_report"].startswith(
        "retrain on cron"
    )
    assert graph_.get(dg.AssetKey("cross_encoder")).pools == {TRAINING_POOL}
    assert graph_.get(dg.AssetKey("candidate_runs")).pools == set()
    assert automation_sensor().name == sensor.name


def test_retraining_cron_comes_from_the_yaml_and_bad_values_name_the_field(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("collections:\n  wiki-car: {kind: wiki-car}\nschedules:\n  retraining: '30 2 * * 1'\n")
    assert retraining_cron(good) == "30 2 * * 1"
    default = tmp_path / "default.yaml"
    default.write_text("collections:\n  wiki-car: {kind: wiki-car}\n")
    assert retraining_cron(default) == "0 3 * * 0"
    bad = tmp_path / "bad.yaml"
    bad.write_text("collections:\n  wiki-car: {kind: wiki-car}\nschedules:\n  retraining: weekly\n")
    with pytest.raises(CollectionConfigError, match=r"bad.yaml: schedules.retraining: 'weekly' is not a cron"):
        retraining_cron(bad)
    typo = tmp_path / "typo.yaml"
    typo.write_text("collections:\n  wiki-car: {kind: wiki-car}\nschedules:\n  retrain: '0 3 * * 0'\n")
    with pytest.raises(CollectionConfigError, match=r"schedules.retrain: unknown key"):
        retraining_cron(typo)
