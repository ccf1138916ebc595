"""Cross-encoder fine-tuning examples/s: our loop (`finetune.fine_tune`, what the `cross_encoder` asset
runs) against sentence-transformers' `CrossEncoderTrainer` and against a plain PyTorch loop over the
transformers model, at the same model, data order, batch, lengths, loss, optimizer and precision.

The model: the bundled all-MiniLM-L6-v2 with a seeded one-output [CLS] head (`head="cls"`: the head
sentence-transformers' `CrossEncoder` has), written once by `CrossEncoder.save` with dropout set to 0
so that every arm computes the same function and the loss curves can be compared step by step; each
arm loads that folder afresh. The data: `--batch-size * --steps` (query, positive, negative)
triples - the first Cranfield queries of at most 32 tokens (so that our truncation and
sentence-transformers' give the same pairs), each positive a judged-relevant abstract and each
negative a seeded draw (title + text), or seeded synthetic text when the Cranfield folder is absent - in the
order our loop draws its batches (seed `--seed`); sentence-transformers reads them in that order (its
batch sampler made sequential) and the plain loop too.

Same settings everywhere: fp32 on the CPU, `--threads` torch threads (default 1), batch `--batch-size`
examples of 1 positive + 1 negative, the query cut to 32 tokens and the pair to `--max-length` (96:
the demo profile's), LCE (cross-entropy over each example's [positive, negative] scores:
sentence-transformers' `MultipleNegativesRankingLoss` with no in-batch negatives, scale 1 and no
activation), torch's fused AdamW (lr 2e-4, weight decay 0.1 on matrices, betas and eps as torch's;
the transformers Trainer's default optimizer), linear decay without warm-up, gradient norm clipped
to 1. What each arm's clock covers: ours the `fine_tune` call (tokenising once, training, the
resumable checkpoint it writes at the end, a few CPU-seconds), sentence-transformers `trainer.train()`
(it tokenises every batch as it goes and saves nothing), the plain loop tokenising once then the
steps (transformers' full forward, one padded pass a step). What ours does that the others do not,
each keeping the loss within float rounding: the last layer computed for [CLS] alone (the head reads
nothing else), and each step's pairs scored in groups of similar length, each padded to its own
longest (at max length 96 nearly every Cranfield pair is full, so this saves little here; it does
with longer limits or shorter texts).
Each arm runs `--repeat` times, alternating which goes first, and the run with the least CPU time is
kept. The ratios are of examples per CPU-second of this process (every thread's, tokenisers'
included): with one torch thread on a quiet machine that is the wall clock's examples/s, and on a
shared machine it is what the wall clock cannot give, since there the wall clock times the other
users too (the wall-clock ratio is printed as well, and the load average; figures measured under
load are indicative only).

Printed: examples/s of each arm, the per-step loss of each and the largest difference between ours
and each other arm's (within float rounding when the arms compute the same thing; a difference that
grows over the steps would be a bug), then the ratios (`ratios.print_ratio`).

    .venv/bin/python benchmarks/train_speed.py [--steps 6] [--batch-size 8] [--max-length 96]
        [--threads 1] [--repeat 2] [--cranfield ../shared/data/cranfield]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl
import torch
from ratios import print_ratio  # benchmarks/ratios.py: the line format make bench reads

from dagster_ir.neural.cross_encoder import CrossEncoder
from dagster_ir.neural.finetune import FineTuneConfig, fine_tune, finetune_examples
from dagster_ir.neural.training import TrainConfig, shuffled_batches

DEFAULT_CRANFIELD = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "cranfield"
MAX_QUERY_LENGTH = 32
_WORDS = (
    "flow boundary layer wing pressure shock wave heat transfer laminar turbulent supersonic subsonic drag "
    "lift body surface velocity temperature model theory experimental results method solution"
).split()


def cranfield_data(directory: Path, n: int, seed: int) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(queries, corpus, negatives): n (query, relevant abstract) pairs, each with one seeded negative."""
    from dagster_ir.collections.cranfield import read_cranfield
    from dagster_ir.neural.backbone import load_tokenizer

    corpus, queries, qrels = read_cranfield(directory)
    # queries of at most MAX_QUERY_LENGTH tokens: then our cut (the query to 32 tokens, the document to
    # what is left) and sentence-transformers' (the longer side trimmed first) give the same pairs
    lengths = [len(ids) for ids in load_tokenizer()(queries["text"].to_list(), add_special_tokens=False)["input_ids"]]
    short = queries.filter(pl.Series(lengths) <= MAX_QUERY_LENGTH)["query_id"].implode()
    judged = qrels.filter((pl.col("relevance") > 0) & pl.col("query_id").is_in(short))
    positives = judged.sort("query_id", "doc_id").unique("query_id", keep="first", maintain_order=True).head(n)
    rng = np.random.default_rng(seed)
    doc_ids = corpus["doc_id"].to_list()
    negatives = pl.DataFrame(
        {
            "query_id": positives["query_id"],
            "pos_doc_id": positives["doc_id"],
            "neg_doc_id": [doc_ids[i] for i in rng.integers(0, len(doc_ids), positives.height)],
            "neg_rank": [0] * positives.height,
            "sample_no": [0] * positives.height,
        },
        schema_overrides={"neg_rank": pl.Int32, "sample_no": pl.Int32},
    )
    return queries, corpus, negatives


def synthetic_data(n: int, seed: int) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    rng = np.random.default_rng(seed)
    queries = pl.DataFrame(
        {
            "query_id": [f"q{i}" for i in range(n)],
            "text": [" ".join(rng.choice(_WORDS, rng.integers(4, 12))) for _ in range(n)],
        }
    )
    corpus = pl.DataFrame(
        {
            "doc_id": [f"d{i}" for i in range(2 * n)],
            "title": [""] * (2 * n),
            "text": [" ".join(rng.choice(_WORDS, rng.integers(30, 200))) for _ in range(2 * n)],
        }
    )
    negatives = pl.DataFrame(
        {
            "query_id": queries["query_id"],
            "pos_doc_id": [f"d{2 * i}" for i in range(n)],
            "neg_doc_id": [f"d{2 * i + 1}" for i in range(n)],
            "neg_rank": [0] * n,
            "sample_no": [0] * n,
        },
        schema_overrides={"neg_rank": pl.Int32, "sample_no": pl.Int32},
    )
    return queries, corpus, negatives


def make_model_folder(work: Path, max_length: int) -> Path:
    """The bundled MiniLM with a seeded [CLS] head and no dropout, saved for every arm to load."""
    model = CrossEncoder.from_pretrained(
        "",
        max_length=max_length,
        max_query_length=MAX_QUERY_LENGTH,
        seed=0,
        head="cls",
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return model.save(work / "model")


def texts_in_order(queries, corpus, negatives, config: FineTuneConfig) -> list[tuple[str, str, str]]:
    """(query, positive, negative) texts in the order our loop's first epoch takes them."""
    examples, _ = finetune_examples(negatives, 1)
    batches = shuffled_batches(examples, config.train.batch_size, np.random.default_rng([config.train.seed, 0]))
    query_text = dict(zip(queries["query_id"], queries["text"], strict=True))
    docs = corpus.select("doc_id", text=pl.concat_str(["title", "text"], separator=" ").str.strip_chars())
    doc_text = dict(zip(docs["doc_id"], docs["text"], strict=True))
    return [
        (query_text[e.query_id], doc_text[e.pos_doc_id], doc_text[e.neg_doc_ids[0]]) for batch in batches for e in batch
    ]


class Clock:
    """Wall seconds and this process's CPU seconds (every thread's) since it was made."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def read(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall, time.process_time() - self.cpu


def run_ours(folder: Path, data, config: FineTuneConfig, work: Path) -> tuple[float, float, list[float]]:
    queries, corpus, negatives = data
    model = CrossEncoder.from_pretrained(str(folder))
    checkpoints = Path(tempfile.mkdtemp(dir=work))
    clock = Clock()
    tuned = fine_tune(model, queries, corpus, negatives, config, checkpoints)
    return *clock.read(), tuned.train.loss_curve


def run_sentence_transformers(
    folder: Path, triples, config: FineTuneConfig, work: Path
) -> tuple[float, float, list[float]]:
    from datasets import Dataset
    from sentence_transformers.cross_encoder import CrossEncoder as StCrossEncoder
    from sentence_transformers.cross_encoder import CrossEncoderTrainer, CrossEncoderTrainingArguments
    from sentence_transformers.cross_encoder.losses import MultipleNegativesRankingLoss
    from torch.utils.data import BatchSampler, SequentialSampler
    from transformers import PrinterCallback, TrainerCallback

    class InOrder(CrossEncoderTrainer):  # our batches, in our order: no shuffling
        def get_batch_sampler(self, dataset, batch_size, drop_last, *args, **kwargs):
            return BatchSampler(SequentialSampler(range(len(dataset))), batch_size, drop_last)

    losses: list[float] = []

    class Losses(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                losses.append(float(logs["loss"]))

    train = config.train
    model = StCrossEncoder(str(folder), device="cpu", max_length=config.max_length)
    dataset = Dataset.from_dict(
        {"query": [t[0] for t in triples], "positive": [t[1] for t in triples], "negative": [t[2] for t in triples]}
    )
    loss = MultipleNegativesRankingLoss(model, num_negatives=None, scale=1.0, activation_fn=torch.nn.Identity())
    loss.get_in_batch_negatives = lambda anchors, candidates: iter(())  # hard negatives only: LCE
    arguments = CrossEncoderTrainingArguments(
        output_dir=str(work / "st"),
        per_device_train_batch_size=train.batch_size,
        max_steps=train.max_steps,
        learning_rate=train.lr,
        weight_decay=train.weight_decay,
        warmup_steps=0,
        lr_scheduler_type="linear",
        max_grad_norm=train.max_grad_norm,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=train.seed,
        use_cpu=True,
        disable_tqdm=True,
        dataloader_drop_last=False,
    )
    trainer = InOrder(model=model, args=arguments, train_dataset=dataset, loss=loss, callbacks=[Losses()])
    trainer.remove_callback(PrinterCallback)  # its per-step prints
    clock = Clock()
    trainer.train()
    return *clock.read(), losses


def run_plain(folder: Path, triples, config: FineTuneConfig) -> tuple[float, float, list[float]]:
    """transformers' model and tokenizer, tokenised once, then the textbook loop."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    train = config.train
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForSequenceClassification.from_pretrained(str(folder))
    model.train()
    decay = [p for p in model.parameters() if p.ndim >= 2]
    rest = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": train.weight_decay}, {"params": rest, "weight_decay": 0.0}],
        lr=train.lr,
        fused=True,
    )
    total = train.max_steps
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, (total - step) / total))
    clock = Clock()
    query = tokenizer([t[0] for t in triples], add_special_tokens=False)["input_ids"]
    docs = tokenizer([d for t in triples for d in t[1:]], add_special_tokens=False)["input_ids"]
    losses = []
    for step in range(train.max_steps):
        rows = range(step * train.batch_size, (step + 1) * train.batch_size)
        pairs = [(query[r][:MAX_QUERY_LENGTH], docs[2 * r + k]) for r in rows for k in (0, 1)]
        cut = [(q, d[: config.max_length - len(q) - 3]) for q, d in pairs]
        encoded = [[tokenizer.cls_token_id, *q, tokenizer.sep_token_id, *d, tokenizer.sep_token_id] for q, d in cut]
        types = [[0] * (len(q) + 2) + [1] * (len(d) + 1) for q, d in cut]
        width = max(map(len, encoded))
        ids = torch.tensor([e + [tokenizer.pad_token_id] * (width - len(e)) for e in encoded])
        mask = torch.tensor([[1] * len(e) + [0] * (width - len(e)) for e in encoded])
        type_ids = torch.tensor([t + [0] * (width - len(t)) for t in types])
        scores = model(input_ids=ids, attention_mask=mask, token_type_ids=type_ids).logits.view(-1, 2)
        loss = torch.nn.functional.cross_entropy(scores, torch.zeros(len(rows), dtype=torch.long))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), train.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    return *clock.read(), losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=96)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: as torch set them)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cranfield", type=Path, default=DEFAULT_CRANFIELD)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    n = args.steps * args.batch_size
    config = FineTuneConfig(
        n_negatives=1,
        max_length=args.max_length,
        max_query_length=MAX_QUERY_LENGTH,
        use_title=True,
        train=TrainConfig(
            lr=2e-4,
            warmup_ratio=0.0,
            weight_decay=0.1,
            epochs=1,
            batch_size=args.batch_size,
            max_steps=args.steps,
            seed=args.seed,
        ),
    )
    cranfield = (args.cranfield / "cran.qry").is_file()
    data = cranfield_data(args.cranfield, n, args.seed) if cranfield else synthetic_data(n, args.seed)
    if data[2].height < n:
        parser.error(f"only {data[2].height} training examples for {args.steps} steps of {args.batch_size}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        folder = make_model_folder(work, args.max_length)
        triples = texts_in_order(*data, config)
        arms = {
            "ours": lambda: run_ours(folder, data, config, work),
            "sentence-transformers": lambda: run_sentence_transformers(folder, triples, config, work),
            "plain PyTorch": lambda: run_plain(folder, triples, config),
        }
        best: dict[str, tuple[float, float, list[float]]] = {}
        for round_no in range(args.repeat):
            for name in list(arms) if round_no % 2 == 0 else list(reversed(arms)):
                wall, cpu, losses = arms[name]()
                if name not in best or cpu < best[name][1]:
                    best[name] = (wall, cpu, losses)
    print(
        f"fine-tuning: {n} {'Cranfield' if cranfield else 'synthetic'} examples (1 positive + 1 negative), "
        f"{args.steps} steps of {args.batch_size}, max length {args.max_length}, fp32, torch threads "
        f"{torch.get_num_threads()}, best of {args.repeat} by CPU time, load {os.getloadavg()[0]:.1f}"
    )
    ours_wall, ours_cpu, our_losses = best["ours"]
    for name, (wall, cpu, losses) in best.items():
        gap = max(abs(a - b) for a, b in zip(our_losses, losses, strict=True)) if name != "ours" else 0.0
        print(
            f"{name:22s} {n / cpu:7.2f} examples per CPU-second ({cpu:.2f} CPU-s), {n / wall:7.2f} examples/s "
            f"wall ({wall:.2f} s); loss {' '.join(f'{v:.4f}' for v in losses)}"
            + (f"; largest |loss - ours| {gap:.1e}" if name != "ours" else "")
        )
    # judged on CPU time: on a shared machine the wall clock measures the other users as much as the code
    print_ratio(
        "training examples/s, ours / sentence-transformers CrossEncoderTrainer (fp32)",
        best["sentence-transformers"][1] / ours_cpu,
    )
    print_ratio("training examples/s, ours / plain PyTorch loop (fp32)", best["plain PyTorch"][1] / ours_cpu)
    print_ratio(
        "training examples/s (wall clock), ours / sentence-transformers CrossEncoderTrainer (fp32)",
        best["sentence-transformers"][0] / ours_wall,
    )


if __name__ == "__main__":
    main()
