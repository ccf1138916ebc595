"""Fault injection: `update` killed (SIGKILL) at chosen moments, then run again.

Each case runs `update` (tests/reliability/update_driver.py: the command's own start-up, then
`update_all`) over the small pipeline of fault_defs.py, kills it when a step has left a given
marker, and checks that the next `update` finishes, that the tables equal an uninterrupted run's,
and that no slot or queue entry of the `training` pool is left behind.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from dagster_ir.storage.parquet import table_path

pytestmark = pytest.mark.slow
HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

import fault_defs  # noqa: E402

DEADLINE = 150  # s: a step of fault_defs takes about a second; an update that takes this long hangs


def _env(root: Path) -> dict:
    return {
        **os.environ,
        "DAGSTER_IR_DATA": str(root),
        "DAGSTER_HOME": str(root / "home"),
        "FAULT_STEP_SECONDS": str(fault_defs.STEP_SECONDS),
        "PYTHONPATH": os.pathsep.join([str(Path.cwd()), os.environ.get("PYTHONPATH", "")]),
    }


def _start(root: Path, *assets: str) -> subprocess.Popen:
    log = open(root.parent / f"{root.name}-{time.monotonic_ns()}.log", "w")  # noqa: SIM115 (the process keeps it)
    return subprocess.Popen(
        [sys.executable, str(HERE / "update_driver.py"), str(root), *assets],
        env=_env(root),
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _kill(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def _wait_for(process: subprocess.Popen, what: str, ready, root: Path) -> None:
    """Wait until `ready()`; fail (and kill the process) if it ends first or takes past the deadline."""
    deadline = time.monotonic() + DEADLINE
    while not ready():
        if process.poll() is not None:
            pytest.fail(f"update ended ({process.returncode}) before {what}:\n{_logs(root)}")
        if time.monotonic() > deadline:
            _kill(process)
            pytest.fail(f"update hung: no {what} after {DEADLINE} s:\n{_logs(root)}")
        time.sleep(0.05)


def _marker(root: Path, name: str):
    return lambda: (root / "progress" / name).exists()


def _hold(root: Path, asset: str, held: bool = True) -> None:
    """Make `asset`'s step wait after its second step (fault_defs) until released."""
    path = root / "hold" / asset
    if held:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    else:
        path.unlink(missing_ok=True)


def _finish(process: subprocess.Popen, root: Path) -> dict:
    """Wait for `update` to end by itself (a hang fails the test); its JSON summary."""
    try:
        process.wait(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        _kill(process)
        pytest.fail(f"update hung (still running after {DEADLINE} s):\n{_logs(root)}")
    logs = _logs(root)
    assert process.returncode == 0, logs
    summary = json.loads(logs.strip().splitlines()[-1])
    assert sum(summary["counts"].values()) == summary["planned"], summary  # every partition counted once
    return summary


def _logs(root: Path) -> str:
    files = sorted(root.parent.glob(f"{root.name}-*.log"))
    return "\n".join(f"--- {f.name}\n{f.read_text()[-3000:]}" for f in files)


def _tables(root: Path) -> dict[str, pl.DataFrame]:
    return {name: pl.read_parquet(table_path(root, [name], None)) for name in fault_defs.ASSETS}


def _pool(root: Path) -> tuple[list, list]:
    """The `training` pool's claimed slots and queue entries, as (run id, step) pairs."""
    with dg.DagsterInstance.from_config(str(root / "home")) as instance:
        info = instance.event_log_storage.get_concurrency_info("training")
        return (
            [(s.run_id, s.step_key) for s in info.claimed_slots],
            [(s.run_id, s.step_key) for s in info.pending_steps],
        )


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, pl.DataFrame]:
    """The tables of an uninterrupted update."""
    root = tmp_path_factory.mktemp("reference") / "data"
    summary = _finish(_start(root), root)
    assert summary["ran"] == ["docs", "php_hp", "word2vec", "report"] and not summary["failed"]
    return _tables(root)


def _check_recovered(root: Path, reference: dict) -> None:
    summary = _finish(_start(root), root)  # one more update: nothing left to do
    assert summary["ran"] == [] and summary["fresh"] == len(fault_defs.ASSETS), _logs(root)
    tables = _tables(root)
    for name, table in reference.items():
        assert tables[name].equals(table), name
    assert _pool(root) == ([], []), "a pool slot or queue entry is left behind"


def test_killed_in_a_data_step_in_a_training_step_and_after_it_the_next_update_goes_on(tmp_path, reference):
    root = tmp_path / "data"
    for asset in ("docs", "php_hp", "report"):
        _hold(root, asset)
    first = _start(root)
    _wait_for(first, "progress in the data step", _marker(root, "docs-1"), root)
    _kill(first)
    _hold(root, "docs", False)
    second = _start(root)
    _wait_for(second, "progress in the training step", _marker(root, "php_hp-1"), root)
    _kill(second)  # the training step holds the pool's slot: the dead run keeps it
    assert [step for _, step in _pool(root)[0]] == ["php_hp"]
    _hold(root, "php_hp", False)
    third = _start(root)
    _wait_for(third, "progress after the training steps", _marker(root, "report-1"), root)
    _kill(third)
    _hold(root, "report", False)
    _finish(_start(root), root)
    _check_recovered(root, reference)


def test_an_update_queued_for_the_slot_goes_on_when_the_holder_is_killed(tmp_path, reference):
    root = tmp_path / "data"
    _hold(root, "php_hp")
    holder = _start(root, "docs", "php_hp")
    _wait_for(holder, "progress in the training step", _marker(root, "php_hp-1"), root)
    waiting = _start(root, "word2vec")  # another training step: it waits for the slot php_hp holds
    _wait_for(
        waiting,
        "the second update waiting for the slot",
        lambda: "waiting for a slot of pool `training`" in _logs(root),
        root,
    )
    time.sleep(2.0)
    assert not (root / "progress" / "word2vec-0").exists(), "two training steps at once"
    _kill(holder)
    _hold(root, "php_hp", False)
    assert _finish(waiting, root)["ran"] == ["word2vec"]
    assert "waiting for a slot of pool `training`, held by run" in _logs(
        root
    ) and f"(pid {holder.pid}: php_hp)" in _logs(root)
    _finish(_start(root), root)
    _check_recovered(root, reference)


def test_killed_while_queued_for_the_slot_behind_a_killed_holder(tmp_path, reference):
    root = tmp_path / "data"
    _hold(root, "php_hp")
    holder = _start(root, "docs", "php_hp")
    _wait_for(holder, "progress in the training step", _marker(root, "php_hp-1"), root)
    waiting = _start(root, "word2vec")
    _wait_for(
        waiting,
        "the second update waiting for the slot",
        lambda: "waiting for a slot of pool `training`" in _logs(root),
        root,
    )
    time.sleep(2.0)
    _kill(waiting)  # waiting for the slot, dead
    _kill(holder)  # holds the slot, dead
    _hold(root, "php_hp", False)
    _finish(_start(root), root)
    _check_recovered(root, reference)


def test_ctrl_c_in_a_training_step_is_one_line_exit_130_and_the_next_update_goes_on(tmp_path, reference):
    root = tmp_path / "data"
    _hold(root, "php_hp")
    first = _start(root)
    _wait_for(first, "progress in the training step", _marker(root, "php_hp-1"), root)
    os.killpg(first.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole foreground group
    first.wait(timeout=DEADLINE)
    logs = _logs(root)
    assert first.returncode == 130, logs
    assert "Traceback" not in logs and "KeyboardInterrupt" not in logs, logs
    lines = logs.strip().splitlines()[:-1]  # the last is the driver's JSON summary
    assert sum("interrupted" in line for line in lines) == 1, logs
    summary = json.loads(logs.strip().splitlines()[-1])
    counts = summary["counts"]
    assert sum(counts.values()) == summary["planned"] == len(fault_defs.ASSETS), summary
    # docs ran; php_hp and word2vec (one run: the same partition key) were interrupted; report never started
    assert (counts["materialized"], counts["failed"], counts["not_started"]) == (1, 2, 1), summary
    with dg.DagsterInstance.from_config(str(root / "home")) as instance:
        statuses = [record.dagster_run.status for record in instance.get_run_records()]
    assert dg.DagsterRunStatus.FAILURE in statuses and dg.DagsterRunStatus.STARTED not in statuses
    assert _pool(root) == ([], []), "the interrupted step's pool slot is still claimed"
    _hold(root, "php_hp", False)
    second = _finish(_start(root), root)
    assert second["counts"]["fresh"] == 1 and "docs" not in second["ran"], second
    _check_recovered(root, reference)
