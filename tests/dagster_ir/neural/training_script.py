"""A tiny cross-encoder LCE training run, for the resume (SIGKILL) and DDP (torchrun) tests.

    python training_script.py --backbone DIR --checkpoints DIR --out DIR [--sleep S] [--dropout P]

Trains on synthetic (query, positive, negatives) text built from a fixed word list, then writes
`weights.safetensors` and `result.json` (loss curve) into --out on rank 0.
"""

import argparse
import json
import time
from pathlib import Path

from safetensors.torch import save_model

from dagster_ir.neural.cross_encoder import CrossEncoder, lce_loss
from dagster_ir.neural.training import TrainConfig, shuffled_batches, train, unwrap, world

WORDS = (
    "anarchism philosophy river mountain music opera physics chemistry algebra poetry "
    "football tennis planet comet bridge castle"
).split()


def examples(n: int = 32) -> list[tuple[str, str, list[str]]]:
    out = []
    for i in range(n):
        word = WORDS[i % len(WORDS)]
        negatives = [f"{WORDS[(i + k) % len(WORDS)]} and more text" for k in (3, 5, 7)]
        out.append((word, f"{word} is the topic of this document", negatives))
    return out


def main(argv: list[str] | None = None) -> None:
    """Parse `argv` (default: sys.argv) and train."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--backbone", required=True)
    parser.add_argument("--checkpoints", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--checkpoint-every", type=int, default=2)
    args = parser.parse_args(argv)

    model = CrossEncoder.from_pretrained(
        args.backbone,
        max_length=32,
        max_query_length=8,
        seed=1,
        hidden_dropout_prob=args.dropout,
        attention_probs_dropout_prob=args.dropout,
    )
    data = examples()
    config = TrainConfig(
        lr=5e-3,
        warmup_ratio=0.1,
        weight_decay=0.01,
        epochs=args.epochs,
        batch_size=8,
        checkpoint_every=args.checkpoint_every,
        seed=3,
    )

    def loss_fn(wrapped, batch):
        bare = unwrap(wrapped)
        pairs = [bare.encode_pair(*bare.tokenize([q, d])) for q, pos, negs in batch for d in (pos, *negs)]
        scores = wrapped(**bare.collate(pairs)).view(len(batch), -1)
        return lce_loss(scores), {}

    def on_log(step, logs):
        time.sleep(args.sleep)

    result = train(
        model,
        lambda epoch, rng: shuffled_batches(data, config.batch_size, rng),
        loss_fn,
        config,
        args.checkpoints,
        on_log=on_log,
    )
    if world()[0] == 0:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        save_model(model, str(out / "weights.safetensors"))
        (out / "result.json").write_text(
            json.dumps({"loss_curve": result.loss_curve, "steps": result.steps, "resumed_from": result.resumed_from})
        )


if __name__ == "__main__":
    main()
