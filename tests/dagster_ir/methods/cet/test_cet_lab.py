"""The lab's rankers and their negatives: which run each method samples from, RANCE's dev curve."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl
import pytest

from dagster_ir.methods.cet.lab import (
    MANIFEST_SCHEMA,
    LabData,
    MemoScorer,
    eta_grid,
    lab_negatives,
    lab_rankers,
    manifest,
)
from dagster_ir.methods.cet.model import LabConfig
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


def test_rankers_run_naive_first_with_the_eta_and_tau_sweeps() -> None:
    config = LabConfig(taus=(1.0, 0.5, 2.0), eta_quantiles=(0.5, 0.9))
    specs = lab_rankers(config)
    assert [s.run_name for s in specs] == [
        "naive",
        "zhan",
        "rocketqa-q0.5",
        "rocketqa-q0.9",
        "rance",
        "dml",
        "cet",
        "cet-tau0.5",
        "cet-tau2",
    ]
    assert [s.config.tau for s in specs[-3:]] == [1.0, 0.5, 2.0]  # tau 1 is the main cet run
    assert {s.method for s in specs[-2:]} == {"cet"} and [s.table for s in specs[-3:]] == [True, False, False]
    assert [(s.sweep, s.sweep_value) for s in specs[2:4]] == [("eta", 0.5), ("eta", 0.9)]
    assert not any(s.table for s in specs[2:4])  # the chosen one becomes the rocketqa row after training
    fixed = lab_rankers(LabConfig(methods=("cet", "rocketqa", "naive"), eta=0.3))
    assert [s.run_name for s in fixed] == ["naive", "rocketqa", "cet"]  # rocketqa's first ranker first
    assert fixed[-1].sweep == ""  # no tau grid: cet is no sweep point


def test_negatives_are_drawn_afresh_each_epoch_for_every_method() -> None:
    runs = pl.concat(
        [
            run_of("dense", {"t": [f"a{i}" for i in range(1, 30)], "v": ["v1", "v2"]}),
            run_of("bm25", {"t": [f"b{i}" for i in range(1, 30)] + ["a1"], "v": ["v4"]}),
        ]
    )
    lab = LabData(runs, pl.DataFrame({"query_id": ["t"], "text": ["x"]}), pl.DataFrame(), SPARSE, DENSE, ("t",), ("v",))
    config = LabConfig(negative_depth=30, n_per_positive=3, rance_smoothing=1)
    scorer = lambda pairs: np.zeros(pairs.height)  # noqa: E731 - nothing rejected at eta 0
    for method in ("naive", "zhan", "dml", "cet", "rance", "rocketqa"):
        draws = [set(lab_negatives(method, lab, config, scorer, epoch, eta=0.0)[0]["neg_doc_id"]) for epoch in range(3)]
        assert draws[0] != draws[1] != draws[2], method
        assert draws[1] == set(lab_negatives(method, lab, config, scorer, 1, eta=0.0)[0]["neg_doc_id"])
    fixed = replace(config, resample=False)
    assert lab_negatives("naive", lab, fixed, epoch=0)[0].equals(lab_negatives("naive", lab, fixed, epoch=5)[0])
    assert lab_negatives("dml", lab, config, epoch=2)[0].equals(lab_negatives("naive", lab, config, epoch=2)[0])


def test_the_eta_grid_is_placed_on_the_first_rankers_raw_scores() -> None:
    negatives = pl.DataFrame([("t", "a1", f"n{i}", i, 0) for i in range(5)], schema=NEGATIVES, orient="row")
    scores = {f"n{i}": float(i) for i in range(5)}  # 0..4
    calls = []

    def score(pairs: pl.DataFrame) -> np.ndarray:
        calls.append(pairs.height)
        return np.array([scores[d] for d in pairs["doc_id"]])

    memo = MemoScorer(score)
    assert eta_grid(negatives, memo, (0.5, 1.0)) == {0.5: 2.0, 1.0: 4.0}
    eta_grid(negatives, memo, (0.25,))
    assert calls == [5]  # scored once, remembered


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
    with pytest.raises(ValueError, match="threshold eta"):
        lab_negatives("rocketqa", data(), config, lambda pairs: np.zeros(pairs.height))
    with pytest.raises(ValueError, match="no candidate run named 'ance'"):
        lab_negatives("naive", data(), LabConfig(strong_run="ance"))


def test_an_empty_manifest_has_the_schema() -> None:
    assert manifest([]).schema == pl.Schema(MANIFEST_SCHEMA)


def test_negatives_come_from_the_depth_reranked_and_the_training_queries_only() -> None:
    # v has a sparse label (v4) and candidates too, but it is a dev query: no negatives for it
    config = LabConfig(rerank_depth=2, n_per_positive=3)  # negative_depth None: the depth reranked
    assert config.pair_depth == 2
    naive, _ = lab_negatives("naive", data(), config)
    assert set(naive["query_id"]) == {"t"} and set(naive["neg_doc_id"]) == {"a2"}  # dense's top 2 minus the label
    wider, _ = lab_negatives("naive", data(), replace(config, negative_depth=4))
    assert set(wider["neg_doc_id"]) == {"a2", "a3", "a4"}  # three per label from the top 4 minus a1
    assert set(wider["query_id"]) == {"t"}
    with pytest.raises(ValueError, match="negative_depth must be >= 1 or None"):
        LabConfig(negative_depth=0)


def _tiny_lab(tmp_path, epochs: int = 4) -> tuple[LabData, LabConfig]:
    """Two training and two dev queries over eight documents, rankers on a tiny backbone (naive only)."""
    from dagster_ir.methods.cet.model import CetConfig, RankerConfig
    from dagster_ir.neural.backbone import make_tiny_backbone
    from dagster_ir.neural.training import TrainConfig

    tiny = str(make_tiny_backbone(tmp_path / "tiny", hidden_size=16))
    docs = [f"d{i}" for i in range(8)]
    corpus = pl.DataFrame(
        {
            "doc_id": docs,
            "title": [""] * 8,
            "text": [
                "solar panels",
                "river fish",
                "solar energy",
                "stock markets",
                "fish swim",
                "solar cells",
                "cats sit",
                "rivers flow",
            ],
        }
    )
    queries = pl.DataFrame({"query_id": ["t1", "t2", "v1", "v2"], "text": ["solar", "fish", "solar power", "river"]})
    runs = run_of("dense", {q: docs for q in ("t1", "t2", "v1", "v2")})
    sparse = pl.DataFrame(
        [("t1", "d2", 1), ("t2", "d4", 1), ("v1", "d5", 1), ("v2", "d7", 1)], schema=QRELS, orient="row"
    )
    lab = LabData(runs, queries, corpus, sparse, sparse, ("t1", "t2"), ("v1", "v2"))
    config = LabConfig(
        methods=("naive",),
        rerank_depth=6,
        dev_judgments="sparse",
        cet=CetConfig(
            ranker=RankerConfig(backbone=tiny, max_length=24, max_query_length=6),
            train=TrainConfig(lr=5e-3, warmup_ratio=0.0, schedule="constant", epochs=epochs, batch_size=2, seed=1),
        ),
    )
    return lab, config


def test_each_ranker_keeps_its_best_dev_epoch_by_default(tmp_path) -> None:
    from dagster_ir.methods.cet.lab import dev_mrr10, train_lab
    from dagster_ir.neural.cross_encoder import CrossEncoder

    assert LabConfig().select_on_dev
    lab, config = _tiny_lab(tmp_path)
    [naive] = train_lab(lab, config, tmp_path / "lab")
    scores = naive.result.dev_scores
    assert len(scores) == 4 and naive.best_epoch == scores.index(max(scores))
    if naive.chosen_epoch == 0:  # the start scored above every epoch: the dev run reused is the start's
        assert naive.start_score > max(scores) and naive.dev_score == naive.start_score
        scores = [naive.start_score]
    assert naive.dev_score == max(scores)
    # the dev MRR@10 reported is the kept weights' (reused from the epoch's scoring, equal to reranking afresh)
    kept = CrossEncoder.from_pretrained(naive.relevance_path)
    assert naive.dev_mrr10 == pytest.approx(max(scores)) == pytest.approx(dev_mrr10(kept, lab, config))


@pytest.mark.parametrize("scripted", [(0.9, 0.5, 0.6), (0.1, 0.5, 0.6)])
def test_a_ranker_keeps_its_start_when_no_epoch_beats_it_on_dev(scripted, tmp_path, monkeypatch) -> None:
    """R's start (the backbone's cross-encoder) is scored on dev first; kept, and saved, only when above every epoch."""
    import torch

    from dagster_ir.methods.cet import lab as lab_module
    from dagster_ir.methods.cet.model import CoupledRanker
    from dagster_ir.neural.cross_encoder import CrossEncoder

    lab, config = _tiny_lab(tmp_path, epochs=2)
    calls = iter(scripted)

    class Scripted:
        def __call__(self, model) -> float:
            return next(calls)

        def kept_run(self, result, kept_start):
            return None

    monkeypatch.setattr(lab_module, "_dev_evaluator", lambda data, config: Scripted())
    [naive] = lab_module.train_lab(lab, config, tmp_path / "lab")
    assert naive.start_score == scripted[0] and naive.result.dev_scores == list(scripted[1:])
    start = CoupledRanker.build(config.cet.ranker, coupled=False, seed=config.cet.train.seed).relevance.state_dict()
    saved = CrossEncoder.from_pretrained(naive.relevance_path).state_dict()
    untouched = all(torch.equal(saved[k], v) for k, v in start.items())
    kept = scripted[0] > max(scripted[1:])
    assert untouched == kept
    assert (naive.chosen_epoch, naive.dev_score) == ((0, 0.9) if kept else (2, 0.6))
    row = manifest([naive]).row(0, named=True)
    assert (row["chosen_epoch"], row["start_score"], row["dev_score"]) == (
        naive.chosen_epoch,
        *scripted[:1],
        naive.dev_score,
    )
