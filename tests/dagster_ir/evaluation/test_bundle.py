"""A results bundle: units written and read back byte for byte, tampering caught, stale and missing units named."""

from __future__ import annotations

import gzip
import json

import polars as pl
import pytest

from dagster_ir.evaluation.bundle import (
    MANIFEST_FILE,
    PER_QUERY_FILE,
    RUNS_FILE,
    BundleError,
    Expected,
    UnitRecord,
    config_hash,
    merged_per_query,
    missing_units,
    read_bundle,
    read_unit,
    sort_units,
    unit_name,
    write_unit,
)
from dagster_ir.schemas import RUN

VERSIONS = {"ghrm_runs": "6", "candidate_runs": "3"}


def _record(unit: str = "fold-0-seed-0", fold: int | None = 0, seed: int | None = 0, **changes) -> UnitRecord:
    values = dict(
        collection="cran",
        asset="ghrm_runs",
        unit=unit,
        fold=fold,
        seed=seed,
        commit="abc1234",
        code_versions=VERSIONS,
        config_hash="h1",
        depths={"ghrm": 20},
    )
    return UnitRecord(**{**values, **changes})


def _values(queries: list[str], seed: int | None = 0, run: str = "ghrm") -> pl.DataFrame:
    return pl.DataFrame(
        [
            (run, q, m, 0.25 * i + (0.5 if m == "P@20" else 0.0), seed)
            for i, q in enumerate(queries)
            for m in ("nDCG@20", "P@20")
        ],
        schema={
            "run_name": pl.String,
            "query_id": pl.String,
            "measure": pl.String,
            "value": pl.Float64,
            "seed": pl.Int64,
        },
        orient="row",
    )


def _run(queries: list[str]) -> pl.DataFrame:
    rows = [(q, f"{q}-d{r}", 1.0 / r, r, "ghrm") for q in queries for r in (1, 2)]
    return pl.DataFrame(rows, schema=RUN, orient="row")


def test_a_unit_reads_back_as_written_and_exports_the_same_bytes_twice(tmp_path):
    values, run = _values(["q1", "q2"]), _run(["q1", "q2"])
    folder = write_unit(tmp_path, _record(), values, run)
    assert folder == tmp_path / "cran" / "ghrm_runs" / "fold-0-seed-0"
    assert [u.folder for u in read_bundle(tmp_path / "cran", "cran")] == [folder]  # the collection's folder too
    first = {p.name: p.read_bytes() for p in folder.iterdir()}
    write_unit(tmp_path, _record(), values.reverse(), run.reverse())  # row order does not matter
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == first
    unit = read_unit(folder)
    assert unit.record.depths == {"ghrm": 20} and unit.record.code_versions == VERSIONS
    assert unit.per_query.sort("query_id", "measure").equals(values.sort("query_id", "measure"))
    lines = gzip.decompress((folder / RUNS_FILE).read_bytes()).decode().splitlines()
    assert lines[:2] == ["q1 Q0 q1-d1 1 1.0 ghrm", "q1 Q0 q1-d2 2 0.5 ghrm"]
    assert sorted(json.loads((folder / MANIFEST_FILE).read_text())["files"]) == [PER_QUERY_FILE, RUNS_FILE]


def test_a_changed_file_is_caught_and_named(tmp_path):
    folder = write_unit(tmp_path, _record(), _values(["q1", "q2"]), _run(["q1"]))
    text = gzip.decompress((folder / PER_QUERY_FILE).read_bytes()).decode().replace("0.25", "0.95")
    (folder / PER_QUERY_FILE).write_bytes(gzip.compress(text.encode()))
    with pytest.raises(BundleError, match=rf"{PER_QUERY_FILE}: its sha256 differs"):
        read_bundle(tmp_path, "cran")
    (folder / PER_QUERY_FILE).unlink()
    with pytest.raises(BundleError, match=rf"{PER_QUERY_FILE}: missing"):
        read_unit(folder)
    (folder / MANIFEST_FILE).write_text("{", encoding="utf-8")
    with pytest.raises(BundleError, match=rf"{MANIFEST_FILE}: not JSON"):
        read_unit(folder)
    with pytest.raises(BundleError, match="no such folder"):
        read_bundle(tmp_path, "robust04")


def test_a_unit_moved_to_another_folder_is_refused(tmp_path):
    folder = write_unit(tmp_path, _record(), _values(["q1"]))
    folder.rename(folder.with_name("fold-1-seed-0"))
    with pytest.raises(
        BundleError, match="names cran/ghrm_runs/fold-0-seed-0, but lies in cran/ghrm_runs/fold-1-seed-0"
    ):
        read_bundle(tmp_path, "cran")


def test_units_of_other_code_or_settings_are_stale_with_the_reason():
    current = Expected(VERSIONS, "h1")
    units = [
        read_like(_record()),
        read_like(_record(unit="fold-1-seed-0", fold=1, code_versions={**VERSIONS, "candidate_runs": "2"})),
        read_like(_record(unit="fold-2-seed-0", fold=2, config_hash="h0")),
        read_like(_record(unit="fold-3-seed-0", fold=3, asset="php_runs")),
        read_like(_record()),  # the same unit from a second bundle
    ]
    kept, stale = sort_units(units, {"ghrm_runs": current})
    assert [u.record.unit for u in kept] == ["fold-0-seed-0"]
    reasons = {u.record.unit: why for u, why in stale}
    assert reasons == {
        "fold-1-seed-0": "code version changed: candidate_runs 2 -> 3",
        "fold-2-seed-0": "settings changed (config hash h0 -> h1)",
        "fold-3-seed-0": "php_runs is not an asset the report reads",
    }


def read_like(record: UnitRecord, queries: tuple[str, ...] = ("q1",), run: str = "ghrm"):
    from dagster_ir.evaluation.bundle import BundleUnit

    return BundleUnit(record, _values(list(queries), record.seed, run), None)


def test_a_run_missing_a_unit_is_named_and_its_values_are_left_out():
    units = [read_like(_record(unit=unit_name(f, 0), fold=f), (f"q{f}",)) for f in range(3)] + [
        read_like(_record(unit=unit_name(0, 1), fold=0, seed=1), ("q0",))
    ]
    wanted = {"ghrm_runs": [unit_name(f, s) for f in range(3) for s in (0, 1)]}
    assert missing_units(units, wanted) == {"ghrm": ["fold-1-seed-1", "fold-2-seed-1"]}
    assert missing_units(units[:3], {"ghrm_runs": [unit_name(f, 0) for f in range(3)]}) == {}
    merged = merged_per_query(units, leave_out=["ghrm"])
    assert merged.height == 0
    assert merged_per_query(units).height == 8  # 4 units x 1 query x 2 measures


def test_two_units_scoring_the_same_query_are_refused():
    twice = [read_like(_record()), read_like(_record(unit="fold-1-seed-0", fold=1))]  # both score q1 at seed 0
    with pytest.raises(BundleError, match=r"same run, seed and query: \['ghrm'\]"):
        merged_per_query(twice)


def test_unit_names_and_the_settings_hash():
    assert [unit_name(0, 1), unit_name(None, 2), unit_name(None, None)] == ["fold-0-seed-1", "seed-2", "all"]
    assert (
        config_hash({"a": 1, "b": [1, 2]}) == config_hash({"b": [1, 2], "a": 1}) != config_hash({"a": 2, "b": [1, 2]})
    )
    assert len(config_hash({})) == 16
