"""Speed of GHRM against a BERT cross-encoder, reranking the same BM25 candidates in the same run.

Cranfield (../shared/data/cranfield): the first `--queries` queries, their BM25 top `--depth` from a
Lucene index built in a temporary folder. Word vectors are the demo profile's word2vec trained on
the 1400 abstracts (the time is printed, not compared). Then, on the CPU with torch's thread setting
as it is (`--threads` sets it if given):

* graph construction: tokenise, truncate and build the normalised co-occurrence graph of every
  distinct candidate document (documents/s);
* GHRM reranking (each variant, profile settings, untrained weights: speed does not depend on
  them): the candidates scored with the graphs already built (pairs/s), and end to end with graph
  construction included (the ratios against the cross-encoder use this figure, since the
  cross-encoder's time includes its tokenisation);
* the cross-encoder (`dagster_ir.neural.cross_encoder`, the bundled all-MiniLM-L6-v2, 6 layers,
  hidden 384; `--max-length` tokens) scoring the same pairs, tokenisation included (pairs/s).

Every timed part runs `--repeat` times and the best is kept (the machine is shared).

    .venv/bin/python benchmarks/ghrm_speed.py [--queries 40] [--depth 30] [--profile demo]
        [--max-length 256] [--batch-size 32] [--repeat 2] [--threads N]
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import polars as pl
import torch
from ratios import print_ratio  # benchmarks/ratios.py: the line format make bench reads

from dagster_ir.collections.cranfield import read_cranfield
from dagster_ir.methods.ghrm.inputs import GraphStore
from dagster_ir.methods.ghrm.model import VARIANTS, profile, variant_config
from dagster_ir.methods.ghrm.protocol import corpus_texts, make_model, prepare_data, rerank
from dagster_ir.methods.ghrm.word2vec import PROFILES as WORD2VEC_PROFILES
from dagster_ir.methods.ghrm.word2vec import train_word2vec
from dagster_ir.retrieval.lucene import Bm25Config, build_index, search

DEFAULT_CRANFIELD = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "cranfield"


def best_seconds(function: Callable[[], object], repeat: int) -> float:
    """The fastest of `repeat` calls, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return best


def bm25_candidates(corpus: pl.DataFrame, queries: pl.DataFrame, depth: int) -> pl.DataFrame:
    """BM25 (Pyserini defaults k1=0.9, b=0.4) top `depth` of `queries` over `corpus`."""
    with tempfile.TemporaryDirectory() as folder:
        index = Path(folder) / "index"
        build_index(corpus, index, threads=2)
        return search(index, queries, k=depth, model=Bm25Config(), threads=2, run_name="bm25")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--depth", type=int, default=30)
    parser.add_argument("--profile", default="demo", help="GHRM profile (demo or paper)")
    parser.add_argument("--max-length", type=int, default=256, help="cross-encoder tokens per pair")
    parser.add_argument("--batch-size", type=int, default=32, help="cross-encoder pairs per batch")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: as it is)")
    parser.add_argument("--cranfield", type=Path, default=DEFAULT_CRANFIELD)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    corpus, queries, qrels = read_cranfield(args.cranfield)
    queries = queries.head(args.queries)
    candidates = bm25_candidates(corpus, queries, args.depth)
    pairs = candidates.height
    config = dataclasses.replace(
        profile(args.profile),
        training=dataclasses.replace(profile(args.profile).training, rerank_depth=args.depth, train_depth=args.depth),
    )

    started = time.perf_counter()
    vectors = train_word2vec(lambda: corpus_texts(corpus), WORD2VEC_PROFILES["demo"])
    word2vec_s = time.perf_counter() - started
    data = prepare_data(corpus, queries, qrels, candidates, vectors, config)
    doc_ids = candidates["doc_id"].unique().to_list()
    texts = {d: t for d, t in zip(corpus["doc_id"], corpus_texts(corpus), strict=True) if d in set(doc_ids)}

    def build_graphs() -> GraphStore:
        store = GraphStore(texts, data.vocabulary, config.inputs)
        for doc_id in doc_ids:
            store[doc_id]
        return store

    graph_s = best_seconds(build_graphs, args.repeat)
    print(
        f"Cranfield: {queries.height} queries, BM25 top {args.depth}: {pairs} pairs, {len(doc_ids)} distinct "
        f"documents; torch threads {torch.get_num_threads()}; GHRM profile {args.profile!r} "
        f"(N={config.inputs.doc_words}, M={config.inputs.query_words}, k={config.model.top_k}, "
        f"T={config.model.blocks}); word2vec {WORD2VEC_PROFILES['demo'].dim}-d trained in {word2vec_s:.1f} s"
    )
    print(f"graph construction                {len(doc_ids) / graph_s:9.1f} documents/s")
    ghrm_rates = {}
    query_ids = queries["query_id"].to_list()
    for variant in VARIANTS:
        model = make_model(variant_config(config.model, variant), config.inputs.query_words, seed=0)
        rerank(model, data, query_ids, args.depth, variant)  # warm up; graphs now cached in `data`
        seconds = best_seconds(partial(rerank, model, data, query_ids, args.depth, variant), args.repeat)
        end_to_end = pairs / (seconds + graph_s)  # every distinct document's graph built once
        ghrm_rates[variant] = end_to_end  # compared end to end: the cross-encoder's tokenisation is timed too
        print(
            f"{variant:<12} rerank (graphs built)  {pairs / seconds:9.1f} pairs/s   "
            f"with graph construction {end_to_end:9.1f} pairs/s"
        )

    cross_rate, cross_name = cross_encoder_rate(candidates, queries, corpus, args)
    print(f"{cross_name:<33} {cross_rate:9.1f} pairs/s (max length {args.max_length}, batch {args.batch_size})")
    for variant, rate in ghrm_rates.items():
        print_ratio(f"GHRM pairs/s with graph construction / cross-encoder, {variant}", rate / cross_rate)


def cross_encoder_rate(
    candidates: pl.DataFrame, queries: pl.DataFrame, corpus: pl.DataFrame, args
) -> tuple[float, str]:
    """Pairs/s of the cross-encoder reranking `candidates`, tokenisation included."""
    from dagster_ir.neural.cross_encoder import CrossEncoder
    from dagster_ir.neural.rerank import CrossEncoderScorer, RerankConfig
    from dagster_ir.neural.rerank import rerank as rerank_pairs

    model = CrossEncoder.from_pretrained("", max_length=args.max_length, seed=0)
    scorer = CrossEncoderScorer(model, batch_size=args.batch_size)
    config = RerankConfig(depth=args.depth, run_name="cross-encoder")
    rerank_pairs(candidates.filter(pl.col("query_id") == candidates["query_id"][0]), queries, corpus, scorer, config)
    seconds = best_seconds(lambda: rerank_pairs(candidates, queries, corpus, scorer, config), args.repeat)
    return candidates.height / seconds, "cross-encoder (MiniLM-L6) rerank"


if __name__ == "__main__":
    main()
