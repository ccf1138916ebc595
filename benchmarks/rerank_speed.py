"""Reranking pairs/s of our `CrossEncoderScorer` against sentence-transformers' `CrossEncoder` at each
`--max-lengths` (fp32, and our opt-in bf16), the bf16 mode's nDCG@10 on Cranfield, and PHP
pre-training examples/s.

Reranking: both score the same (query, document) pairs - the first `--queries` Cranfield queries,
each with `--docs-per-query` abstracts (title + text) drawn with a fixed seed, or seeded synthetic
text when the Cranfield folder is absent - with the same model folder (the bundled all-MiniLM-L6-v2
with a seeded one-output [CLS] head, written by `CrossEncoder.save`), the same batch size and maximum
length, in this process, on the CPU with torch's thread setting as it is. Both sentence-transformers
(6.x: length-sorted batches, inference mode) and ours tokenise inside the timed call. All are loaded
and warmed up before the clock starts; each then runs `--repeat` times, alternating who goes first,
and the best time is kept (the machine is shared). The largest score difference is printed: a
speed-up that changed the scores would not count (goal < 1e-4). Where the CPU has native bf16 (AVX-512
BF16 / AMX), our bf16 mode runs in the same rounds against the same fp32 baseline.

What bounds fp32: each length also prints both sides' arithmetic rate (the encoder's multiply-add
FLOPs a pair, from the model config and the pairs' token counts, times pairs/s) against this CPU's fp32
GEMM rate at the model's feed-forward shape, and the ratio ours would reach if every FLOP ran at that
rate: when that ceiling is near the goal, the goal needs less arithmetic, not faster arithmetic.

bf16 quality: BM25 (k1 0.9, b 0.4) retrieves the top `--ndcg-depth` of every Cranfield query, the same
model reranks them in fp32 and in bf16 at `--ndcg-max-length`, and the difference of their nDCG@10
is printed as a ratio line, x 100 (goal <= 0.002, printed <= 0.2). The head is seeded, not trained:
the check is of the bf16 arithmetic's effect on a ranking, not of the model's quality.

PHP: HP-stage pre-training (LCE + anchor-aware MLM, demo profile: 1 positive + 3 negatives,
max length 128, batch 8) on the bundled Wikipedia sample for `--php-steps` optimizer steps.

Every ratio is printed last, one a line (`ratios.print_ratio`).

    .venv/bin/python benchmarks/rerank_speed.py [--queries 25] [--docs-per-query 20]
        [--batch-size 32] [--max-lengths 128 256 512] [--repeat 3] [--ndcg-depth 10]
        [--ndcg-max-length 512] [--php-steps 10] [--cranfield ../shared/data/cranfield]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import torch
from ratios import print_ratio  # benchmarks/ratios.py: the line format make bench reads

from dagster_ir.collections.cranfield import read_cranfield_docs, read_cranfield_queries
from dagster_ir.neural.cross_encoder import CrossEncoder
from dagster_ir.neural.rerank import CrossEncoderScorer
from dagster_ir.retrieval.fast_bert import bf16_supported

DEFAULT_CRANFIELD = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "cranfield"
_WORDS = (
    "flow boundary layer wing pressure shock wave heat transfer laminar turbulent supersonic subsonic drag "
    "lift body surface velocity temperature model theory experimental results method solution"
).split()


def cranfield_pairs(directory: Path, n_queries: int, per_query: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """(queries, documents): each of the first n queries with `per_query` seeded abstracts."""
    docs = read_cranfield_docs(directory / "cran.all.1400")
    texts = docs.select(pl.concat_str(["title", "text"], separator=" ").str.strip_chars().alias("passage"))
    texts = texts["passage"].to_list()
    queries = read_cranfield_queries(directory / "cran.qry")["text"].to_list()[:n_queries]
    rng = np.random.default_rng(seed)
    pairs = [(q, texts[i]) for q in queries for i in rng.choice(len(texts), per_query, replace=False)]
    return [q for q, _ in pairs], [d for _, d in pairs]


def synthetic_pairs(n_queries: int, per_query: int, seed: int = 0) -> tuple[list[str], list[str]]:
    rng = np.random.default_rng(seed)
    queries = [" ".join(rng.choice(_WORDS, rng.integers(4, 12))) for _ in range(n_queries)]
    pairs = [(q, " ".join(rng.choice(_WORDS, rng.integers(50, 250)))) for q in queries for _ in range(per_query)]
    return [q for q, _ in pairs], [d for _, d in pairs]


def best_of_alternating(functions, repeat: int):
    """Best time and last result of each function over `repeat` rounds, alternating who goes first."""
    best = [(float("inf"), None) for _ in functions]
    for round_no in range(repeat):
        for which in range(len(functions)) if round_no % 2 == 0 else reversed(range(len(functions))):
            start = time.perf_counter()
            result = functions[which]()
            best[which] = (min(best[which][0], time.perf_counter() - start), result)
    return best


def load_pairs(args: argparse.Namespace) -> tuple[str, list[str], list[str]]:
    if (args.cranfield / "cran.qry").is_file():
        return "Cranfield", *cranfield_pairs(args.cranfield, args.queries, args.docs_per_query)
    return "synthetic", *synthetic_pairs(args.queries, args.docs_per_query)


def rerank_benchmark(args: argparse.Namespace, folder: Path, max_length: int) -> list[tuple[str, float]]:
    """Time ours (fp32, and bf16 where the CPU has it) and sentence-transformers at one max length."""
    from sentence_transformers import CrossEncoder as StCrossEncoder

    source, queries, docs = load_pairs(args)
    model = CrossEncoder.from_pretrained(str(folder), max_length=max_length)
    ours = CrossEncoderScorer(model, batch_size=args.batch_size)
    ours_bf16 = CrossEncoderScorer(model, batch_size=args.batch_size, bf16=True) if bf16_supported() else None
    theirs = StCrossEncoder(str(folder), device="cpu", max_length=max_length, activation_fn=torch.nn.Identity())
    pairs = list(zip(queries, docs, strict=True))

    def score_theirs() -> np.ndarray:
        return theirs.predict(pairs, batch_size=args.batch_size, show_progress_bar=False)

    contestants = [lambda: ours.score_pairs(queries, docs), score_theirs]
    if ours_bf16 is not None:
        contestants.append(lambda: ours_bf16.score_pairs(queries, docs))
    ours.score_pairs(queries[:8], docs[:8]), theirs.predict(pairs[:8])  # load and warm up both
    if ours_bf16 is not None:
        ours_bf16.score_pairs(queries[:8], docs[:8])
    timed = best_of_alternating(contestants, args.repeat)
    (ours_s, our_scores), (theirs_s, their_scores) = timed[:2]
    lengths = [len(p) for p in ours.encode(queries, docs)]
    print(
        f"reranking: {len(pairs)} {source} pairs ({np.mean(lengths):.0f} tokens each on average, max "
        f"{max(lengths)}), batch size {args.batch_size}, max length {max_length}, "
        f"torch threads {torch.get_num_threads()}, best of {args.repeat}, load {os.getloadavg()[0]:.1f}"
    )
    print(f"ours  CrossEncoderScorer.score_pairs  {len(pairs) / ours_s:8.1f} pairs/s ({ours_s:.2f} s)")
    print(f"      sentence-transformers predict   {len(pairs) / theirs_s:8.1f} pairs/s ({theirs_s:.2f} s)")
    print(f"ours/sentence-transformers (pairs/s) = {theirs_s / ours_s:.2f}")
    print(
        f"largest |score difference|: {np.abs(np.asarray(our_scores) - np.asarray(their_scores)).max():.1e} "
        f"(goal < 1e-4)",
        flush=True,
    )
    ceiling(model.model.config, lengths, args.batch_size, len(pairs) / ours_s, len(pairs) / theirs_s)
    ratios = [
        (f"rerank pairs/s, ours / sentence-transformers CrossEncoder, max length {max_length}", theirs_s / ours_s)
    ]
    if ours_bf16 is not None:
        bf16_s, bf16_scores = timed[2]
        print(
            f"ours  bf16 score_pairs                {len(pairs) / bf16_s:8.1f} pairs/s ({bf16_s:.2f} s), "
            f"largest |score difference| to fp32 {np.abs(bf16_scores - our_scores).max():.1e}",
            flush=True,
        )
        ratios.append(
            (
                f"rerank pairs/s, ours bf16 / sentence-transformers CrossEncoder, max length {max_length}",
                theirs_s / bf16_s,
            )
        )
    else:
        print("bf16: this CPU has no native bf16 (AVX-512 BF16 / AMX); not measured")
    return ratios


def pair_gflop(config, length: int, cls_only_last_layer: bool) -> float:
    """Multiply-add FLOPs (x 2) of one BERT encoder pass over `length` tokens, in GFLOP: per layer the
    Q/K/V and output projections (4 H^2 per token), the feed-forward (2 H I), the attention's QK^T
    and AV (2 L H). `cls_only_last_layer`: the last layer as ours runs it (K/V for every token, the
    rest for [CLS] alone). Embeddings, LayerNorms, softmax and the head are left out (a few percent)."""
    h, i, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    full = 2 * length * (4 * h * h + 2 * h * i) + 2 * 2 * length * length * h
    if not cls_only_last_layer:
        return layers * full / 1e9
    last = 2 * length * 2 * h * h + 2 * (2 * h * h + 2 * h * i) + 2 * 2 * length * h
    return ((layers - 1) * full + last) / 1e9


def gemm_gflops(rows: int, inner: int, cols: int, repeat: int = 5) -> float:
    """fp32 GFLOP/s of torch.addmm(out=) at one of the model's shapes (best of `repeat`), threads as set."""
    a, b, bias = torch.randn(rows, inner), torch.randn(inner, cols), torch.randn(cols)
    out = torch.empty(rows, cols)
    torch.addmm(bias, a, b, out=out)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(10):
            torch.addmm(bias, a, b, out=out)
        best = min(best, (time.perf_counter() - start) / 10)
    return 2 * rows * inner * cols / best / 1e9


def ceiling(config, lengths: list[int], batch_size: int, ours_pairs_s: float, theirs_pairs_s: float) -> None:
    """What bounds the fp32 ratio: each side's arithmetic rate against the GEMM rate of this CPU at the
    model's feed-forward shape, and the ratio ours would reach if every FLOP ran at that rate."""
    ours_gflop = float(np.mean([pair_gflop(config, n, True) for n in lengths]))
    theirs_gflop = float(np.mean([pair_gflop(config, n, False) for n in lengths]))
    rows = min(batch_size, len(lengths)) * int(round(float(np.mean(lengths))))
    gemm = gemm_gflops(rows, config.hidden_size, config.intermediate_size)
    ours_rate, theirs_rate = ours_pairs_s * ours_gflop, theirs_pairs_s * theirs_gflop
    best_pairs_s = gemm / ours_gflop
    print(
        f"arithmetic: {theirs_gflop:.2f} GFLOP a pair (ours {ours_gflop:.2f}: the last layer for [CLS] only); "
        f"fp32 GEMM ({rows} x {config.hidden_size} @ {config.hidden_size} x {config.intermediate_size}) "
        f"{gemm:.0f} GFLOP/s; sentence-transformers {theirs_rate:.0f} GFLOP/s ({theirs_rate / gemm:.0%}), "
        f"ours {ours_rate:.0f} GFLOP/s ({ours_rate / gemm:.0%}); ours at the GEMM rate: "
        f"{best_pairs_s:.1f} pairs/s = {best_pairs_s / theirs_pairs_s:.2f}x sentence-transformers",
        flush=True,
    )


def bf16_ndcg_check(args: argparse.Namespace, folder: Path, work: Path) -> list[tuple[str, float]]:
    """nDCG@10 of BM25's top `--ndcg-depth` on Cranfield reranked in fp32 and in bf16: their difference."""
    from dagster_ir.collections.cranfield import read_cranfield
    from dagster_ir.evaluation import aggregate, evaluate_run
    from dagster_ir.neural.rerank import RerankConfig, rerank
    from dagster_ir.retrieval.lucene import Bm25Config, build_index, search

    if not (args.cranfield / "cran.qry").is_file() or not bf16_supported():
        print("bf16 nDCG@10 check: skipped (no Cranfield data or no native bf16)")
        return []
    corpus, queries, qrels = read_cranfield(args.cranfield)
    build_index(corpus, work / "cranfield_index")
    bm25 = search(work / "cranfield_index", queries, k=args.ndcg_depth, model=Bm25Config(0.9, 0.4), run_name="bm25")
    model = CrossEncoder.from_pretrained(str(folder), max_length=args.ndcg_max_length)
    config = RerankConfig(depth=args.ndcg_depth)
    runs = [bm25]
    for name, bf16 in (("fp32", False), ("bf16", True)):
        scorer = CrossEncoderScorer(model, batch_size=args.batch_size, bf16=bf16)
        runs.append(rerank(bm25, queries, corpus, scorer, replace(config, run_name=name)))
    means = aggregate(evaluate_run(pl.concat(runs), qrels, ["nDCG@10"]))
    ndcg = {run: mean for run, _, mean in means.iter_rows()}
    delta = abs(ndcg["bf16"] - ndcg["fp32"])
    print(
        f"Cranfield, {queries.height} queries, BM25's top {args.ndcg_depth} reranked at max length "
        f"{args.ndcg_max_length}: nDCG@10 BM25 {ndcg['bm25']:.4f}, fp32 {ndcg['fp32']:.4f}, "
        f"bf16 {ndcg['bf16']:.4f}, |bf16 - fp32| = {delta:.4f} (goal <= 0.002)",
        flush=True,
    )
    # x 100: the ratio line keeps three decimals
    return [(f"rerank bf16 |nDCG@10 - fp32 nDCG@10| x 100, Cranfield BM25 top {args.ndcg_depth}", 100 * delta)]


def php_benchmark(args: argparse.Namespace, work: Path) -> None:
    from dagster_ir.methods.php import PROFILES, build_php_examples, pretrain_stage
    from dagster_ir.storage.dumps import sample_dump_path
    from dagster_ir.wiki import assign_php_groups, build_link_graph, extract_dump, resolve_links

    extracted = extract_dump(sample_dump_path())
    articles = extracted.segments.select("article_id", "title").unique()
    links = resolve_links(extracted.raw_links, articles, extracted.redirects)
    groups = assign_php_groups(links, build_link_graph(links))
    demo = PROFILES["demo"]
    config = replace(demo, max_examples=None, train=replace(demo.train, max_steps=args.php_steps, checkpoint_every=0))
    examples, _ = build_php_examples(groups, "hp", config)
    result = pretrain_stage("hp", "", examples, extracted.segments, links, config, work / "hp", work / "checkpoints")
    sequences = result.train.examples_per_s * (1 + config.n_negatives)
    print(
        f"PHP pre-training (HP, {result.train.steps} steps of {config.train.batch_size} examples, "
        f"1 + {config.n_negatives} sequences each, max length {config.max_length}, LCE + MLM): "
        f"{result.train.examples_per_s:.2f} examples/s ({sequences:.1f} sequences/s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=25)
    parser.add_argument("--docs-per-query", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-lengths", type=int, nargs="+", default=[128, 256, 512])
    parser.add_argument(
        "--ndcg-depth", type=int, default=10, help="BM25 depth reranked for the bf16 nDCG check; 0 skips it"
    )
    parser.add_argument("--ndcg-max-length", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=3, help="report the best of this many calls")
    parser.add_argument("--php-steps", type=int, default=10, help="0 skips the PHP measurement")
    parser.add_argument("--cranfield", type=Path, default=DEFAULT_CRANFIELD)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        # head "cls": sentence-transformers' CrossEncoder scores with the folder's classification head, so
        # ours must too (the bundled MiniLM's default head is "cosine", which sentence-transformers lacks)
        folder = CrossEncoder.from_pretrained("", max_length=512, seed=0, head="cls").save(Path(tmp) / "model")
        ratios = []
        for max_length in args.max_lengths:
            ratios += rerank_benchmark(args, folder, max_length)
        if args.ndcg_depth:
            ratios += bf16_ndcg_check(args, folder, Path(tmp))
        if args.php_steps:
            php_benchmark(args, Path(tmp))
        for name, value in ratios:  # the ratios last, as make bench reads them
            print_ratio(name, value)


if __name__ == "__main__":
    main()
