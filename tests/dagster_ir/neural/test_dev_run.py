"""The validation reranking a fine-tuning keeps beside its model, and when it may stand in for a new one."""

import polars as pl

from dagster_ir.neural.finetune import FineTuned, kept_dev_run, load_dev_run, save_dev_run
from dagster_ir.neural.training import TrainResult


def _run(rows, name="bm25"):
    return pl.DataFrame(rows, schema=["query_id", "doc_id", "rank", "score"], orient="row").with_columns(
        pl.col("rank").cast(pl.Int32), run_name=pl.lit(name)
    )


CANDIDATES = _run(
    [("q1", "a", 1, 3.0), ("q1", "b", 2, 2.0), ("q1", "c", 3, 1.0), ("q2", "a", 1, 5.0), ("q2", "d", 2, 4.0)]
)
RERANKED = _run([("q1", "b", 1, 0.9), ("q1", "a", 2, 0.1), ("q2", "d", 1, 0.7), ("q2", "a", 2, 0.2)], "dev")
SETTINGS = dict(candidate="bm25", depth=2, bf16=False)


def test_a_kept_dev_run_reads_back_for_the_same_candidates(tmp_path):
    from dagster_ir.schemas import RUN

    candidates = CANDIDATES.select(list(RUN))
    save_dev_run(tmp_path, RERANKED.select(list(RUN)), **SETTINGS)
    back = load_dev_run(tmp_path, candidates, **SETTINGS)
    assert back is not None and back.sort("query_id", "rank").equals(
        RERANKED.select(list(RUN)).sort("query_id", "rank")
    )
    # another depth, candidate run, precision or text: the reranking would differ, so it is not used
    assert load_dev_run(tmp_path, candidates, **{**SETTINGS, "depth": 3}) is None
    assert load_dev_run(tmp_path, candidates, **{**SETTINGS, "candidate": "ql"}) is None
    assert load_dev_run(tmp_path, candidates, **{**SETTINGS, "bf16": True}) is None
    assert load_dev_run(tmp_path, candidates, **SETTINGS, use_title=False) is None
    # other documents in a query's top 2 (or another query): not the same pairs
    moved = candidates.with_columns(doc_id=pl.when(pl.col("doc_id") == "d").then(pl.lit("e")).otherwise("doc_id"))
    assert load_dev_run(tmp_path, moved, **SETTINGS) is None
    assert load_dev_run(tmp_path, candidates.filter(pl.col("query_id") == "q1"), **SETTINGS) is None
    assert load_dev_run(tmp_path / "none", candidates, **SETTINGS) is None  # nothing kept


def _tuned(dev_scores, best_epoch, kept_start, start_score=0.5):
    train = TrainResult(
        loss_curve=[1.0],
        log_curves={},
        dev_scores=dev_scores,
        best_epoch=best_epoch,
        steps=1,
        seconds=1.0,
        examples_per_s=1.0,
    )
    return FineTuned(train, examples=1, start_score=start_score, kept_start=kept_start)


def test_the_kept_weights_dev_run_is_picked_in_call_order():
    runs = [RERANKED.with_columns(score=pl.lit(float(i))) for i in range(3)]  # start, epoch 1, epoch 2
    assert kept_dev_run(_tuned([0.4, 0.6], 1, False), runs) is runs[2]
    assert kept_dev_run(_tuned([0.6, 0.4], 0, False), runs) is runs[1]
    assert kept_dev_run(_tuned([0.4, 0.3], 0, True, start_score=0.7), runs) is runs[0]
    # a resumed training restored an epoch's score without evaluating: the calls do not line up
    assert kept_dev_run(_tuned([0.4, 0.6], 1, False), runs[:2]) is None
    assert kept_dev_run(_tuned([], 0, False, start_score=None), []) is None  # no validation
