import os
import stat
import subprocess
import sys
import time

import pytest

from dagster_ir.storage.atomic import atomic_path, clean_orphans, host_tag, write_text_atomic


def test_atomic_file_replaces_target_only_on_success(tmp_path):
    target = tmp_path / "t.txt"
    write_text_atomic(target, "old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed mid-write")
    assert target.read_text() == "old"
    assert list(tmp_path.iterdir()) == [target]  # no temp file left behind
    write_text_atomic(target, "new")
    assert target.read_text() == "new"


def test_atomic_directory_swaps_whole_folder(tmp_path):
    target = tmp_path / "index"
    with atomic_path(target, directory=True) as tmp:
        (tmp / "a").write_text("1")
    with pytest.raises(ValueError):
        with atomic_path(target, directory=True) as tmp:
            (tmp / "b").write_text("2")
            raise ValueError
    assert sorted(p.name for p in target.iterdir()) == ["a"]
    with atomic_path(target, directory=True) as tmp:
        (tmp / "b").write_text("2")
    assert sorted(p.name for p in target.iterdir()) == ["b"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"]


def test_temp_names_carry_the_writer_and_are_unique(tmp_path):
    target = tmp_path / "t.txt"
    with atomic_path(target) as first, atomic_path(target) as second:
        assert first != second
        for tmp in (first, second):
            assert tmp.parent == tmp_path and tmp.name.startswith(".t.txt.") and tmp.name.endswith(".tmp")
            assert f"-{os.getpid()}-" in tmp.name  # host tag, pid, random part
        first.write_text("a")
        second.write_text("b")
    assert target.read_text() in ("a", "b")


def test_written_files_and_folders_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        file = write_text_atomic(tmp_path / "f.txt", "x")
        with atomic_path(tmp_path / "d", directory=True) as tmp:
            (tmp / "inner").write_text("y")
    finally:
        os.umask(old)
    assert stat.S_IMODE(file.stat().st_mode) == 0o644  # not mkstemp's 0600
    assert stat.S_IMODE((tmp_path / "d").stat().st_mode) == 0o755  # not mkdtemp's 0700


def test_a_replaced_folder_is_never_missing(tmp_path):
    """A reader in another process polling the target while it is replaced always finds it."""
    target = tmp_path / "index"
    with atomic_path(target, directory=True) as tmp:
        (tmp / "a").write_text("0")
    reader = subprocess.Popen(
        [sys.executable, "-c", _POLL, str(target / "a"), str(tmp_path / "stop")], stdout=subprocess.PIPE, text=True
    )
    time.sleep(0.5)  # let the reader start polling
    for i in range(500):
        with atomic_path(target, directory=True) as tmp:
            (tmp / "a").write_text(str(i))
    (tmp_path / "stop").touch()
    polls, misses = map(int, reader.communicate(timeout=60)[0].split())
    assert polls > 0 and misses == 0
    assert (target / "a").read_text() == "499"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index", "stop"]  # no .old-* left behind


_POLL = """
import os, sys
path, stop = sys.argv[1], sys.argv[2]
polls = misses = 0
while not os.path.exists(stop):
    polls += 1
    misses += not os.path.exists(path)
print(polls, misses)
"""


def test_clean_orphans_removes_only_dead_writers_leftovers(tmp_path):
    dead = _dead_pid()
    host = host_tag()
    (tmp_path / "tables" / "t").mkdir(parents=True)
    orphan_file = tmp_path / "tables" / "t" / f".data.parquet.{host}-{dead}-abcd1234.tmp"
    orphan_file.write_text("half")
    orphan_dir = tmp_path / "tables" / f".index.{host}-{dead}-abcd1234.tmp"
    (orphan_dir / "deep").mkdir(parents=True)
    old_dir = tmp_path / f".index.old-{host}-{dead}-abcd1234"
    old_dir.mkdir()
    live = tmp_path / f".data.parquet.{host}-{os.getpid()}-abcd1234.tmp"  # a writer still running
    live.write_text("busy")
    other_host = tmp_path / f".data.parquet.ffffffff-{dead}-abcd1234.tmp"  # maybe alive elsewhere
    other_host.write_text("?")
    keep = tmp_path / ".hidden.tmp"  # not one of ours
    keep.write_text("user file")
    removed = clean_orphans(tmp_path)
    assert sorted(removed) == sorted([orphan_file, orphan_dir, old_dir])
    assert not orphan_file.exists() and not orphan_dir.exists() and not old_dir.exists()
    assert live.exists() and other_host.exists() and keep.exists()


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_file_and_folder_are_fsynced_before_and_after_the_rename(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    target = write_text_atomic(tmp_path / "f.txt", "x")
    assert synced[0].endswith(".tmp") and synced[0].startswith(str(tmp_path / ".f.txt."))  # the data
    assert synced[-1] == str(tmp_path)  # the rename itself
    synced.clear()
    with atomic_path(tmp_path / "d", directory=True) as tmp:
        (tmp / "inner").write_text("y")
    assert str(tmp / "inner") in synced and str(tmp) in synced and synced[-1] == str(tmp_path)
    assert target.read_text() == "x"


def test_a_killed_child_not_yet_waited_for_is_not_alive():
    import signal

    from dagster_ir.storage.atomic import pid_alive

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert pid_alive(child.pid)
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while pid_alive(child.pid) and time.monotonic() < deadline:  # a zombie until waited for
            time.sleep(0.05)
        assert not pid_alive(child.pid)
    finally:
        child.kill()
        child.wait()
    assert pid_alive(os.getpid())


@pytest.mark.parametrize(("mask", "file_mode"), [(0o022, 0o644), (0o027, 0o640)])
def test_files_a_library_creates_0600_get_the_umask_mode_too(tmp_path, mask, file_mode):
    import torch
    from safetensors.torch import save_file

    old = os.umask(mask)
    try:
        with atomic_path(tmp_path / "d", directory=True) as tmp:
            save_file({"w": torch.zeros(2)}, str(tmp / "model.safetensors"))  # created 0600
            (tmp / "sub").mkdir()
            save_file({"w": torch.zeros(2)}, str(tmp / "sub" / "more.safetensors"))
        with atomic_path(tmp_path / "one.safetensors") as tmp:
            save_file({"w": torch.zeros(2)}, str(tmp))
    finally:
        os.umask(old)
    for path in (tmp_path / "d" / "model.safetensors", tmp_path / "d" / "sub" / "more.safetensors",
                 tmp_path / "one.safetensors"):  # fmt: skip
        assert stat.S_IMODE(path.stat().st_mode) == file_mode, path
