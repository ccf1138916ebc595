"""Candidate runs written per block of queries equal the whole run written at once."""

import polars as pl
import pytest

from dagster_ir.retrieval.blocks import write_runs_in_blocks
from dagster_ir.retrieval.runs import recall_at_k
from dagster_ir.retrieval.trec import write_run
from dagster_ir.schemas import QRELS, RUN

QUERIES = pl.DataFrame({"query_id": [f"q{i:02d}" for i in range(13)], "text": [f"text {i}" for i in range(13)]})
QRELS_FRAME = pl.DataFrame(
    [(f"q{i:02d}", f"d{(i * 3) % 10}", 1) for i in range(0, 13, 2)] + [("q99", "d1", 1)], schema=QRELS, orient="row"
)  # q99: judged, never asked


def _searcher(shift: int):
    """Ten documents per query, scores from the query and document numbers (no state between blocks)."""

    def search(block: pl.DataFrame) -> pl.DataFrame:
        seen.append(block.height)
        rows = [
            (q, f"d{d}", float((int(q[1:]) * shift + d * 7) % 11), 0, "x") for q in block["query_id"] for d in range(10)
        ]
        frame = pl.DataFrame(rows, schema=RUN, orient="row")
        return frame.with_columns(rank=pl.col("score").rank("ordinal", descending=True).over("query_id").cast(pl.Int32))

    seen: list[int] = []
    search.seen = seen
    return search


@pytest.mark.parametrize("block_size", [1, 4, 100])
def test_blocks_give_the_whole_runs(tmp_path, block_size):
    searchers = {"a": _searcher(1), "b": _searcher(3)}
    imported = pl.DataFrame([("q00", "d5", 1.0, 1, "ext")], schema=RUN, orient="row")
    result = write_runs_in_blocks(
        QUERIES.reverse(),
        searchers,
        tmp_path / "parts",
        tmp_path / "trec",
        qrels=QRELS_FRAME,
        block_size=block_size,
        ks=(3, 10),
        extra_runs={"ext": imported},
    )
    assert max(searchers["a"].seen) == min(block_size, 13) and sum(searchers["a"].seen) == 13
    assert result.blocks == -(-13 // block_size)
    runs = result.runs.collect()
    for name, searcher in [("a", _searcher(1)), ("b", _searcher(3))]:
        whole = searcher(QUERIES).with_columns(run_name=pl.lit(name))
        mine = runs.filter(pl.col("run_name") == name)
        assert mine.sort("query_id", "doc_id").equals(whole.sort("query_id", "doc_id"))
        expected = write_run(whole, tmp_path / f"whole-{name}.trec").read_text()
        assert result.trec_files[name].read_text() == expected
        for k in (3, 10):
            assert result.recall[name][k] == pytest.approx(recall_at_k(whole, QRELS_FRAME, k))
    assert result.recall["ext"][3] == pytest.approx(recall_at_k(imported, QRELS_FRAME, 3))
    assert result.trec_files["ext"].read_text() == "q00 Q0 d5 1 1.0 ext\n"


def test_bad_block_size_is_refused(tmp_path):
    with pytest.raises(ValueError, match="block_size"):
        write_runs_in_blocks(QUERIES, {}, tmp_path / "p", tmp_path / "t", block_size=0)


def test_a_failing_block_leaves_no_block_file_and_block_files_are_per_writer(tmp_path, monkeypatch):
    from dagster_ir.retrieval import blocks
    from dagster_ir.storage.atomic import clean_orphans

    written = []
    real = blocks.write_run
    monkeypatch.setattr(blocks, "write_run", lambda rows, path: written.append(path) or real(rows, path))
    write_runs_in_blocks(QUERIES, {"a": _searcher(1)}, tmp_path / "parts", tmp_path / "trec", block_size=5)
    assert len(set(written)) == len(written) == 3  # a name of its own per block, as temp_name gives
    assert written[0].name.startswith(".a.block.trec.") and written[0].name.endswith(".tmp")
    assert clean_orphans(tmp_path) == []  # a live writer's names are not orphans

    def failing(rows, path):
        real(rows, path)
        raise OSError("disk full")

    monkeypatch.setattr(blocks, "write_run", failing)
    with pytest.raises(OSError, match="disk full"):
        write_runs_in_blocks(QUERIES, {"a": _searcher(1)}, tmp_path / "parts", tmp_path / "trec2", block_size=5)
    assert sorted(p.name for p in (tmp_path / "trec2").iterdir()) == []
