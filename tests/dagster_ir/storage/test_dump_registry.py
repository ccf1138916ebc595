"""The dump registry: whole files and multistream dumps registered as byte-range parts."""

from pathlib import Path

import pytest

from dagster_ir.storage.dumps import DumpRegistry, dump_identity


@pytest.fixture
def dump(tmp_path: Path) -> Path:
    path = tmp_path / "x-multistream.xml.bz2"
    path.write_bytes(bytes(range(256)) * 4)  # 1024 bytes; the registry does not parse the file
    return path


def test_parts_are_registered_with_their_ranges(tmp_path: Path, dump: Path) -> None:
    registry = DumpRegistry(tmp_path)
    keys = registry.add_ranges(dump, [(0, 100), (100, 600), (600, 1024)])
    assert keys == [f"x-multistream.xml.bz2@00{i}-of-003" for i in (1, 2, 3)]
    assert sorted(registry.entries()) == keys  # the whole-file key is not registered
    assert registry.byte_range(keys[1]) == (100, 600)
    assert registry.path_of(keys[2]) == dump.resolve()
    assert registry.identity(keys[0]) == f"{dump_identity(dump)}@0-100"
    assert registry.parts_of("x-multistream.xml.bz2") == keys
    assert registry.add_ranges(dump, [(0, 100), (100, 600), (600, 1024)]) == keys  # again: the same
    with pytest.raises(ValueError, match="already registered as"):
        registry.add_ranges(dump, [(0, 500), (500, 1024)])
    registry.remove(keys[0])
    assert registry.byte_range(keys[0]) is None and len(registry.entries()) == 2


def test_one_range_is_the_whole_file(tmp_path: Path, dump: Path) -> None:
    registry = DumpRegistry(tmp_path)
    assert registry.add_ranges(dump, [(0, 1024)]) == ["x-multistream.xml.bz2"]
    assert registry.byte_range("x-multistream.xml.bz2") is None
    assert registry.identity("x-multistream.xml.bz2") == dump_identity(dump)


@pytest.mark.parametrize("ranges", [[(0, 100), (200, 1024)], [(0, 100), (100, 1000)], [(10, 100), (100, 1024)]])
def test_ranges_must_cover_the_file_in_order(tmp_path: Path, dump: Path, ranges) -> None:
    with pytest.raises(ValueError, match="must cover the file in order"):
        DumpRegistry(tmp_path).add_ranges(dump, ranges)
