import os
import subprocess
import sys
from pathlib import Path

from assets.instance import CONCURRENCY, ensure_instance_config

OPEN = """
import sys
from assets.instance import open_instance
instance = open_instance(sys.argv[1])
print(len(instance.get_runs()))
"""


def test_processes_opening_one_new_home_at_once_all_succeed(tmp_path):
    # without the lock, the second process's migrations fail with "table runs already exists"
    for attempt in range(3):
        home = tmp_path / f"home{attempt}"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path.cwd()), os.environ.get("PYTHONPATH", "")])}
        processes = [subprocess.Popen([sys.executable, "-c", OPEN, str(home)], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True) for _ in range(4)]
        outputs = [p.communicate(timeout=300) for p in processes]
        for process, (out, err) in zip(processes, outputs, strict=True):
            assert process.returncode == 0, err[-3000:]
            assert out.split() == ["0"]
        assert (home / "history" / "runs.db").exists() and CONCURRENCY in (home / "dagster.yaml").read_text()


def test_instance_config_keeps_what_the_user_wrote(tmp_path):
    (tmp_path / "dagster.yaml").write_text("telemetry:\n  enabled: true\n")
    text = ensure_instance_config(tmp_path).read_text()
    assert text.startswith("telemetry:\n  enabled: true\n") and text.endswith(CONCURRENCY)
    assert ensure_instance_config(tmp_path).read_text() == text  # a second call adds nothing


def test_opening_the_instance_frees_the_slots_of_runs_that_ended(tmp_path):
    import dagster as dg
    from dagster._core.storage.dagster_run import DagsterRun

    from assets.instance import free_slots_of_ended_runs, open_instance

    instance = open_instance(tmp_path / "home")
    storage = instance.event_log_storage
    storage.set_concurrency_slots("training", 1)
    for run_id, status in (("dead", dg.DagsterRunStatus.FAILURE), ("alive", dg.DagsterRunStatus.STARTED)):
        instance.add_run(DagsterRun(job_name="__ASSET_JOB", run_id=run_id, status=status))
    assert storage.claim_concurrency_slot("training", "dead", "cet").is_claimed
    assert not storage.claim_concurrency_slot("training", "alive", "cet").is_claimed  # waits behind the dead run
    assert free_slots_of_ended_runs(instance) == ["dead"]
    assert storage.claim_concurrency_slot("training", "alive", "cet").is_claimed
    assert free_slots_of_ended_runs(instance) == []  # a started run keeps its slot
    instance.add_run(DagsterRun(job_name="__ASSET_JOB", run_id="ended", status=dg.DagsterRunStatus.SUCCESS))
    storage.claim_concurrency_slot("training", "ended", "bert")  # pending behind "alive"
    reopened = open_instance(tmp_path / "home")
    assert "ended" not in {s.run_id for s in reopened.event_log_storage.get_concurrency_info("training").pending_steps}
    assert [s.run_id for s in reopened.event_log_storage.get_concurrency_info("training").claimed_slots] == ["alive"]
