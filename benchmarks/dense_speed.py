"""Speed of our `dense.encode` against `SentenceTransformer.encode`, same model, same inputs.

Both embed the same passages (the first `--passages` Cranfield abstracts, title + text, or seeded
synthetic passages when the Cranfield folder is absent) with the bundled all-MiniLM-L6-v2, the same
batch size and maximum length, in this process, on the CPU with torch's thread setting as it is.
Both models are loaded and warmed up before the clock starts; each side then runs `--repeat`
times, the two alternating which goes first, and the best time is kept (the machine is shared).
The largest difference between the two embeddings is printed too: a speed-up that changed the
vectors would not count.

    .venv/bin/python benchmarks/dense_speed.py [--passages 1000] [--batch-size 64]
        [--max-length 256] [--repeat 3] [--cranfield ../shared/data/cranfield]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from ratios import print_ratio  # benchmarks/ratios.py: the line format make bench reads

from dagster_ir.collections.cranfield import read_cranfield_docs
from dagster_ir.retrieval.dense import DenseConfig, encode, passage_text

DEFAULT_CRANFIELD = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "cranfield"
_WORDS = (
    "flow boundary layer wing pressure shock wave heat transfer laminar turbulent supersonic "
    "subsonic drag lift body surface velocity temperature model theory experimental results "
    "method solution equation number mach reynolds plate cylinder cone jet nozzle"
).split()


def cranfield_passages(directory: Path, n: int) -> list[str]:
    """Title + text of the first `n` Cranfield documents, as `encode_corpus_to` embeds them."""
    corpus = read_cranfield_docs(directory / "cran.all.1400").head(n)
    return corpus.select(passage=passage_text())["passage"].to_list()


def synthetic_passages(n: int, seed: int = 0) -> list[str]:
    """`n` passages of 50-200 words from a small aeronautics word list."""
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(_WORDS, rng.integers(50, 201))) for _ in range(n)]


def best_of_alternating(
    first: Callable[[], np.ndarray], second: Callable[[], np.ndarray], repeat: int
) -> tuple[tuple[float, np.ndarray], tuple[float, np.ndarray]]:
    """Best time (and last result) of each function over `repeat` rounds, alternating who goes first."""
    best: list[tuple[float, np.ndarray]] = [(float("inf"), np.empty(0)), (float("inf"), np.empty(0))]
    functions = [first, second]
    for round_no in range(repeat):
        for which in (0, 1) if round_no % 2 == 0 else (1, 0):
            start = time.perf_counter()
            result = functions[which]()
            best[which] = (min(best[which][0], time.perf_counter() - start), result)
    return best[0], best[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3, help="report the best of this many calls")
    parser.add_argument("--cranfield", type=Path, default=DEFAULT_CRANFIELD)
    args = parser.parse_args()

    if args.cranfield.is_dir():
        source, texts = "Cranfield abstracts", cranfield_passages(args.cranfield, args.passages)
    else:
        source, texts = "synthetic passages", synthetic_passages(args.passages)
    config = DenseConfig(batch_size=args.batch_size, max_length=args.max_length)

    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(config.model, device=config.device)
    reference.max_seq_length = config.max_length

    def theirs(batch: list[str]) -> np.ndarray:
        return reference.encode(batch, batch_size=config.batch_size, show_progress_bar=False)

    encode(texts[:8], config), theirs(texts[:8])  # load and warm up both
    (ours_s, ours), (theirs_s, reference_vectors) = best_of_alternating(
        lambda: encode(texts, config), lambda: theirs(texts), args.repeat
    )
    tokens = reference.tokenizer(texts, truncation=True, max_length=config.max_length)["input_ids"]
    n_tokens = sum(len(ids) for ids in tokens)
    print(
        f"{len(texts)} {source} ({n_tokens / len(texts):.0f} tokens each on average), batch size "
        f"{config.batch_size}, max length {config.max_length}, torch threads {torch.get_num_threads()}, "
        f"best of {args.repeat}, load {os.getloadavg()[0]:.1f}"
    )
    print(f"ours  dense.encode                {len(texts) / ours_s:8.1f} passages/s ({ours_s:.2f} s)")
    print(f"      SentenceTransformer.encode  {len(texts) / theirs_s:8.1f} passages/s ({theirs_s:.2f} s)")
    print(f"ours/sentence-transformers (passages/s) = {theirs_s / ours_s:.2f}")
    print(f"largest |difference| of an embedding coordinate: {np.abs(ours - reference_vectors).max():.1e}")
    print_ratio("dense passages/s, ours / sentence-transformers", theirs_s / ours_s)


if __name__ == "__main__":
    main()
