"""`reproduce --export` / `--import`: units exported from a data directory's run tables, and a report made
from bundles with no training, stale and incomplete units left out and named."""

from __future__ import annotations

import polars as pl
import pytest

from assets.cli.bundle import expected, export_bundle, import_bundles, import_notes, wanted_units
from assets.lib.project import collection_specs
from dagster_ir.evaluation.bundle import WHOLE, UnitRecord, read_bundle, unit_name, write_unit
from dagster_ir.schemas import PER_QUERY_EVAL, QRELS, QUERY_SPLITS, RUN
from dagster_ir.storage.parquet import table_path, write_table

COLLECTION = "wiki-car"  # the built-in config: a fixed split, seed 0
QUERIES = [f"q{i}" for i in range(6)]


@pytest.fixture(scope="module")
def defs():
    from assets.definitions import defs

    return defs


def _values(run: str, seed: int | None, scores: list[float]) -> pl.DataFrame:
    from assets.defs.evaluation import ReportSettings
    from assets.defs.model_report import SECTIONS

    measures = dict.fromkeys([*ReportSettings().measures, *(m for section in SECTIONS for m in section.measures)])
    rows = [(run, q, m, s, seed) for q, s in zip(QUERIES, scores) for m in measures]
    return pl.DataFrame(rows, schema={**PER_QUERY_EVAL, "seed": pl.Int64}, orient="row")


def _record(defs, asset: str, unit: str, seed: int | None, **changes) -> UnitRecord:
    want = expected(defs, collection_specs()[COLLECTION], [asset], None)[asset]
    values = dict(
        collection=COLLECTION,
        asset=asset,
        unit=unit,
        fold=None,
        seed=seed,
        commit="abc1234",
        code_versions=want.code_versions,
        config_hash=want.config_hash,
    )
    return UnitRecord(**{**values, **changes})


def test_a_report_from_bundles_leaves_out_stale_and_incomplete_units_and_says_so(defs, tmp_path):
    assert wanted_units(collection_specs()[COLLECTION]) == ["seed-0"]
    one, two = tmp_path / "one", tmp_path / "two"
    first_stage = pl.concat([_values("bm25", None, [0.2, 0.4, 0.1, 0.3, 0.5, 0.2]), _values("ql", None, [0.1] * 6)])
    write_unit(one, _record(defs, "candidate_runs", WHOLE, None), first_stage)
    kept = [{"run_name": "knrm", "chosen_epoch": 0, "start_score": 0.41, "dev_score": 0.41}]
    write_unit(
        two,
        _record(defs, "neural_baselines", "seed-0", 0, kept=kept),
        _values("knrm", 0, [0.3, 0.5, 0.2, 0.3, 0.6, 0.4]),
    )
    old = _record(defs, "reranked_runs", "seed-0", 0, code_versions={"reranked_runs": "0"})
    write_unit(two, old, _values("bert", 0, [0.9] * 6))
    imported = import_bundles([one, two], COLLECTION, defs)
    assert [u.record.asset for u in imported.current] == ["candidate_runs", "neural_baselines"]
    assert [(u.record.asset, why.split(":")[0]) for u, why in imported.stale] == [
        ("reranked_runs", "code version changed")
    ]
    titles = [r.title for r in imported.book.sections]
    assert any(t.startswith("Neural ranking baselines") for t in titles), titles
    baselines = next(r for r in imported.book.sections if r.title.startswith("Neural ranking baselines"))
    means = dict(baselines.comparison.filter(pl.col("measure") == "nDCG@10").select("run_name", "mean").iter_rows())
    assert means["knrm"] == pytest.approx(sum([0.3, 0.5, 0.2, 0.3, 0.6, 0.4]) / 6)
    assert means["bm25"] == pytest.approx(sum([0.2, 0.4, 0.1, 0.3, 0.5, 0.2]) / 6)
    assert "bert" not in means  # stale: never mixed in
    assert "knrm: start kept in 1 of 1 unit (per unit: start), mean validation score: start 0.410" in baselines.notes
    notes = import_notes(imported)
    assert "stale, left out: reranked_runs/seed-0 (abc1234): code version changed" in notes
    assert "knrm 1 seed" in notes and "bm25 one run of the collection" in notes


def test_a_run_lacking_a_configured_unit_is_left_out(defs, tmp_path, monkeypatch):
    import assets.cli.bundle as bundle

    monkeypatch.setattr(bundle, "wanted_units", lambda spec: ["seed-0", "seed-1"])
    write_unit(tmp_path, _record(defs, "candidate_runs", WHOLE, None), _values("bm25", None, [0.2] * 6))
    write_unit(tmp_path, _record(defs, "neural_baselines", "seed-0", 0), _values("knrm", 0, [0.3] * 6))
    imported = import_bundles([tmp_path], COLLECTION, defs)
    assert imported.incomplete == {"knrm": ["seed-1"]}
    assert "incomplete, left out: knrm lacks units seed-1" in import_notes(imported)
    assert not any(r.title.startswith("Neural ranking baselines") for r in imported.book.sections)


def test_export_writes_one_unit_per_asset_and_seed_from_the_stored_tables(defs, tmp_path):
    root, out = tmp_path / "data", tmp_path / "bundle"
    qrels = pl.DataFrame([(q, f"{q}-d1", 1) for q in QUERIES], schema=QRELS, orient="row")
    splits = pl.DataFrame([(q, "test", 0) for q in QUERIES], schema=QUERY_SPLITS, orient="row")
    first = pl.DataFrame(
        [(q, f"{q}-d{r}", 10.0 - r, r, name) for name in ("bm25", "ql", "dense") for q in QUERIES for r in range(1, 6)],
        schema=RUN,
        orient="row",
    )
    reranked = (
        first.filter((pl.col("run_name") == "bm25") & (pl.col("rank") <= 3))
        .with_columns(run_name=pl.lit("knrm"), score=-pl.col("score"), rank=4 - pl.col("rank"))
        .with_columns(fold=pl.lit(None, pl.Int32), seed=pl.lit(0, pl.Int64))
    )
    write_table(qrels, table_path(root, ["qrels"], COLLECTION))
    write_table(splits, table_path(root, ["query_splits"], COLLECTION))
    write_table(first, table_path(root, ["candidate_runs"], COLLECTION))
    write_table(reranked, table_path(root, ["neural_baselines"], f"{COLLECTION}/seed-0"))
    written = export_bundle(root, COLLECTION, defs, out)
    assert sorted(p.relative_to(out).as_posix() for p in written.folders) == [
        f"{COLLECTION}/candidate_runs/all",
        f"{COLLECTION}/neural_baselines/seed-0",
    ]
    assert "ghrm_runs" in written.absent
    units = {u.record.asset: u for u in read_bundle(out, COLLECTION)}
    knrm = units["neural_baselines"]
    assert knrm.record.depths == {"knrm": 3} and knrm.record.unit == unit_name(None, 0)
    assert knrm.record.runs == ["knrm"] and knrm.record.partition == f"{COLLECTION}/seed-0"
    assert units["candidate_runs"].record.runs == ["bm25", "ql", "dense"]
    assert set(knrm.per_query["run_name"]) == {"knrm"} and set(knrm.per_query["query_id"]) == set(QUERIES)
    # knrm put BM25's third document first: d1 (relevant) at rank 3 of its top 3, so RR@10 = 1/3 for every query
    rr = knrm.per_query.filter(pl.col("measure") == "RR@10")["value"]
    assert rr.to_list() == pytest.approx([1 / 3] * len(QUERIES))
    assert set(units["candidate_runs"].per_query["run_name"]) == {"bm25", "ql", "dense"}
    again = import_bundles([out], COLLECTION, defs)
    assert not again.stale and not again.incomplete


def test_reproduce_import_prints_the_tables_and_writes_a_page_without_training(defs, tmp_path, capsys):
    from assets.cli.main import main

    bundle, data, page = tmp_path / "bundle", tmp_path / "data", tmp_path / "page.md"
    write_unit(
        bundle, _record(defs, "candidate_runs", WHOLE, None), _values("bm25", None, [0.2, 0.4, 0.1, 0.3, 0.5, 0.2])
    )
    write_unit(bundle, _record(defs, "neural_baselines", "seed-0", 0), _values("knrm", 0, [0.3] * 6))
    args = ["--data", str(data), "reproduce", "--collection", COLLECTION, "--import", str(bundle)]
    assert main([*args, "--markdown", str(page)]) == 0
    out = capsys.readouterr().out
    assert "### Neural ranking baselines" in out and "| knrm |" in out
    text = page.read_text(encoding="utf-8")
    assert text.startswith(f"# Results: {COLLECTION}, from results bundles") and "| commits | abc1234 |" in text
    assert not (data / "tables").exists()  # nothing was materialized
    assert main([*args, "--folds", "0"]) == 1
    assert "--import trains nothing" in capsys.readouterr().err


def test_export_records_the_weights_each_unit_kept_from_the_cross_encoders_manifest(tmp_path):
    from assets.cli.bundle import _kept_rows

    partition = f"{COLLECTION}/seed-0"
    manifest = pl.DataFrame(
        {"run_name": ["bert", "php"], "chosen_epoch": [0, 2], "start_score": [0.4, 0.3], "dev_score": [0.4, 0.35]}
    )
    write_table(manifest, table_path(tmp_path, ["cross_encoder"], partition))
    assert _kept_rows(tmp_path, None, "reranked_runs", partition, None, 0) == [
        {"run_name": "bert", "chosen_epoch": 0, "start_score": 0.4, "dev_score": 0.4},
        {"run_name": "php", "chosen_epoch": 2, "start_score": 0.3, "dev_score": 0.35},
    ]
    assert _kept_rows(tmp_path, None, "neural_baselines", partition, None, 0) == []  # recorded in metadata: no instance
