"""Any training as a torchrun job: one function every process runs, its inputs in a folder.

The shared mechanism behind every training asset's distributed path (neural Model 1, BERT-Model1,
BERT-vanilla, the neural baselines, the CET lab, the PHP ablations and Table 3 baselines; the PHP
stages and the cross-encoders have jobs of their own, `php.stage_job` and `finetune_job`):

`write_job(folder, target, *, values, frames=None, device="cpu")` writes `job.json` (`target`, a
"package.module:function" name; `values`, JSON; the device the process group is for) and each frame
of `frames` as `<name>.parquet` (a LazyFrame is streamed). Put `folder` on the directory every node
mounts.

`python -m dagster_ir.neural.train_job FOLDER`, run by every process of torchrun
(`dagster_ir.neural.distributed.torchrun_command`), joins the process group, imports `target` and
calls it with a `Job` (the values, the frames, `on_log` appending rank 0's per-step metrics to
$DAGSTER_IR_METRICS). The function does what the asset would do in its own process: every process
runs it whole, and the shared loop (`training.train`) gives each process its share of every global
batch (DDP), so the training is the one process's, up to float rounding. What the function writes
outside the loop it writes on rank 0 only (`training.on_rank_zero`), and what it does after training
(scoring validation or test queries) every process repeats on the same weights. It returns a dict:
rank 0 writes its frames as `result-<name>.parquet` and the rest (JSON values) as `result.json`;
`read_result(folder)` gives the dict back. A relaunched job resumes from the checkpoint folders the
function trains into, as in one process.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from dagster_ir.storage.atomic import write_text_atomic

JOB_FILE = "job.json"
RESULT_FILE = "result.json"
RESULT_FRAME = "result-{}.parquet"


@dataclass(frozen=True)
class Job:
    """What a job function reads: its values, its frames and the metrics logger."""

    folder: Path
    values: dict[str, Any]

    def frame(self, name: str) -> pl.DataFrame:
        return pl.read_parquet(self._path(name))

    def lazy(self, name: str) -> pl.LazyFrame:
        return pl.scan_parquet(self._path(name))

    def _path(self, name: str) -> Path:
        path = self.folder / f"{name}.parquet"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: the job has no frame {name!r}")
        return path

    @property
    def on_log(self) -> Callable[[int, dict], None] | None:
        from dagster_ir.neural.distributed import metrics_logger

        return metrics_logger()


def _resolve(target: str) -> Callable[[Job], dict]:
    module, _, name = target.partition(":")
    if not module or not name:
        raise ValueError(f"train_job: target must be 'package.module:function', got {target!r}")
    return getattr(importlib.import_module(module), name)


def write_job(
    folder: str | os.PathLike[str],
    target: str,
    *,
    values: Mapping[str, Any],
    frames: Mapping[str, pl.DataFrame | pl.LazyFrame] | None = None,
    device: str = "cpu",
) -> Path:
    """Write a job (see the module docstring); `target` must name an importable function."""
    _resolve(target)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / RESULT_FILE).unlink(missing_ok=True)
    for old in folder.glob(RESULT_FRAME.format("*")):
        old.unlink()
    for name, frame in (frames or {}).items():
        if isinstance(frame, pl.LazyFrame):
            frame.sink_parquet(folder / f"{name}.parquet")
        else:
            frame.write_parquet(folder / f"{name}.parquet")
    job = {"target": target, "device": device, "values": dict(values)}
    write_text_atomic(folder / JOB_FILE, json.dumps(job, indent=1, default=str))
    return folder


def read_result(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """What the job function returned (frames and JSON values); a clear error when the job left none."""
    folder = Path(folder)
    path = folder / RESULT_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the training job wrote no result (see torchrun's output)")
    values = json.loads(path.read_text(encoding="utf-8"))
    for name in values.pop("__frames__", []):
        values[name] = pl.read_parquet(folder / RESULT_FRAME.format(name))
    return values


def run_job(folder: str | os.PathLike[str]) -> None:
    """One process's part of the job in `folder` (under torchrun: every process calls it)."""
    import torch

    from dagster_ir.neural.training import init_distributed, world

    folder = Path(folder)
    job = json.loads((folder / JOB_FILE).read_text(encoding="utf-8"))
    init_distributed(job["device"])
    returned = _resolve(job["target"])(Job(folder, job["values"]))
    if world()[0] == 0:
        frames = {k: v for k, v in returned.items() if isinstance(v, pl.DataFrame)}
        for name, frame in frames.items():
            frame.write_parquet(folder / RESULT_FRAME.format(name))
        values = {k: v for k, v in returned.items() if k not in frames}
        write_text_atomic(folder / RESULT_FILE, json.dumps({**values, "__frames__": sorted(frames)}))
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    run_job(sys.argv[1])
