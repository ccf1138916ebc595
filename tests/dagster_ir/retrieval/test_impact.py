"""BM25 from precomputed impacts: the same run as Lucene's searcher, the impacts file's life cycle."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from dagster_ir.collections.cranfield import read_cranfield
from dagster_ir.retrieval import impact
from dagster_ir.retrieval.lucene import Bm25Config, QlConfig, build_index, search

CRANFIELD = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "cranfield"


def corpus(rows: list[tuple[str, str, str]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=["doc_id", "title", "text"], orient="row")


def queries(texts: list[str]) -> pl.DataFrame:
    return pl.DataFrame({"query_id": [f"q{i}" for i in range(len(texts))], "text": texts})


def both(index_dir: Path, topics: pl.DataFrame, k: int, model: Bm25Config) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(impacts' run, Lucene searcher's run) of the same queries."""
    ours = search(index_dir, topics, k=k, model=model, run_name="r")
    lucene = search(index_dir, topics, k=k, model=model, run_name="r", impact_max_postings=0)
    return ours, lucene


@pytest.fixture(scope="module")
def ties_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """400 documents of 16 kinds (long runs of equal scores), ids shuffled, lengths a little
    apart (scores 1e-4 apart after rounding: Anserini's 1e-6 steps chain), some long documents
    (Lucene's lossy one-byte length), two segments."""
    rng = random.Random(11)
    words = ["jet", "flow", "wing", "shock", "heat", "drag", "lift", "speed"]
    docs = []
    for i in range(400):
        kind = i % 16
        text = words[: 1 + kind % 8] + ["jet"] * (kind // 8) + ["filler"] * (i % 3)
        if i % 50 == 0:
            text += ["padding"] * (40 + i // 5)
        docs.append((f"{rng.randrange(10**6):06d}-{i}", "", " ".join(text)))
    rng.shuffle(docs)
    target = tmp_path_factory.mktemp("impact") / "index"
    build_index(iter([corpus(docs[:200]), corpus(docs[200:])]), target, threads=2)
    return target


TEXTS = [
    "jet", "jet flow", "wing heat drag", "filler jet", "jet jet flow",  # "jet" boosted 2 by Anserini
    "Jets flowing over wings!", "the of", "unknownword", "padding jet lift lift lift", "speed",
]  # fmt: skip


@pytest.mark.parametrize("model", [Bm25Config(), Bm25Config(k1=1.2, b=0.75), Bm25Config(k1=0.0, b=0.0)])
def test_impacts_give_lucenes_run_with_ties_across_the_cut(ties_index: Path, model: Bm25Config) -> None:
    for k in (1, 7, 25, 99, 150, 1000):
        ours, lucene = both(ties_index, queries(TEXTS), k, model)
        assert ours.height > 0 and ours["query_id"].n_unique() == 8  # two queries have no term
        assert ours.equals(lucene), (model, k)
    assert impact.impact_path(ties_index, model.k1, model.b).is_file()  # the impacts path ran


def test_impacts_are_lucenes_float_scores_before_rounding(ties_index: Path) -> None:
    # Anserini's rounding to 4 decimals hides small errors: compare the raw float32 scores too.
    from dagster_ir.retrieval import lucene

    model = Bm25Config(k1=1.1, b=0.6)
    with lucene._open_index(ties_index) as index:
        ours = impact.search_impacts(index.impacts(model), index.analyze(TEXTS), 1000)
        theirs = lucene._search_all(index.searcher(model), TEXTS, 1000, 1)
    assert ours.raw_scores.dtype == np.float32
    for number, hits in enumerate(theirs):
        mine = ours.query == number
        assert sorted(zip(ours.docs[mine].tolist(), ours.raw_scores[mine].tolist())) == sorted(
            zip(hits.lucene_docids.tolist(), hits.raw_scores.tolist())
        )


def test_query_likelihood_and_a_zero_threshold_search_with_lucene(ties_index: Path) -> None:
    search(ties_index, queries(["jet"]), k=5, model=QlConfig(), run_name="r")
    search(ties_index, queries(["jet"]), k=5, model=Bm25Config(k1=2.5, b=0.1), run_name="r",
           impact_max_postings=0)  # fmt: skip
    assert not impact.impact_path(ties_index, 2.5, 0.1).exists()
    with pytest.raises(ValueError, match="impact_max_postings"):
        search(ties_index, queries(["jet"]), model=Bm25Config(), run_name="r", impact_max_postings=-1)


def test_an_index_too_large_for_the_threshold_is_searched_by_lucene(ties_index: Path) -> None:
    model = Bm25Config(k1=0.7, b=0.3)
    small = search(ties_index, queries(TEXTS), k=50, model=model, run_name="r", impact_max_postings=10)
    assert not impact.impact_path(ties_index, model.k1, model.b).exists()
    assert small.equals(search(ties_index, queries(TEXTS), k=50, model=model, run_name="r"))


def test_the_impacts_file_is_rebuilt_when_the_index_changes(tmp_path: Path) -> None:
    index_dir, model = tmp_path / "i", Bm25Config()
    build_index(corpus([("a", "", "jet flow"), ("b", "", "wing")]), index_dir)
    first = search(index_dir, queries(["jet"]), model=model, run_name="r")
    path = impact.impact_path(index_dir, model.k1, model.b)
    old_key = impact.load_impacts(path).key
    assert old_key == impact.index_commit(index_dir)
    build_index(corpus([("c", "", "jet"), ("d", "", "jet jet"), ("e", "", "x")]), index_dir)
    second = search(index_dir, queries(["jet"]), model=model, run_name="r")
    assert first["doc_id"].to_list() == ["a"]
    assert second["doc_id"].to_list() == ["d", "c"]
    assert second.equals(search(index_dir, queries(["jet"]), model=model, run_name="r", impact_max_postings=0))
    rebuilt = impact.load_impacts(path)
    assert rebuilt.key != old_key and rebuilt.key == impact.index_commit(index_dir)
    assert rebuilt.max_doc == 3 and sorted(rebuilt.term_rows) == ["jet", "x"]


def test_a_damaged_impacts_file_is_named(tmp_path: Path) -> None:
    index_dir, model = tmp_path / "i", Bm25Config()
    build_index(corpus([("a", "", "jet flow"), ("b", "", "wing")]), index_dir)
    path = impact.impact_path(index_dir, model.k1, model.b)
    path.write_bytes(b"not an npz file")
    with pytest.raises(ValueError, match=f"{path}: not a readable BM25 impacts file"):
        search(index_dir, queries(["jet"]), model=model, run_name="r")
    path.unlink()
    with pytest.raises(FileNotFoundError, match=str(path)):
        impact.load_impacts(path)
    search(index_dir, queries(["jet"]), model=model, run_name="r")  # writes it
    with np.load(path) as npz:
        arrays = dict(npz)
    arrays["docs"] = arrays["docs"][:-1]  # one posting short
    with open(path, "wb") as out:
        np.savez(out, **arrays)
    with pytest.raises(ValueError, match=f"{path}: impacts arrays do not fit together"):
        impact.load_impacts(path)


def test_a_saved_impacts_file_loads_as_it_was(tmp_path: Path) -> None:
    postings = impact.Postings(
        terms=["flow", "jet"], indptr=np.array([0, 1, 3]), docs=np.array([1, 0, 1], dtype=np.int32),
        freqs=np.array([1, 2, 1], dtype=np.float32), norms=np.array([2, 3], dtype=np.uint8),
        length_table=np.arange(256, dtype=np.float32), idf=np.array([0.5, 0.25], dtype=np.float32),
        doc_count=2, sum_total_term_freq=5,
    )  # fmt: skip
    built = impact.build_impacts(postings, 0.9, 0.4, "segments_1:abc")
    loaded = impact.load_impacts(impact.save_impacts(built, tmp_path / "x.npz"))
    assert (loaded.key, loaded.k1, loaded.b, loaded.term_rows) == ("segments_1:abc", 0.9, 0.4, {"flow": 0, "jet": 1})
    for name in ("indptr", "docs", "impacts", "freqs", "norms", "idf", "cache", "length_table"):
        assert np.array_equal(getattr(loaded, name), getattr(built, name)), name
    again = impact.postings_of(loaded)  # what another (k1, b) is computed from
    assert again.terms == postings.terms
    assert (again.doc_count, again.sum_total_term_freq) == (2, 5)
    assert np.array_equal(
        impact.build_impacts(again, 1.2, 0.75, "k").impacts, impact.build_impacts(postings, 1.2, 0.75, "k").impacts
    )
    # impact = idf - idf / (1 + tf / (k1 (1 - b + b dl / avgdl))), avgdl = 2.5, here in float64
    tf, dl, idf = 2.0, 2.0, 0.25  # "jet" in doc 0: norm byte 2, which the table here decodes to 2
    expected = idf - idf / (1 + tf / (0.9 * (0.6 + 0.4 * dl / 2.5)))
    assert built.impacts[1] == pytest.approx(expected, rel=1e-6)
    assert [t.name for t in tmp_path.iterdir()] == ["x.npz"]  # nothing left beside it


def test_adjust_ties_rounds_and_sets_ties_apart_per_query() -> None:
    scores = np.array([3.0, 3.0, 3.0, 1.0, 2.0, 2.0], dtype=np.float32)
    adjusted = impact.adjust_ties(scores, np.array([0, 4]))
    expected = np.array([3.0, 3.0 - 1e-6, 3.0 - 2e-6, 1.0, 2.0, 2.0 - 1e-6], dtype=np.float32)
    assert adjusted.dtype == np.float32
    assert np.array_equal(adjusted, expected)  # the second query's first score starts anew
    # rounded in double: 0.94285f is 0.94284999... and rounds down (in float it would be 9428.5 up)
    assert impact.adjust_ties(np.array([0.94285], dtype=np.float32), np.array([0]))[0] == np.float32(0.9428)


@pytest.mark.slow  # about 20 s: an index and both searches of 225 queries
@pytest.mark.skipif(not CRANFIELD.is_dir(), reason=f"no Cranfield data at {CRANFIELD}")
def test_cranfield_impacts_run_equals_lucenes(tmp_path: Path) -> None:
    documents, topics, _ = read_cranfield(CRANFIELD)
    build_index(documents, tmp_path / "i", threads=2)
    for model in (Bm25Config(), Bm25Config(k1=1.2, b=0.75)):
        ours, lucene = both(tmp_path / "i", topics, 1000, model)
        assert ours.height > 200_000
        assert ours.equals(lucene), model
