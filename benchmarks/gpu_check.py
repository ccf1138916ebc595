"""The GPU check: the Cranfield reproduction for one seed under the paper profile, on this machine's GPU.

    python benchmarks/gpu_check.py [--cranfield PATH] [--data DIR] [--seed 0] [--markdown]

It writes a config with one collection, `cranfield` (the original files under `--cranfield`, else
ir_datasets' `cranfield`, downloaded once), 5-fold cross-validation and the one seed, then runs
`dagster-ir reproduce --collection cranfield --profile paper` with it: every method's assets are
materialized with the papers' settings (bert-base-uncased, fetched from the Hugging Face hub once;
PHP's pre-training on the registered dump, gensim's bundled sample unless one was added), each
neural model on the GPU in bfloat16 where the GPU has it; then it prints each paper's table and the
time every asset took. Everything stays in `--data` (default ./data-gpu-check): a second run
materializes only what is missing or stale, so an interrupted check resumes.

On a machine without CUDA it stops at once with exit status 2 and says so: the paper profile on a
CPU takes days. GHRM, Model 1's EM and the interaction baselines' word-vector models run on the CPU
whatever the machine (see "Running on GPUs" in the documentation for the expected costs).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

DEFAULT_DATA = Path("data-gpu-check")


def gpu_summary() -> str | None:
    """One line naming the GPU(s), or None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    bf16 = "bf16" if torch.cuda.is_bf16_supported() else "no bf16 (fp32)"
    return f"{len(names)} GPU(s): {', '.join(names)}; {bf16}; torch {torch.__version__}, CUDA {torch.version.cuda}"


def write_config(path: Path, cranfield: Path | None, seed: int) -> Path:
    """The check's dagster-ir.yaml: Cranfield alone, 5-fold cross-validation, one seed."""
    source = (
        f"    kind: cranfield\n    path: {cranfield.resolve()}\n"
        if cranfield
        else "    kind: irds\n    dataset: cranfield\n"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"collections:\n  cranfield:\n{source}    protocol: cv\n    seeds: [{seed}]\n", encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--cranfield", type=Path, help="folder with cran.all.1400, cran.qry, cranqrel (default: ir_datasets' cranfield)"
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help=f"data directory (default {DEFAULT_DATA})")
    parser.add_argument("--seed", type=int, default=0, help="the one seed offset (default 0)")
    parser.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    args = parser.parse_args(argv)
    summary = gpu_summary()
    if summary is None:
        import torch

        print(
            f"gpu_check: no CUDA device here (torch {torch.__version__}: torch.cuda.is_available() is False). "
            "Run it on a machine with an NVIDIA GPU and driver, with a CUDA build of torch (the same version, from "
            "the CUDA index https://pytorch.org/get-started/locally/ names for your driver); the paper profile on a "
            "CPU takes days.",
            file=sys.stderr,
        )
        return 2
    if args.cranfield is not None and not (args.cranfield / "cran.all.1400").is_file():
        print(f"gpu_check: --cranfield {args.cranfield}: no cran.all.1400 there", file=sys.stderr)
        return 1
    print(summary, flush=True)
    os.environ["DAGSTER_IR_CONFIG"] = str(write_config(args.data / "dagster-ir.yaml", args.cranfield, args.seed))
    from assets.cli.main import main as cli

    command = ["--data", str(args.data), "reproduce", "--collection", "cranfield", "--profile", "paper"]
    return cli(command + (["--markdown"] if args.markdown else []))


if __name__ == "__main__":
    sys.exit(main())
