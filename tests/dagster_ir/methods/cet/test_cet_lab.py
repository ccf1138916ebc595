"""The lab's rankers and their negatives: which run each method samples from, RANCE's dev curve."""

from __future__ import annotations

import polars as pl
import pytest

from dagster_ir.methods.cet.model import LabConfig
from dagster_ir.methods.cet.lab import MANIFEST_SCHEMA, LabData, lab_negatives, lab_rankers, manifest
from dagster_ir.schemas import NEGATIVES, QRELS, RUN


def run_of(name: str, ranking: dict[str, list[str]]) -> pl.DataFrame:
    rows = [(q, d, -float(r), r, name) for q, docs in ranking.items() for r, d in enumerate(docs, start=1)]
    return pl.DataFrame(rows, schema=RUN, orient="row")


RUNS = pl.concat([
    run_of("dense", {"t": ["a1", "a2", "a3", "a4"], "v": ["v1", "v2", "v3", "v4"]}),
    run_of("bm25", {"t": ["b1", "b2", "b3", "a1"], "v": ["v4", "v3", "v2", "v1"]}),
])  # fmt: skip
SPARSE = pl.DataFrame([("t", "a1", 1), ("v", "v4", 1)], schema=QRELS, orient="row")
DENSE = pl.DataFrame([("t", "a1", 1), ("t", "a2", 1), ("v", "v1", 1), ("v", "v4", 1)], schema=QRELS, orient="row")


def data(dev: tuple[str, ...] = ("v",)) -> LabData:
    return LabData(RUNS, pl.DataFrame({"query_id": ["t"], "text": ["x"]}), pl.DataFrame(), SPARSE, DENSE, ("t",), dev)


def test_rankers_run_naive_first_and_tau_variants_last() -> None:
    config = LabConfig(taus=(1.0, 0.5, 2.0))
    specs = lab_rankers(config)
    assert [s.run_name for s in specs] == ["naive", "zhan", "rocketqa", "rance", "cet", "cet-tau0.5", "cet-tau2"]
    assert [s.config.tau for s in specs[-3:]] == [1.0, 0.5, 2.0]  # tau 1 is the main cet run
    assert {s.method for s in specs[-2:]} == {"cet"}
    reordered = lab_rankers(LabConfig(methods=("cet", "rocketqa", "naive")))
    assert [s.run_name for s in reordered] == ["naive", "rocketqa", "cet"]  # rocketqa's first ranker first


def test_each_method_samples_from_its_run() -> None:
    config = LabConfig(negative_depth=3, n_per_positive=2)
    naive, _ = lab_negatives("naive", data(), config)
    zhan, _ = lab_negatives("zhan", data(), config)
    assert naive.schema == pl.Schema(NEGATIVES)
    assert set(naive["neg_doc_id"]) == {"a2", "a3"}  # dense's top 3 minus the label a1
    assert set(zhan["neg_doc_id"]) <= {"b1", "b2", "b3"} and zhan.height == 2  # bm25's top 3 (a1 is 4th)
    assert lab_negatives("cet", data(), config)[0].equals(naive)


def test_rance_estimates_its_curve_on_the_dev_queries_only() -> None:
    config = LabConfig(negative_depth=4, rance_smoothing=1)
    negatives, notes = lab_negatives("rance", data(), config)
    assert notes == {"dev_p_relevant_at_1": 1.0}  # v's first document is relevant
    assert set(negatives["neg_doc_id"]) <= {"a2", "a3", "a4"}
    with pytest.raises(ValueError, match="dev queries"):
        lab_negatives("rance", data(dev=()), config)
    with pytest.raises(ValueError, match="first ranker"):
        lab_negatives("rocketqa", data(), config)
    with pytest.raises(ValueError, match="no candidate run named 'ance'"):
        lab_negatives("naive", data(), LabConfig(strong_run="ance"))


def test_an_empty_manifest_has_the_schema() -> None:
    assert manifest([]).schema == pl.Schema(MANIFEST_SCHEMA)
