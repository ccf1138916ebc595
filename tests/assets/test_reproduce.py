"""`dagster-ir reproduce`: which asset partitions a collection needs, that only those run, their times."""

import dagster as dg
import pytest

from assets.cli import main
from assets.reproduce import asset_times, collection_partitions_of, format_times, reproduction_plan
from assets.updates import update_all

COLLECTIONS = dg.StaticPartitionsDefinition(["a", "b"])
UNIT_KEYS = {"a": ["a/fold-0/seed-0", "a/fold-1/seed-0"], "b": ["b/seed-0"]}
UNITS = dg.StaticPartitionsDefinition([u for units in UNIT_KEYS.values() for u in units])
KINDS = dg.StaticPartitionsDefinition(["words", "pieces"])
TO_UNITS = dg.StaticPartitionMapping(UNIT_KEYS)
TO_COLLECTION = dg.StaticPartitionMapping({u: c for c, units in UNIT_KEYS.items() for u in units})


@dg.asset
def shared() -> int:
    return 1


@dg.asset(partitions_def=COLLECTIONS)
def docs(context: dg.AssetExecutionContext, shared: int) -> str:
    return f"{context.partition_key}:{shared}"


@dg.asset(partitions_def=UNITS, ins={"docs": dg.AssetIn(partition_mapping=TO_UNITS)})
def model(context: dg.AssetExecutionContext, docs: str) -> str:
    return f"{docs}/{context.partition_key}"


@dg.asset(partitions_def=dg.MultiPartitionsDefinition({"collection": COLLECTIONS, "kind": KINDS}), deps=[shared])
def table(context: dg.AssetExecutionContext) -> str:
    return context.partition_key


@dg.asset(partitions_def=COLLECTIONS, ins={"model": dg.AssetIn(partition_mapping=TO_COLLECTION)})
def report(model: dict) -> int:
    return len(model)


@pytest.fixture
def setup(tmp_path):
    defs = dg.Definitions(assets=[shared, docs, model, table, report])
    resources = {"io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path / "store"))}
    return defs, dg.DagsterInstance.ephemeral(), resources


def names(pairs):
    return sorted(f"{k.to_user_string()}[{p}]" if p else k.to_user_string() for k, p in pairs)


def test_a_collection_needs_its_partitions_its_units_and_what_they_read(setup):
    defs, instance, _ = setup
    owned = collection_partitions_of(defs, instance, "a", set(UNIT_KEYS["a"]))
    assert names(owned) == ["docs[a]", "model[a/fold-0/seed-0]", "model[a/fold-1/seed-0]", "report[a]",
                            "table[a|pieces]", "table[a|words]"]
    assert names(reproduction_plan(defs, instance, "a", set(UNIT_KEYS["a"]))) == sorted(["shared", *names(owned)])


def test_only_the_plan_is_materialized_and_a_second_run_does_nothing(setup):
    defs, instance, resources = setup
    plan = reproduction_plan(defs, instance, "a", set(UNIT_KEYS["a"]))
    first = update_all(defs, instance, resources=resources, only=plan, log=lambda _: None)
    ran = sorted(f"{k}[{p}]" if p else k for p, ks in first.runs for k in ks)
    assert first.ok and ran == names(plan)
    assert instance.get_materialized_partitions(dg.AssetKey("docs")) == {"a"}  # nothing of collection b
    assert instance.get_materialized_partitions(dg.AssetKey("model")) == set(UNIT_KEYS["a"])

    times = {t.step: t for t in asset_times(instance, plan, since=0.0)}
    assert set(times) == {"shared", "docs", "model", "table", "report"}
    assert (times["model"].partitions, times["model"].fresh, times["table"].partitions) == (2, 2, 2)
    assert all(t.seconds >= 0 and t.fresh_seconds == t.seconds for t in times.values())

    second = update_all(defs, instance, resources=resources, only=plan, log=lambda _: None)
    assert second.runs == [] and second.fresh == len(plan)
    later = asset_times(instance, plan, since=float("inf"))
    assert sum(t.fresh for t in later) == 0 and sum(t.partitions for t in later) == len(plan)
    text = format_times(later)
    assert text.splitlines()[0].split() == ["asset", "(step)", "partitions", "made", "now", "seconds", "of", "which", "now"]
    assert text.splitlines()[-1].split()[:3] == ["total", str(len(plan)), "0"]


def test_reproduce_refuses_an_unknown_collection(tmp_path, capsys):
    assert main(["--data", str(tmp_path), "reproduce", "--collection", "nope"]) == 1
    assert "--collection: 'nope' is not a configured collection" in capsys.readouterr().err


PARTS = dg.StaticPartitionsDefinition(["p1", "p2"])


@dg.asset(partitions_def=PARTS)
def interrupted(context: dg.AssetExecutionContext) -> int:
    from dagster._core.errors import DagsterExecutionInterruptedError

    if context.partition_key == "p1":
        raise DagsterExecutionInterruptedError("as SIGTERM from `timeout` does")
    return 2


def test_an_interrupted_run_stops_the_update(tmp_path):
    defs = dg.Definitions(assets=[interrupted])
    instance = dg.DagsterInstance.ephemeral()
    report = update_all(defs, instance, resources={"io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path))},
                        log=lambda _: None)
    assert report.interrupted and [p for p, _, _ in report.failures] == ["p1"]
    assert report.runs == [] and instance.get_materialized_partitions(dg.AssetKey("interrupted")) == set()
