"""Speed of Model 1 reranking against the neural Model 1, BERT-Model1 and a BERT cross-encoder.

All systems score the same candidates in this process (Cranfield: 1,400 abstracts, 225 queries;
each query gets `--docs` documents drawn at random, seeded - speed does not depend on which).
Reported as milliseconds per 1,000 candidate documents of one query (throughput, as in the
paper's Table 2), best of `--repeat` timings (the machine is shared):

* model1 (wp): the non-parametric scorer (`Model1Scorer`, sparse products over a forward index)
  with the EM table trained here on Cranfield's judged pairs (word pieces);
* nn-model1-exp: the same scorer over a neural Model 1 export (sources: the corpus' word pieces,
  targets: the queries'), thresholded to keep `--export-density` of the pairs (an untrained
  network: the speed depends on the density, not on the weights);
* bm25 (wp): BM25 over word pieces on the same forward index, for reference;
* model1 (words) and bm25 (words): the same two over the words vocabulary (an EM table of its own),
  on the same candidates: the Model 1 / BM25 cost ratio is printed per vocabulary;
* nn-model1: the context-free neural Model 1 itself (torch, documents up to 512 word pieces, the
  paper's sizes: 128-wide layers); it scores `--neural-docs` documents per query, scaled to 1,000;
* bert-model1 and cross-encoder: the bundled 6-layer MiniLM backbone with the Model 1 layer
  (1 chunk of 512) and with `dagster_ir.neural.cross_encoder.CrossEncoder` (FirstP, 512 tokens);
  these score `--bert-docs` documents per query and are scaled to 1,000.

EM throughput: (query, chunk) pairs of the symmetrised parallel corpus per second, per iteration.
Threads: torch and numpy use what the process has (2 cores here); `--device cuda` runs the torch
models on a GPU instead.

    .venv/bin/python benchmarks/model1_speed.py [--queries 20] [--docs 1000] [--neural-docs 100] [--bert-docs 100]
        [--repeat 3] [--device cpu] [--cranfield ../shared/data/cranfield]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import torch
from ratios import print_ratio  # benchmarks/ratios.py: the line format make bench reads

from dagster_ir.collections.cranfield import read_cranfield
from dagster_ir.methods.model1 import (
    EMConfig,
    Model1Config,
    Model1Scorer,
    ScoringConfig,
    bm25_scores,
    collection_vocabulary,
    index_collection,
    train_model1,
    wordpiece_vocabulary,
)
from dagster_ir.methods.model1.bert import BertModel1, BertModel1Config
from dagster_ir.methods.model1.neural import (
    Model1LayerConfig,
    NeuralModel1Config,
    NeuralTexts,
    TokenizedTexts,
    build_model,
    export_table,
    export_vocabulary,
    score_pairs,
)

DEFAULT_CRANFIELD = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "cranfield"


def best_of(repeat: int, function: Callable[[], object]) -> float:
    """The shortest of `repeat` wall times of `function()` (seconds)."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--neural-docs", type=int, default=100)
    parser.add_argument("--bert-docs", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--export-density", type=float, default=0.01)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--cranfield", default=str(DEFAULT_CRANFIELD))
    args = parser.parse_args()
    corpus, queries, qrels = read_cranfield(args.cranfield)
    vocabulary = wordpiece_vocabulary()
    print(
        f"Cranfield: {corpus.height} documents, {queries.height} queries; torch threads {torch.get_num_threads()}, "
        f"device {args.device}"
    )

    config = Model1Config(em=EMConfig(iterations=5))
    trained = train_model1(queries, qrels, corpus, queries["query_id"], vocabulary, config)
    print(f"EM: {trained.n_bitext_pairs} bitext pairs, {trained.table.nnz} entries after pruning")
    for h in trained.history:
        print(
            f"  iteration {h.iteration}: {h.pairs_per_second:,.0f} pairs/s, {h.alignments_per_second:,.0f} "
            f"alignments/s ({h.seconds:.2f} s)"
        )

    index, stats = index_collection(corpus, vocabulary)
    query_ids = queries["query_id"].head(args.queries).to_list()
    query_tokens = {q: vocabulary.encode([t]).row(0) for q, t in zip(queries["query_id"], queries["text"], strict=True)}
    rng = np.random.default_rng(0)
    rows = {q: rng.choice(corpus.height, min(args.docs, corpus.height), replace=False) for q in query_ids}
    n_docs = sum(r.size for r in rows.values())
    results: dict[str, float] = {}

    def per_1k(name: str, seconds: float, docs: int) -> None:
        results[name] = 1000 * seconds / docs * 1000
        print(f"{name:<16} {results[name]:>10.2f} ms per 1K documents", flush=True)

    scorer = Model1Scorer(trained.table, index, stats, ScoringConfig())
    per_1k(
        "model1 (wp)",
        best_of(args.repeat, lambda: [scorer.score_rows(query_tokens[q], rows[q]) for q in query_ids]),
        n_docs,
    )
    per_1k(
        "bm25 (wp)",
        best_of(args.repeat, lambda: [bm25_scores(query_tokens[q], rows[q], index, stats) for q in query_ids]),
        n_docs,
    )
    # The same two scorers over the words vocabulary (its own EM table), on the same candidates.
    words = collection_vocabulary("words", corpus, queries)
    words_table = train_model1(queries, qrels, corpus, queries["query_id"], words, config).table
    words_index, words_stats = index_collection(corpus, words)
    words_tokens = {q: words.encode([t]).row(0) for q, t in zip(queries["query_id"], queries["text"], strict=True)}
    words_scorer = Model1Scorer(words_table, words_index, words_stats, ScoringConfig())
    print(f"words: {len(words):,} tokens, {words_table.nnz:,} table entries after pruning")
    per_1k(
        "model1 (words)",
        best_of(args.repeat, lambda: [words_scorer.score_rows(words_tokens[q], rows[q]) for q in query_ids]),
        n_docs,
    )
    per_1k(
        "bm25 (words)",
        best_of(
            args.repeat, lambda: [bm25_scores(words_tokens[q], rows[q], words_index, words_stats) for q in query_ids]
        ),
        n_docs,
    )

    neural_config = NeuralModel1Config(
        layer=Model1LayerConfig(), max_doc_length=512, rerank_batch_size=64, export_targets="queries"
    )
    model, _ = build_model(stats, neural_config)
    sources, targets = export_vocabulary(neural_config, stats, queries, vocabulary)
    started = time.perf_counter()
    full = export_table(model, vocabulary, sources, targets, threshold=0.0)
    export_seconds = time.perf_counter() - started
    threshold = float(np.quantile(full.matrix.data, 1 - args.export_density))
    kept = full.matrix.multiply(full.matrix >= threshold).tocsr()
    exported = replace(full, matrix=kept)
    print(
        f"export: {sources.size} x {targets.size} = {sources.size * targets.size:,} pairs in {export_seconds:.1f} s "
        f"({sources.size * targets.size / export_seconds:,.0f} pairs/s); kept {exported.nnz:,}",
        flush=True,
    )
    exported_scorer = Model1Scorer(exported, index, stats, ScoringConfig())
    per_1k(
        "nn-model1-exp",
        best_of(args.repeat, lambda: [exported_scorer.score_rows(query_tokens[q], rows[q]) for q in query_ids]),
        n_docs,
    )

    texts = NeuralTexts(
        TokenizedTexts.of_queries(queries, vocabulary),
        TokenizedTexts.of_documents(corpus, corpus["doc_id"], vocabulary),
    )
    pairs = pl.DataFrame(
        {
            "query_id": [q for q in query_ids for _ in rows[q]],
            "doc_id": [corpus["doc_id"][int(i)] for q in query_ids for i in rows[q]],
        }
    )
    model.to(args.device)
    neural_pairs = pairs.group_by("query_id", maintain_order=True).head(args.neural_docs)
    per_1k("nn-model1", best_of(args.repeat, lambda: score_pairs(model, texts, neural_pairs, 64)), neural_pairs.height)

    bert_pairs = pairs.group_by("query_id", maintain_order=True).head(args.bert_docs)
    bert_model = BertModel1.from_backbone(stats, replace(BertModel1Config(), max_chunks=1)).to(args.device)
    per_1k(
        "bert-model1", best_of(args.repeat, lambda: score_pairs(bert_model, texts, bert_pairs, 16)), bert_pairs.height
    )
    per_1k(
        "cross-encoder",
        best_of(args.repeat, lambda: cross_encoder_scores(texts, bert_pairs, args.device)),
        bert_pairs.height,
    )
    base = results["model1 (wp)"]
    print("ratios to model1 (wp): " + ", ".join(f"{k} {v / base:.1f}x" for k, v in results.items()))
    print_ratio("Model 1 (wp) scoring time / BM25 (wp)", results["model1 (wp)"] / results["bm25 (wp)"])
    print_ratio("Model 1 (words) scoring time / BM25 (words)", results["model1 (words)"] / results["bm25 (words)"])


_CROSS_ENCODER = {}


@torch.inference_mode()
def cross_encoder_scores(texts: NeuralTexts, pairs: pl.DataFrame, device: str) -> np.ndarray:
    """The bundled backbone as a cross-encoder (`dagster_ir.neural.cross_encoder`), length-sorted batches of 16."""
    from dagster_ir.neural.cross_encoder import CrossEncoder

    if device not in _CROSS_ENCODER:
        _CROSS_ENCODER[device] = CrossEncoder.from_pretrained("", max_length=512).to(device).eval()
    model = _CROSS_ENCODER[device]
    encoded = [
        model.encode_pair(
            texts.queries.tokens.row(texts.queries.rows([q])[0]).tolist(),
            texts.docs.tokens.row(texts.docs.rows([d])[0]).tolist(),
        )
        for q, d in pairs.iter_rows()
    ]
    order = np.argsort([len(e) for e in encoded], kind="stable")
    scores = np.empty(len(encoded))
    for start in range(0, order.size, 16):
        part = order[start : start + 16]
        scores[part] = model(**model.collate([encoded[i] for i in part])).float().cpu().numpy()
    return scores


if __name__ == "__main__":
    main()
