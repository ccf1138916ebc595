import subprocess
import sys
import time

from dagster_ir.storage.locks import file_lock, folder_lock, is_locked, remove_lock, remove_unlocked_siblings


def test_file_lock_times_out_while_another_process_holds_it(tmp_path):
    lock = tmp_path / "x.lock"
    holder = _hold(tmp_path / "x.lock")
    try:
        started = time.monotonic()
        with file_lock(lock, 0.3) as acquired:
            assert acquired is False
        assert time.monotonic() - started >= 0.3
        assert is_locked(lock)
    finally:
        _release(holder)
    with file_lock(lock, 0.3) as acquired:
        assert acquired is True
    assert not is_locked(lock)


def test_pruning_old_settings_spares_a_folder_in_use(tmp_path):
    root = tmp_path / "training"
    current, in_use, stale = root / "fp-new", root / "fp-busy", root / "fp-old"
    for folder in (current, in_use, stale):
        (folder / "step-00000001").mkdir(parents=True)
    holder = _hold(in_use / ".lock")  # another run is training into fp-busy right now
    try:
        assert remove_unlocked_siblings(current) == [stale]
        assert current.exists() and in_use.exists() and not stale.exists()
    finally:
        _release(holder)
    assert remove_unlocked_siblings(current) == [in_use]


def test_folder_lock_is_held_for_the_duration(tmp_path):
    folder = tmp_path / "run"
    with folder_lock(folder):
        assert is_locked(folder / ".lock")
    assert not is_locked(folder / ".lock")


def test_a_lock_file_is_removed_only_when_no_process_holds_it(tmp_path):
    lock = tmp_path / "locks" / "wiki_articles@old.xml.bz2.lock"
    holder = _hold(lock)
    try:
        assert remove_lock(lock) is False and lock.exists()
    finally:
        _release(holder)
    assert remove_lock(lock) is True and not lock.exists()
    assert remove_lock(lock) is False  # already gone


_HOLD = """
import sys, time
from dagster_ir.storage.locks import file_lock
with file_lock(sys.argv[1], None):
    print("holding", flush=True)
    sys.stdin.read()
"""


def _hold(path):
    process = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout.readline().strip() == "holding"
    return process


def _release(process):
    process.stdin.close()
    process.wait(timeout=30)
