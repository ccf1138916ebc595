"""The tiny cross-encoder run of training_script.py under torchrun, with metrics and a lost worker.

    python -m torch.distributed.run ... torchrun_script.py --backbone DIR --checkpoints DIR --out DIR
        [--lose-worker-at STEP --marker FILE]

With --lose-worker-at, the last rank exits abruptly (os._exit, as a killed process would) as it
starts optimizer step STEP, once: the marker file records that it did. Rank 0 appends each step's
metrics to $DAGSTER_IR_METRICS and writes `weights.safetensors` and `result.json` into --out.
"""

import argparse
import json
import os
from pathlib import Path

from safetensors.torch import save_model
from training_script import examples

from dagster_ir.neural.cross_encoder import CrossEncoder, lce_loss
from dagster_ir.neural.distributed import metrics_logger
from dagster_ir.neural.training import TrainConfig, init_distributed, shuffled_batches, train, unwrap, world


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--backbone", "--checkpoints", "--out"):
        parser.add_argument(name, required=True)
    parser.add_argument("--lose-worker-at", type=int, default=0)
    parser.add_argument("--marker", default="")
    args = parser.parse_args()

    rank, world_size = init_distributed("cpu")
    model = CrossEncoder.from_pretrained(args.backbone, max_length=32, max_query_length=8, seed=1)
    data = examples()
    config = TrainConfig(
        lr=5e-3, warmup_ratio=0.1, weight_decay=0.01, epochs=2, batch_size=8, checkpoint_every=2, seed=3
    )
    calls = [0]

    def loss_fn(wrapped, batch):
        calls[0] += 1  # one micro-batch per step and rank
        if rank == world_size - 1 and calls[0] == args.lose_worker_at and not Path(args.marker).exists():
            Path(args.marker).write_text(f"lost at step {calls[0]}\n")
            os._exit(17)
        bare = unwrap(wrapped)
        pairs = [bare.encode_pair(*bare.tokenize([q, d])) for q, pos, negs in batch for d in (pos, *negs)]
        return lce_loss(wrapped(**bare.collate(pairs)).view(len(batch), -1)), {}

    result = train(
        model,
        lambda epoch, rng: shuffled_batches(data, config.batch_size, rng),
        loss_fn,
        config,
        args.checkpoints,
        on_log=metrics_logger(),
    )
    if world()[0] == 0:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        save_model(model, str(out / "weights.safetensors"))
        (out / "result.json").write_text(
            json.dumps(
                {
                    "loss_curve": result.loss_curve,
                    "steps": result.steps,
                    "resumed_from": result.resumed_from,
                    "world_size": world_size,
                }
            )
        )


if __name__ == "__main__":
    main()
