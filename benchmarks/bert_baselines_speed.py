"""The BERT baselines' training steps and scoring (BERT-FirstP, BERT-MaxP, CEDR-KNRM) in the demo
profile's settings (bfloat16 autocast, every core) against the settings they had before (float32,
one thread), in this process, on the same inputs.

Inputs: the first `--queries` Cranfield queries, each with `--docs-per-query` seeded abstracts (title
and text; seeded synthetic text when the Cranfield folder is absent), cut into the demo profile's
passages (60 words, stride 30, at most 3, 128 tokens). A training step is one optimizer step of the
demo's batch (16 examples of a positive and a negative, the model's own loss, AdamW, clipped
gradients: `reranker.train_baseline`'s step); scoring is `reranker.rerank_with` over every pair
(batches of 128). Each side is warmed up once, then the two alternate for `--repeat` rounds and the
best time of each is kept (the machine is shared). A training step changes the weights, so every
step starts from the same saved state.

Also printed, per model: the largest difference of the scores, bfloat16 against float32 (the model
with its seeded head, untrained), against the spread of the scores, and both settings split in two
(float32 on every core; bfloat16 on one thread), to show where the speed-up comes from.

    .venv/bin/python benchmarks/bert_baselines_speed.py [--queries 4] [--docs-per-query 16]
        [--steps 2] [--repeat 2] [--models bert-firstp bert-maxp cedr-knrm] [--cranfield ../shared/data/cranfield]
"""

from __future__ import annotations

import argparse
import copy
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import torch
from ratios import print_ratio  # benchmarks/ratios.py: the line format make bench reads

from dagster_ir.collections.cranfield import read_cranfield_docs, read_cranfield_queries
from dagster_ir.methods.baselines import reranker
from dagster_ir.neural.threads import torch_threads

DEFAULT_CRANFIELD = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "cranfield"
_WORDS = (
    "flow boundary layer wing pressure shock wave heat transfer laminar turbulent supersonic subsonic drag "
    "lift body surface velocity temperature model theory experimental results method solution"
).split()


def texts(directory: Path, n_queries: int, per_query: int, seed: int = 0) -> tuple[dict, dict, list[tuple[str, str]]]:
    """(queries, documents, pairs): the first n Cranfield queries with `per_query` seeded abstracts each."""
    rng = np.random.default_rng(seed)
    if (directory / "cran.qry").is_file():
        docs = read_cranfield_docs(directory / "cran.all.1400")
        doc_texts = dict(zip(docs["doc_id"], (docs["title"] + " " + docs["text"]).str.strip_chars(), strict=True))
        queries = dict(read_cranfield_queries(directory / "cran.qry").head(n_queries).iter_rows())
    else:
        doc_texts = {f"d{i}": " ".join(rng.choice(_WORDS, rng.integers(80, 200))) for i in range(400)}
        queries = {f"q{i}": " ".join(rng.choice(_WORDS, rng.integers(6, 14))) for i in range(n_queries)}
    ids = list(doc_texts)
    pairs = [(q, ids[i]) for q in queries for i in rng.choice(len(ids), per_query, replace=False)]
    return queries, {d: doc_texts[d] for _, d in pairs}, pairs


def one_step(name: str, model, encoder, batch, config: reranker.BaselineConfig, state: dict) -> None:
    """One optimizer step of `name` on `batch` from `state` (the shared loop's step: loss, backward, clip, AdamW)."""
    model.load_state_dict(state)
    threads, bf16 = reranker.runs_on(name, config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.bert_lr, weight_decay=0.01)
    if name == "bert-maxp":
        encoder.sample_passage = True
    try:
        with torch_threads(threads), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            pairs = [(q, d) for q, pos, negs in batch for d in (pos, *negs)]
            scores = reranker.score_pairs(model, encoder, pairs).reshape(len(batch), 2)
            loss = reranker.pairwise_loss(scores, reranker.LOSSES[name])
        with torch_threads(threads):
            loss.float().backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
    finally:
        encoder.sample_passage = False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=4)
    parser.add_argument("--docs-per-query", type=int, default=16)
    parser.add_argument("--steps", type=int, default=2, help="training steps timed per round")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--models", nargs="+", default=list(reranker.BERT_MODELS))
    parser.add_argument("--cranfield", type=Path, default=DEFAULT_CRANFIELD)
    args = parser.parse_args()

    demo = reranker.profile("demo")
    settings = {
        "before": replace(demo, bert_threads=1, bf16=False),
        "demo": demo,
        "fp32, every core": replace(demo, bf16=False),
        "bf16, one thread": replace(demo, bert_threads=1),
    }
    queries, docs, pairs = texts(args.cranfield, args.queries, args.docs_per_query)
    source = "Cranfield" if (args.cranfield / "cran.qry").is_file() else "synthetic"
    by_query: dict[str, list[str]] = {}
    for q, d in pairs:
        by_query.setdefault(q, []).append(d)
    batch = [(q, ds[i], (ds[i + 1],)) for q, ds in by_query.items() for i in range(0, len(ds) - 1, 2)][
        : demo.batch_size
    ]
    run = pl.DataFrame(
        {
            "query_id": [q for q, _ in pairs],
            "doc_id": [d for _, d in pairs],
            "score": [-float(i) for i in range(len(pairs))],
            "rank": list(range(1, len(pairs) + 1)),
            "run_name": "candidates",
        }
    ).with_columns(pl.col("rank").cast(pl.Int32))
    run = run.with_columns(rank=(pl.int_range(pl.len()).over("query_id") + 1).cast(pl.Int32))
    print(
        f"{source}: {len(queries)} queries, {len(pairs)} pairs, training batch {len(batch)} examples x 2 documents; "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, demo bf16={demo.bf16}"
    )
    ratios = []
    for name in args.models:
        model, encoder = reranker.build_bert_model(name, demo)
        encoder.add_texts(queries, docs)
        state = copy.deepcopy(model.state_dict())
        timings, scores = {}, {}
        for label, config in settings.items():
            threads, bf16 = reranker.runs_on(name, config)
            one_step(name, model, encoder, batch, config, state)  # warm-up
            model.load_state_dict(state)
            reranker.rerank_with(model, encoder, run, list(queries), args.docs_per_query, name, 128, threads, bf16)
            timings[label] = [float("inf"), float("inf")]
        for round_no in range(args.repeat):
            order = list(settings) if round_no % 2 == 0 else list(reversed(settings))
            for label in order:
                config = settings[label]
                threads, bf16 = reranker.runs_on(name, config)
                started = time.perf_counter()
                for _ in range(args.steps):
                    one_step(name, model, encoder, batch, config, state)
                timings[label][0] = min(timings[label][0], (time.perf_counter() - started) / args.steps)
                model.load_state_dict(state)
                started = time.perf_counter()
                scored = reranker.rerank_with(
                    model, encoder, run, list(queries), args.docs_per_query, name, 128, threads, bf16
                )
                timings[label][1] = min(timings[label][1], time.perf_counter() - started)
                scores[label] = scored.sort("query_id", "doc_id")["score"].to_numpy()
        difference = float(np.abs(scores["demo"] - scores["before"]).max())
        for label, (step, score) in timings.items():
            print(
                f"{name:12s} {label:17s} training step {step:6.2f} s   scoring {len(pairs)} pairs {score:6.2f} s "
                f"({len(pairs) / score:6.1f} pairs/s)"
            )
        print(
            f"{name:12s} largest score difference bf16 - fp32: {difference:.4f} (scores' spread {scores['before'].std():.4f})"
        )
        ratios += [
            (
                f"BERT baselines training steps/s, demo (bf16, every core) / fp32 one thread, {name}",
                timings["before"][0] / timings["demo"][0],
            ),
            (
                f"BERT baselines scoring pairs/s, demo (bf16, every core) / fp32 one thread, {name}",
                timings["before"][1] / timings["demo"][1],
            ),
        ]
    for label, value in ratios:
        print_ratio(label, value)


if __name__ == "__main__":
    main()
