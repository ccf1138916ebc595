"""Reranking pairs/s of our `CrossEncoderScorer` against sentence-transformers' `CrossEncoder`, and PHP
pre-training examples/s.

Reranking: both score the same (query, document) pairs - the first `--queries` Cranfield queries,
each with `--docs-per-query` abstracts (title + text) drawn with a fixed seed, or seeded synthetic
text when the Cranfield folder is absent - with the same model folder (the bundled all-MiniLM-L6-v2
with a seeded one-output head, written by `CrossEncoder.save`), the same batch size and maximum
length, in this process, on the CPU with torch's thread setting as it is. Both are loaded and
warmed up before the clock starts; each then runs `--repeat` times, alternating who goes first,
and the best time is kept (the machine is shared). The largest score difference is printed: a
speed-up that changed the scores would not count.

PHP: HP-stage pre-training (LCE + anchor-aware MLM, demo profile: 1 positive + 3 negatives,
max length 128, batch 8) on the bundled Wikipedia sample for `--php-steps` optimizer steps.

    .venv/bin/python benchmarks/rerank_speed.py [--queries 50] [--docs-per-query 20]
        [--batch-size 32] [--max-length 256] [--repeat 3] [--php-steps 10]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import torch

from dagster_ir.collections.cranfield import read_cranfield_docs, read_cranfield_queries
from dagster_ir.neural.cross_encoder import CrossEncoder
from dagster_ir.neural.rerank import CrossEncoderScorer
from ratios import print_ratio  # benchmarks/ratios.py: the line format make bench reads

DEFAULT_CRANFIELD = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "cranfield"
_WORDS = ("flow boundary layer wing pressure shock wave heat transfer laminar turbulent supersonic subsonic drag "
          "lift body surface velocity temperature model theory experimental results method solution").split()


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
        for which in (range(len(functions)) if round_no % 2 == 0 else reversed(range(len(functions)))):
            start = time.perf_counter()
            result = functions[which]()
            best[which] = (min(best[which][0], time.perf_counter() - start), result)
    return best


def rerank_benchmark(args: argparse.Namespace, folder: Path) -> None:
    from sentence_transformers import CrossEncoder as StCrossEncoder

    if (args.cranfield / "cran.qry").is_file():
        source, (queries, docs) = "Cranfield", cranfield_pairs(args.cranfield, args.queries, args.docs_per_query)
    else:
        source, (queries, docs) = "synthetic", synthetic_pairs(args.queries, args.docs_per_query)
    ours = CrossEncoderScorer(CrossEncoder.from_pretrained(str(folder)), batch_size=args.batch_size)
    theirs = StCrossEncoder(str(folder), device="cpu", max_length=args.max_length,
                            activation_fn=torch.nn.Identity())
    pairs = list(zip(queries, docs, strict=True))

    def score_theirs() -> np.ndarray:
        return theirs.predict(pairs, batch_size=args.batch_size, show_progress_bar=False)

    ours.score_pairs(queries[:8], docs[:8]), theirs.predict(pairs[:8])  # load and warm up both
    (ours_s, our_scores), (theirs_s, their_scores) = best_of_alternating(
        [lambda: ours.score_pairs(queries, docs), score_theirs], args.repeat)
    lengths = [len(p) for p in ours.encode(queries, docs)]
    print(f"reranking: {len(pairs)} {source} pairs ({np.mean(lengths):.0f} tokens each on average, max "
          f"{max(lengths)}), batch size {args.batch_size}, max length {args.max_length}, "
          f"torch threads {torch.get_num_threads()}, best of {args.repeat}")
    print(f"ours  CrossEncoderScorer.score_pairs  {len(pairs) / ours_s:8.1f} pairs/s ({ours_s:.2f} s)")
    print(f"      sentence-transformers predict   {len(pairs) / theirs_s:8.1f} pairs/s ({theirs_s:.2f} s)")
    print(f"ours/sentence-transformers (pairs/s) = {theirs_s / ours_s:.2f}")
    print(f"largest |score difference|: {np.abs(np.asarray(our_scores) - np.asarray(their_scores)).max():.1e}")
    print_ratio(f"rerank pairs/s, ours / sentence-transformers CrossEncoder, max length {args.max_length}",
                theirs_s / ours_s)


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
    print(f"PHP pre-training (HP, {result.train.steps} steps of {config.train.batch_size} examples, "
          f"1 + {config.n_negatives} sequences each, max length {config.max_length}, LCE + MLM): "
          f"{result.train.examples_per_s:.2f} examples/s ({sequences:.1f} sequences/s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--docs-per-query", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3, help="report the best of this many calls")
    parser.add_argument("--php-steps", type=int, default=10, help="0 skips the PHP measurement")
    parser.add_argument("--cranfield", type=Path, default=DEFAULT_CRANFIELD)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = CrossEncoder.from_pretrained("", max_length=args.max_length, seed=0).save(Path(tmp) / "model")
        rerank_benchmark(args, folder)
        if args.php_steps:
            php_benchmark(args, Path(tmp))


if __name__ == "__main__":
    main()
