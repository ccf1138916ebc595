import math

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from dagster_ir.retrieval.trec import (
    ReadReport,
    TrecFormatError,
    check_run_against_qrels,
    rank_run,
    read_qrels,
    read_qrels_with_report,
    read_run,
    read_run_with_report,
    run_file_name,
    write_qrels,
    write_run,
    write_runs,
)
from dagster_ir.schemas import QRELS, RUN

RUN_TEXT = "q1 Q0 d1 1 2.5 bm25\nq1 Q0 d2 2 1.25 bm25\nq2\tQ0\td3\t1\t-0.5\tbm25\n"
QRELS_TEXT = "q1 0 d1 1\nq1 0 d2 0\nq2 0 d3 2\n"


def write_bytes(tmp_path, name: str, data: str | bytes):
    path = tmp_path / name
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


def run_frame(rows: list[tuple[str, str, float, int]], name: str = "r") -> pl.DataFrame:
    return pl.DataFrame([(q, d, s, r, name) for q, d, s, r in rows], schema=RUN, orient="row")


# --- reading good files -------------------------------------------------------------------------


def test_read_run_parses_columns_and_dtypes(tmp_path):
    path = write_bytes(tmp_path, "run.txt", RUN_TEXT)
    frame = read_run(path)
    expected = run_frame([("q1", "d1", 2.5, 1), ("q1", "d2", 1.25, 2), ("q2", "d3", -0.5, 1)], "bm25")
    assert_frame_equal(frame, expected)


def test_read_run_name_overrides_tag(tmp_path):
    path = write_bytes(tmp_path, "run.txt", RUN_TEXT)
    assert read_run(path, run_name="mine")["run_name"].unique().to_list() == ["mine"]


def test_read_qrels_keeps_negative_and_graded_relevance(tmp_path):
    path = write_bytes(tmp_path, "qrels.txt", "1 0 184 2\n1 0 29 -1\n2 Q0 7 4\n")
    expected = pl.DataFrame(
        {"query_id": ["1", "1", "2"], "doc_id": ["184", "29", "7"], "relevance": [2, -1, 4]}, schema=QRELS
    )
    assert_frame_equal(read_qrels(path), expected)


def test_clean_file_reports_no_repair(tmp_path):
    _, report = read_run_with_report(write_bytes(tmp_path, "run.txt", RUN_TEXT), repair=True)
    assert report == ReadReport() and not report.repaired


# --- bad files: each error names the file and the 1-based line ----------------------------------


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("", 1, "empty file"),
        ("\ufeffq1 Q0 d1 1 2.5 r\n", 1, "byte order mark"),
        ("q1 Q0 d1 1 2.5 r\nq1 Q0 d2 2 1.5 r\r\n", 2, "CRLF"),
        ("q1 Q0 d1 1 2.5 r\nq1 Q0 d2 2 1.5\n", 2, "expected 6 columns"),
        ("q1 Q0 d1 1 2.5 r extra\n", 1, "found 7"),
        ("q1 Q0 d1 1 2.5 r\n\nq1 Q0 d2 2 1.5 r\n", 2, "found 0"),
        ("q1 Q0 d1 1 2.5 r\nq1 Q0 d2 2 high r\n", 2, "'high' is not a finite number"),
        ("q1 Q0 d1 1 nan r\n", 1, "not a finite number"),
        ("q1 Q0 d1 1 2.5 r\nq1 Q0 d2 2 -inf r\n", 2, "not a finite number"),
        ("q1 Q0 d1 1 2.5 r\nq1 Q0 d2 2.0 1.5 r\n", 2, "rank '2.0' is not a 32-bit integer"),
        ("q1 Q0 d1 1 2.5 r\nq1 Q0 d2 99999999999 1.5 r\n", 2, "32-bit"),
        (
            "q1 Q0 d1 1 2.5 r\nq2 Q0 d1 1 2.5 r\nq1 Q0 d1 3 1.5 r\n",
            3,
            "duplicate (query, doc) ('q1', 'd1'); first at line 1",
        ),
        ("q1 Q0 d1 1 2.5 r\nq1 Q0 d2\r2 1.5 r\n", 2, "carriage return inside"),
    ],
)
def test_bad_run_names_file_and_line(tmp_path, text, line, fragment):
    path = write_bytes(tmp_path, "bad.run", text)
    with pytest.raises(TrecFormatError) as error:
        read_run(path)
    message = str(error.value)
    assert message.startswith(f"{path}:{line}: "), message
    assert fragment in message


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("", 1, "empty file"),
        ("\ufeff1 0 d1 1\n", 1, "byte order mark"),
        ("1 0 d1 1\r\n", 1, "CRLF"),
        ("1 0 d1 1\n1 d2 1\n", 2, "expected 4 columns `qid iter docid rel`, found 3"),
        ("1 0 d1 1\n1 0 d2 1.0\n", 2, "relevance '1.0' is not a 32-bit integer"),
        ("1 0 d1 1\n1 0 d2 yes\n", 2, "relevance 'yes'"),
        ("1 0 d1 1\n1 0 d2 0\n1 0 d1 2\n", 3, "duplicate (query, doc) ('1', 'd1'); first at line 1"),
    ],
)
def test_bad_qrels_names_file_and_line(tmp_path, text, line, fragment):
    path = write_bytes(tmp_path, "bad.qrels", text)
    with pytest.raises(TrecFormatError) as error:
        read_qrels(path)
    message = str(error.value)
    assert message.startswith(f"{path}:{line}: "), message
    assert fragment in message


def test_invalid_utf8_names_line(tmp_path):
    path = write_bytes(tmp_path, "bad.qrels", b"1 0 d1 1\n1 0 d\xff 1\n")
    with pytest.raises(TrecFormatError, match=r"bad\.qrels:2: not valid UTF-8"):
        read_qrels(path)


def test_trec_format_error_is_a_value_error():
    assert issubclass(TrecFormatError, ValueError)


# --- repair -------------------------------------------------------------------------------------


def test_repair_strips_bom_and_cr_and_drops_later_duplicates(tmp_path):
    text = "\ufeffq1 Q0 d1 1 2.5 r\r\nq1 Q0 d2 2 1.5 r\r\nq1 Q0 d1 3 0.5 r\r\nq2 Q0 d1 1 9 r\n"
    frame, report = read_run_with_report(write_bytes(tmp_path, "x.run", text), repair=True)
    assert report == ReadReport(bom_stripped=True, crlf_lines=3, duplicates_dropped=1)
    assert report.repaired
    expected = run_frame([("q1", "d1", 2.5, 1), ("q1", "d2", 1.5, 2), ("q2", "d1", 9.0, 1)])
    assert_frame_equal(frame, expected)


def test_repair_qrels_keeps_first_duplicate(tmp_path):
    frame, report = read_qrels_with_report(write_bytes(tmp_path, "q", "1 0 a 2\n1 0 a 0\n"), repair=True)
    assert report.duplicates_dropped == 1
    assert frame["relevance"].to_list() == [2]


def test_repair_does_not_hide_real_format_errors(tmp_path):
    with pytest.raises(TrecFormatError, match=r"q:2: expected 4 columns"):
        read_qrels(write_bytes(tmp_path, "q", "1 0 a 2\r\n1 0 b\r\n"), repair=True)


# --- run vs qrels -------------------------------------------------------------------------------


def test_run_queries_missing_from_qrels_are_listed_with_file_and_line(tmp_path):
    run = run_frame([("q1", "d1", 1.0, 1), ("q3", "d1", 1.0, 1), ("q4", "d2", 1.0, 1), ("q3", "d2", 0.5, 2)])
    qrels = pl.DataFrame({"query_id": ["q1"], "doc_id": ["d1"], "relevance": [1]}, schema=QRELS)
    with pytest.raises(TrecFormatError) as error:
        check_run_against_qrels(run, qrels, "runs/x.run")
    assert str(error.value) == "runs/x.run:2: 2 run queries not in the qrels: ['q3', 'q4']"


def test_missing_queries_repaired_are_dropped_and_counted():
    run = run_frame([("q1", "d1", 1.0, 1), ("q3", "d1", 1.0, 1), ("q4", "d2", 1.0, 1), ("q3", "d2", 0.5, 2)])
    qrels = pl.DataFrame({"query_id": ["q1", "q9"], "doc_id": ["d1", "d1"], "relevance": [1, 0]}, schema=QRELS)
    kept, dropped = check_run_against_qrels(run, qrels, "x.run", repair=True)
    assert dropped == 2
    assert kept["query_id"].to_list() == ["q1"]
    assert check_run_against_qrels(kept, qrels, "x.run") == (kept, 0)


# --- ranking ------------------------------------------------------------------------------------


def test_rank_run_breaks_ties_by_docno_descending_bytewise():
    run = run_frame(
        [
            ("q", "a", 1.0, 0),
            ("q", "b", 1.0, 0),
            ("q", "Z", 1.0, 0),
            ("q", "c", 3.0, 0),
            ("p", "10", 2.0, 0),
            ("p", "9", 2.0, 0),
        ]
    )
    ranked = rank_run(run)
    assert ranked.select("query_id", "doc_id", "rank").rows() == [
        ("p", "9", 1),
        ("p", "10", 2),
        ("q", "c", 1),
        ("q", "b", 2),
        ("q", "a", 3),
        ("q", "Z", 4),
    ]
    assert ranked.schema == run.schema


def test_rank_run_tie_order_matches_trec_eval():
    """pytrec_eval embeds trec_eval: the doc rank_run puts first must be the one it scores at P@1."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    docs = ["a", "b", "Z", "10", "9"]
    ranked = rank_run(run_frame([("q", d, 1.0, 0) for d in docs]))
    first = ranked["doc_id"][0]
    for relevant in docs:
        evaluator = pytrec_eval.RelevanceEvaluator({"q": {d: int(d == relevant) for d in docs}}, {"P_1"})
        p1 = evaluator.evaluate({"q": {d: 1.0 for d in docs}})["q"]["P_1"]
        assert p1 == float(relevant == first)


def test_rank_run_adds_rank_when_absent():
    frame = pl.DataFrame({"query_id": ["q", "q"], "doc_id": ["a", "b"], "score": [0.1, 0.2]})
    assert rank_run(frame).rows() == [("q", "b", 0.2, 1), ("q", "a", 0.1, 2)]


def test_rank_run_refuses_nan():
    with pytest.raises(TrecFormatError, match="not finite"):
        rank_run(run_frame([("q", "a", math.nan, 1)]))


# --- writing ------------------------------------------------------------------------------------


def test_write_run_writes_trec_lines_in_rank_order(tmp_path):
    run = run_frame([("q2", "x", 0.5, 9), ("q1", "a", 0.1, 9), ("q1", "b", 0.2, 9)], "bm25")
    path = write_run(run, tmp_path / "out" / "r.run")
    assert path.read_text() == "q1 Q0 b 1 0.2 bm25\nq1 Q0 a 2 0.1 bm25\nq2 Q0 x 1 0.5 bm25\n"
    assert [p.name for p in path.parent.iterdir()] == ["r.run"]  # no temp file left behind


def test_run_round_trips_exactly_including_hard_floats(tmp_path):
    rng = np.random.default_rng(7)
    scores = np.concatenate(
        [
            rng.standard_normal(500) * 10.0 ** rng.integers(-300, 300, 500),
            [0.1, 1 / 3, 5e-324, 1e300, -0.0, 2.0**60, 1e16, 123456789.123456789],
        ]
    )
    run = rank_run(
        pl.DataFrame(
            {
                "query_id": [f"q{i % 7}" for i in range(len(scores))],
                "doc_id": [f"d{i}" for i in range(len(scores))],
                "score": scores,
                "rank": pl.Series([0] * len(scores), dtype=pl.Int32),
                "run_name": ["r"] * len(scores),
            },
            schema=RUN,
        )
    )
    back = read_run(write_run(run, tmp_path / "r.run"))
    assert_frame_equal(back, run)
    assert np.array_equal(back["score"].to_numpy(), run["score"].to_numpy())


def test_qrels_round_trip(tmp_path):
    qrels = pl.DataFrame(
        {"query_id": ["1", "1", "2"], "doc_id": ["a", "b", "a"], "relevance": [-1, 3, 0]}, schema=QRELS
    )
    path = write_qrels(qrels.reverse(), tmp_path / "q.txt")
    assert path.read_text() == "1 0 a -1\n1 0 b 3\n2 0 a 0\n"
    assert_frame_equal(read_qrels(path), qrels)


@pytest.mark.parametrize(
    ("frame", "fragment"),
    [
        (run_frame([("q 1", "d", 1.0, 1)]), "query_id 'q 1' is empty or contains whitespace"),
        (run_frame([("q", "", 1.0, 1)]), "doc_id '' is empty"),
        (run_frame([("q", "d", 1.0, 1), ("q", "d", 2.0, 2)]), "duplicate (query, doc) ('q', 'd')"),
        (run_frame([("q", "d", math.inf, 1)]), "not finite"),
        (run_frame([]), "empty TREC file"),
    ],
)
def test_write_run_refuses_unwritable_frames(tmp_path, frame, fragment):
    target = tmp_path / "r.run"
    with pytest.raises(TrecFormatError) as error:
        write_run(frame, target)
    assert fragment in str(error.value)
    assert not target.exists()


def test_write_qrels_validates_schema(tmp_path):
    bad = pl.DataFrame({"query_id": ["1"], "doc_id": ["a"], "relevance": [1.0]})
    with pytest.raises(ValueError, match="relevance"):
        write_qrels(bad, tmp_path / "q.txt")


def test_write_runs_writes_one_file_per_run_and_seed_that_reads_back(tmp_path):
    rows = [
        ("q1", "d1", 2.0, 1, "ghrm", 0),
        ("q1", "d2", 1.0, 2, "ghrm", 0),
        ("q1", "d2", 3.0, 1, "ghrm", 1),
        ("q1", "d1", 0.5, 2, "ghrm", 1),
        ("q1", "d1", 9.0, 1, "bm25(words|wp)", None),
    ]
    frame = pl.DataFrame(rows, schema=[*RUN, "seed"], orient="row").cast({**RUN, "seed": pl.Int64})
    (tmp_path / "old.run").write_text("q1 Q0 d9 1 1.0 old\n")  # a run of an earlier report: removed
    (tmp_path / "notes.txt").write_text("kept")
    written = write_runs(frame, tmp_path)
    assert [p.name for p in written] == ["ghrm.seed-0.run", "ghrm.seed-1.run", "bm25_words_wp_.run"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "bm25_words_wp_.run",
        "ghrm.seed-0.run",
        "ghrm.seed-1.run",
        "notes.txt",
    ]
    seed1 = read_run(tmp_path / "ghrm.seed-1.run")
    assert seed1["doc_id"].to_list() == ["d2", "d1"] and seed1["score"].to_list() == [3.0, 0.5]
    assert read_run(tmp_path / "bm25_words_wp_.run")["run_name"].to_list() == ["bm25(words|wp)"]  # the tag keeps it


def test_write_runs_refuses_two_runs_that_would_share_a_file_before_writing(tmp_path):
    frame = pl.DataFrame(
        [("q1", "d1", 1.0, 1, "a|b"), ("q1", "d1", 1.0, 1, "a/b")], schema=list(RUN), orient="row"
    ).cast(RUN)
    assert run_file_name("a|b") == run_file_name("a/b") == "a_b.run" and run_file_name("x", 2) == "x.seed-2.run"
    with pytest.raises(ValueError, match=r"would both be written to .*a_b\.run"):
        write_runs(frame, tmp_path / "runs")
    assert not (tmp_path / "runs").exists()
