"""The "bert" cross-encoder on Cranfield with full or gated cross-attention: the start, then fine-tuned.

One rotation of Cranfield's 5 folds (`--fold`, as `make demo` rotates them: test fold i, validation
fold i+1, training the rest), BM25's top 20 reranked, nDCG@10 over the validation and the test
queries of: BM25; the cross-encoder started from the bundled MiniLM with `--cross-attention`
("full" | "gated" | "gated-segments", see `dagster_ir.neural.gated_attention`), untrained; with
`--train`, the same fine-tuned as `benchmarks/learning_curves.py` trains "bert" (demo profile,
Cranfield's 2 epochs uncapped at 5e-5, bf16 where the CPU has it), the weights validation keeps (the start
or an epoch), and the gates every 10 steps and at the end. Choices are validation's; test is reported only.

    PYTHONPATH=. .venv/bin/python benchmarks/gated_cross_attention.py [--cross-attention gated-segments]
        [--train] [--fold 0] [--cranfield PATH]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import polars as pl

from benchmarks.learning_curves import CRANFIELD_CROSS_ENCODER_LR, DEFAULT_CRANFIELD, load_inputs, mean_measure
from dagster_ir.collections import fold_assignment
from dagster_ir.neural import finetune
from dagster_ir.neural.cross_encoder import CROSS_ATTENTION
from dagster_ir.neural.device import resolve_placement
from dagster_ir.neural.rerank import CrossEncoderScorer, RerankConfig, rerank
from dagster_ir.retrieval.runs import top_k


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cross-attention", choices=list(CROSS_ATTENTION), default="gated")
    parser.add_argument("--train", action="store_true")
    parser.add_argument("--fold", type=int, default=0)
    parser.add_argument("--cranfield", type=Path, default=DEFAULT_CRANFIELD)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        inputs = load_inputs(args.cranfield, Path(folder))
        roles = fold_assignment(inputs.splits, args.fold)
        ids = {
            r: roles.filter(pl.col("role") == r)["query_id"].sort().to_list() for r in ("train", "validation", "test")
        }
        placement = resolve_placement("auto", None)
        config = finetune.PROFILES["demo"]
        config = replace(
            config,
            cross_attention=args.cross_attention,
            dev_measure="nDCG@10",
            train=replace(
                config.train,
                epochs=2,
                max_steps=None,
                lr=CRANFIELD_CROSS_ENCODER_LR,
                device=placement.device,
                bf16=placement.bf16,
            ),
        )

        def ndcg(model, role: str) -> float:
            wanted = pl.Series(ids[role], dtype=pl.String).implode()
            scorer = CrossEncoderScorer(
                model, batch_size=config.score_batch_size, device=placement.device, bf16=placement.bf16
            )
            run = rerank(
                inputs.bm25.filter(pl.col("query_id").is_in(wanted)),
                inputs.queries,
                inputs.corpus,
                scorer,
                RerankConfig(depth=config.dev_depth, run_name="reranked"),
            )
            return round(mean_measure(run, inputs.qrels, ids[role]), 3)

        bm25 = top_k(inputs.bm25, config.dev_depth)
        print(f"fold {args.fold}: {', '.join(f'{r} {len(v)}' for r, v in ids.items())} queries; {placement}")
        print(
            "BM25 validation / test",
            *(round(mean_measure(bm25, inputs.qrels, ids[r]), 3) for r in ("validation", "test")),
        )
        model = finetune.load_model("", config)
        print(f"{args.cross_attention} start validation / test", ndcg(model, "validation"), ndcg(model, "test"))
        if not args.train:
            return
        pairs = finetune.training_pairs(inputs.bm25, inputs.qrels, ids["train"], config)
        evaluate = finetune.dev_evaluator(
            inputs.bm25, inputs.queries, inputs.corpus, inputs.qrels, ids["validation"], config
        )
        gates = []

        def on_log(step: int, logs: dict) -> None:
            if model.gate_values() is not None and step % 10 == 0:
                gates.append((step, [round(g, 3) for g in model.gate_values()]))

        started = time.monotonic()
        tuned = finetune.fine_tune(
            model,
            inputs.queries,
            inputs.corpus,
            pairs,
            config,
            Path(folder) / "checkpoints",
            evaluate=evaluate,
            on_log=on_log,
        )
        print(
            f"trained {tuned.train.steps} steps in {time.monotonic() - started:.0f} s, loss "
            f"{tuned.train.loss_curve[0]:.3f} -> {tuned.train.loss_curve[-1]:.3f}"
        )
        print(
            "validation: start",
            round(tuned.start_score, 3),
            "epochs",
            [round(s, 3) for s in tuned.train.dev_scores],
            "kept:",
            tuned.chosen,
        )
        if gates:
            print("gates every 10 steps", gates)
            print("kept gates", [round(g, 3) for g in model.gate_values()])
        print("kept validation / test", ndcg(model, "validation"), ndcg(model, "test"))


if __name__ == "__main__":
    main()
