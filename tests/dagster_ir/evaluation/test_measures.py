import math

import ir_measures
import polars as pl
import pytest

from dagster_ir.evaluation import DEFAULT_MEASURES, EvaluationConfig, aggregate, evaluate_run, recall_curve
from dagster_ir.retrieval.trec import parse_qrels_text, parse_run_text
from dagster_ir.schemas import PER_QUERY_EVAL, SchemaError


def run_from(text: str) -> pl.DataFrame:
    return parse_run_text(text)[0]


def qrels_from(text: str) -> pl.DataFrame:
    return parse_qrels_text(text)[0]


def values(per_query: pl.DataFrame, measure: str) -> dict[str, float]:
    rows = per_query.filter(pl.col("measure") == measure).select("query_id", "value")
    return dict(rows.iter_rows())


def both_runs() -> pl.DataFrame:
    return pl.concat([run_from(RUN_A), run_from(RUN_B)])


def means(per_query: pl.DataFrame, run: str) -> dict[str, float]:
    return dict(aggregate(per_query).filter(pl.col("run_name") == run).select("measure", "mean").iter_rows())


QRELS = """\
q1 0 d1 1
q1 0 d4 2
q1 0 d7 0
q2 0 d2 1
q2 0 d9 1
q3 0 d5 1
q4 0 d8 3
"""
RUN_A = """\
q1 Q0 d7 1 9.5 sys_a
q1 Q0 d4 2 8.25 sys_a
q1 Q0 d3 3 7.0 sys_a
q1 Q0 d1 4 6.5 sys_a
q2 Q0 d9 1 4.0 sys_a
q2 Q0 d2 2 3.0 sys_a
q3 Q0 d6 1 1.0 sys_a
q3 Q0 d5 2 0.5 sys_a
"""
RUN_B = """\
q1 Q0 d1 1 3.0 sys_b
q1 Q0 d2 2 2.0 sys_b
q2 Q0 d8 1 5.0 sys_b
q2 Q0 d2 2 4.0 sys_b
q2 Q0 d7 3 3.0 sys_b
q4 Q0 d8 1 0.1 sys_b
q9 Q0 d1 1 1.0 sys_b
"""


def test_rr_is_one_over_the_rank_of_the_first_relevant_document_within_the_cutoff():
    qrels = qrels_from("q 0 rel 1\n")
    third = run_from("q Q0 x 1 3 r\nq Q0 y 2 2 r\nq Q0 rel 3 1 r\n")
    assert values(evaluate_run(third, qrels, ["RR@10"]), "RR@10") == {"q": pytest.approx(1 / 3)}
    deep = run_from("".join(f"q Q0 x{i} {i} {100 - i} r\n" for i in range(1, 11)) + "q Q0 rel 11 1 r\n")
    per_query = evaluate_run(deep, qrels, ["RR@10", "RR@100"])
    assert values(per_query, "RR@10") == {"q": 0.0}
    assert values(per_query, "RR@100") == {"q": pytest.approx(1 / 11)}


def test_precision_recall_ap_and_ndcg_match_hand_computed_values():
    # ranking: rel, non, rel; a third relevant document is never retrieved
    qrels = qrels_from("q 0 a 1\nq 0 c 1\nq 0 z 1\nq 0 b 0\n")
    run = run_from("q Q0 a 1 3 r\nq Q0 b 2 2 r\nq Q0 c 3 1 r\n")
    per_query = evaluate_run(run, qrels, ["P@20", "R@100", "AP", "nDCG@10"])
    assert values(per_query, "P@20")["q"] == pytest.approx(2 / 20)
    assert values(per_query, "R@100")["q"] == pytest.approx(2 / 3)
    assert values(per_query, "AP")["q"] == pytest.approx((1 / 1 + 2 / 3) / 3)
    dcg = 1 + 1 / math.log2(4)
    ideal = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert values(per_query, "nDCG@10")["q"] == pytest.approx(dcg / ideal)


def test_means_equal_ir_measures_calc_aggregate_on_the_same_trec_text():
    per_query = evaluate_run(both_runs(), qrels_from(QRELS), DEFAULT_MEASURES)
    measures = [ir_measures.parse_measure(m) for m in DEFAULT_MEASURES]
    for run_name, text in (("sys_a", RUN_A), ("sys_b", RUN_B)):
        qrels, run = ir_measures.read_trec_qrels(QRELS), ir_measures.read_trec_run(text)
        direct = ir_measures.calc_aggregate(measures, qrels, run)
        ours = means(per_query, run_name)
        assert ours == pytest.approx({str(m): v for m, v in direct.items()}, abs=1e-12)


def test_per_query_table_has_the_schema_and_asked_measure_order():
    per_query = evaluate_run(both_runs(), qrels_from(QRELS), ["AP", "nDCG@10", "MRR@10"])
    assert per_query.schema == pl.Schema(PER_QUERY_EVAL)
    first = per_query.filter((pl.col("run_name") == "sys_a") & (pl.col("query_id") == "q1"))
    assert first["measure"].to_list() == ["AP", "nDCG@10", "RR@10"]  # canonical name of MRR@10
    assert per_query["run_name"].unique(maintain_order=True).to_list() == ["sys_a", "sys_b"]


def test_ties_are_broken_by_doc_id_descending_as_trec_eval_does():
    # equal scores: trec_eval ranks "b" above "a", so the relevant "a" is second
    qrels = qrels_from("q 0 a 1\nq 0 b 0\n")
    run = run_from("q Q0 a 1 1.0 r\nq Q0 b 2 1.0 r\n")  # the rank column says otherwise; it is ignored
    per_query = evaluate_run(run, qrels, ["RR@10", "RR", "AP", "P@1"])
    assert values(per_query, "RR@10")["q"] == 0.5  # served by another provider than pytrec_eval
    assert values(per_query, "RR")["q"] == 0.5
    assert values(per_query, "AP")["q"] == 0.5
    assert values(per_query, "P@1")["q"] == 0.0
    trec_eval = ir_measures.pytrec_eval.calc_aggregate(
        [ir_measures.RR], {"q": {"a": 1, "b": 0}}, {"q": {"a": 1.0, "b": 1.0}}
    )
    assert trec_eval[ir_measures.RR] == 0.5


def test_scores_not_ranks_decide_the_order():
    qrels = qrels_from("q 0 good 1\n")
    run = run_from("q Q0 bad 1 0.1 r\nq Q0 good 2 0.9 r\n")
    assert values(evaluate_run(run, qrels, ["RR@10"]), "RR@10")["q"] == 1.0


def test_queries_missing_from_the_run_count_as_zero_like_trec_eval_c():
    qrels = qrels_from("q1 0 a 1\nq2 0 b 1\n")
    run = run_from("q1 Q0 a 1 1.0 r\n")
    per_query = evaluate_run(run, qrels, ["AP"])
    assert values(per_query, "AP") == {"q1": 1.0, "q2": 0.0}
    assert means(per_query, "r") == {"AP": 0.5}
    skipped = evaluate_run(run, qrels, ["AP"], EvaluationConfig(count_missing_as_zero=False))
    assert values(skipped, "AP") == {"q1": 1.0}
    assert means(skipped, "r") == {"AP": 1.0}


def test_run_queries_without_judgments_are_ignored():
    per_query = evaluate_run(both_runs(), qrels_from(QRELS), ["AP"])
    assert "q9" not in per_query["query_id"].to_list()
    assert set(per_query["query_id"]) == {"q1", "q2", "q3", "q4"}


def test_a_duplicate_document_is_refused():
    run = pl.concat([run_from("q Q0 a 1 1.0 r\n"), run_from("q Q0 a 2 0.5 r\n")])
    with pytest.raises(ValueError, match="duplicate rows .* query_id='q', doc_id='a'"):
        evaluate_run(run, qrels_from("q 0 a 1\n"), ["AP"])


def test_bad_input_is_refused_with_a_message_naming_it():
    run, qrels = run_from("q Q0 a 1 1.0 r\n"), qrels_from("q 0 a 1\n")
    with pytest.raises(ValueError, match="'nDCG@x'"):
        evaluate_run(run, qrels, ["nDCG@x"])
    with pytest.raises(ValueError, match="measure 'Foo@3'"):
        evaluate_run(run, qrels, ["Foo@3"])
    with pytest.raises(ValueError, match="score nan is not finite .*doc 'a'"):
        evaluate_run(run.with_columns(score=pl.lit(float("nan"))), qrels, ["AP"])
    with pytest.raises(SchemaError, match="qrels: column 'relevance' is Int64"):
        evaluate_run(run, qrels.with_columns(pl.col("relevance").cast(pl.Int64)), ["AP"])
    with pytest.raises(SchemaError, match="run: missing column 'run_name'"):
        evaluate_run(run.drop("run_name"), qrels, ["AP"])


def test_an_empty_run_gives_an_empty_table():
    empty = run_from("q Q0 a 1 1.0 r\n").clear()
    per_query = evaluate_run(empty, qrels_from("q 0 a 1\n"), ["AP"])
    assert per_query.height == 0 and per_query.schema == pl.Schema(PER_QUERY_EVAL)


def test_recall_curve_agrees_with_recall_at_k_for_every_k():
    run, qrels = both_runs(), qrels_from(QRELS)
    curve = recall_curve(run, qrels, max_depth=5)
    per_query = evaluate_run(run, qrels, [f"R@{k}" for k in range(1, 6)])
    summary = aggregate(per_query)
    for run_name in ("sys_a", "sys_b"):
        ours = curve.filter(pl.col("run_name") == run_name)
        assert ours["k"].to_list() == [1, 2, 3, 4, 5]
        expected = summary.filter(pl.col("run_name") == run_name)["mean"].to_list()
        assert ours["recall"].to_list() == pytest.approx(expected, abs=1e-12)


def test_recall_curve_follows_the_missing_query_setting():
    qrels = qrels_from("q1 0 a 1\nq2 0 b 1\n")
    run = run_from("q1 Q0 x 1 2.0 r\nq1 Q0 a 2 1.0 r\n")
    assert recall_curve(run, qrels)["recall"].to_list() == [0.0, 0.5]
    skipped = recall_curve(run, qrels, config=EvaluationConfig(count_missing_as_zero=False))
    assert skipped["recall"].to_list() == [0.0, 1.0]
