import os
import subprocess
import sys
from pathlib import Path

import pytest

from assets.cli.instance import CONCURRENCY, ensure_instance_config, open_instance

OPEN = """
import sys
from assets.cli.instance import open_instance
instance = open_instance(sys.argv[1])
print(len(instance.get_runs()))
"""


@pytest.mark.processes
def test_processes_opening_one_new_home_at_once_all_succeed(tmp_path):
    # without the lock, the second process's migrations fail with "table runs already exists"
    for attempt in range(3):
        home = tmp_path / f"home{attempt}"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path.cwd()), os.environ.get("PYTHONPATH", "")])}
        processes = [
            subprocess.Popen(
                [sys.executable, "-c", OPEN, str(home)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(4)
        ]
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

    from assets.cli.instance import free_slots_of_ended_runs, open_instance

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


def _run(instance, status, pid=None):
    import dagster as dg
    from dagster._core.storage.dagster_run import DagsterRun

    from assets.cli.instance import HOST_TAG, PID_TAG
    from dagster_ir.storage.atomic import host_tag

    tags = {PID_TAG: str(pid), HOST_TAG: host_tag(), "dagster_ir/assets": "php_hp"} if pid else {}
    return instance.add_run(
        DagsterRun(job_name="__ASSET_JOB", status=getattr(dg.DagsterRunStatus, status), tags=tags)
    ).run_id


def _dead_pid() -> int:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    return dead.pid


def test_a_killed_holder_and_a_killed_run_first_in_the_queue_are_both_released(tmp_path):
    """The state two killed updates leave: the first (already marked failed) holds the slot, the
    second, killed while it waited, is first in the queue and still marked started. Freeing the first
    before marking the second hands the slot to the dead second, and the next update waited for ever."""
    from assets.cli.instance import open_instance, release_dead_runs

    instance = open_instance(tmp_path / "home")
    storage = instance.event_log_storage
    storage.set_concurrency_slots("training", 1)
    holder, queued = _run(instance, "FAILURE", _dead_pid()), _run(instance, "STARTED", _dead_pid())
    assert storage.claim_concurrency_slot("training", holder, "php_hp").is_claimed
    assert not storage.claim_concurrency_slot("training", queued, "word2vec").is_claimed
    lines = []
    assert release_dead_runs(instance, lines.append) == [queued]
    assert f"run {queued}: its process is gone; marked failed" in lines
    info = storage.get_concurrency_info("training")
    assert (info.claimed_slots, info.pending_steps) == ([], [])
    assert storage.claim_concurrency_slot("training", _run(instance, "STARTED", os.getpid()), "php_hp").is_claimed


def test_waiting_for_a_slot_says_who_holds_it_and_ends_when_the_holder_dies(tmp_path):
    import threading

    from assets.cli.instance import wait_for_pool_slots

    instance = open_instance(tmp_path / "home")
    storage = instance.event_log_storage
    storage.set_concurrency_slots("training", 1)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    holder = _run(instance, "STARTED", sleeper.pid)
    assert storage.claim_concurrency_slot("training", holder, "php_hp").is_claimed
    wait_for_pool_slots(instance, {"other"}, print, poll=0.1)  # a pool with no slots yet: no wait
    lines = []
    threading.Timer(1.0, sleeper.kill).start()
    wait_for_pool_slots(instance, {"training"}, lines.append, poll=0.1)
    assert lines[0] == f"waiting for a slot of pool `training`, held by run {holder[:8]} (pid {sleeper.pid}: php_hp)"
    assert f"run {holder}: its process is gone; marked failed" in lines
    assert storage.get_concurrency_info("training").claimed_slots == []


def test_ctrl_c_while_waiting_for_a_slot_ends_the_update_as_interrupted(tmp_path, monkeypatch):
    import dagster as dg

    import assets.cli.updates as updates

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    @dg.asset(pool="training")
    def trained() -> int:
        """A pooled step."""
        return 1

    monkeypatch.setattr(updates, "wait_for_pool_slots", interrupted)
    instance = open_instance(tmp_path / "home")
    lines = []
    report = updates.update_all(dg.Definitions(assets=[trained]), instance, resources={}, log=lines.append)
    assert report.interrupted and report.failures == [(None, ["trained"], "interrupted while waiting for a pool slot")]
    assert lines[-1].startswith("interrupted: the update stops here") and not instance.get_runs()
    assert sum("interrupted" in line for line in lines) == 1, lines
    assert report.summary() == "1 asset partition: 1 failed"
