import pytest

from dagster_ir.storage.atomic import atomic_path, write_text_atomic


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
