"""The `training` pool's limit (the instance's dagster.yaml from assets.cli.instance) holds in a parallel run."""

import sys
from pathlib import Path

import dagster as dg
import pytest

from assets.cli.instance import ensure_instance_config

sys.path.insert(0, str(Path(__file__).parent))


def _intervals(instance, run_id: str) -> list[tuple[float, float]]:
    events = [e for e in instance.all_logs(run_id) if e.dagster_event]
    starts = {e.step_key: e.timestamp for e in events if e.dagster_event.event_type_value == "STEP_START"}
    ends = {e.step_key: e.timestamp for e in events if e.dagster_event.event_type_value == "STEP_SUCCESS"}
    return sorted((starts[k], ends[k]) for k in starts)


@pytest.mark.processes
def test_two_training_steps_never_overlap_while_light_steps_do(tmp_path):
    import pool_defs

    config = ensure_instance_config(tmp_path / "home")
    assert "default_limit: 1" in config.read_text()
    ensure_instance_config(tmp_path / "home")  # idempotent: the section is not added twice
    assert config.read_text().count("concurrency:") == 1
    with dg.DagsterInstance.from_config(str(tmp_path / "home")) as instance:
        trained = dg.execute_job(dg.reconstructable(pool_defs.training_job), instance=instance)
        light = dg.execute_job(dg.reconstructable(pool_defs.light_job), instance=instance)
        assert trained.success and light.success
        (a_start, a_end), (b_start, b_end) = _intervals(instance, trained.run_id)
        assert b_start >= a_end, "two training steps ran at once"
        (c_start, c_end), (d_start, d_end) = _intervals(instance, light.run_id)
        assert d_start < c_end, "the light steps were serialised too"


def test_an_existing_instance_config_gets_the_pool_limit_appended(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    text = ensure_instance_config(home).read_text()
    assert text.startswith("telemetry:\n  enabled: false\nconcurrency:\n  pools:\n    default_limit: 1")
    (home / "dagster.yaml").write_text("concurrency:\n  pools:\n    default_limit: 3\n")
    assert ensure_instance_config(home).read_text() == "concurrency:\n  pools:\n    default_limit: 3\n"
