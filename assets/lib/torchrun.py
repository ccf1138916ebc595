"""Training across machines from an asset: a training module under torchrun, watched by the asset.

`TorchrunSettings` is the launchpad's view of `dagster_ir.neural.distributed.LaunchConfig`;
`run_torchrun(context, settings, module, args, metrics_path)` starts torchrun on the node the step
runs on, forwards its output (debug level) and rank 0's per-step metrics (info level) to the run's
log in the UI, relaunches it after a failure (a lost node; training resumes from its checkpoint)
and records attempts, steps, the last loss and the loss curve in the materialization's metadata.
The other nodes of a multi-node job run the same command line (`torchrun_command`), e.g. as a
Kubernetes Job or a SLURM array, with the same `rdzv_endpoint` and `rdzv_id`.

`run_train_job(context, settings, folder, target, values=..., frames=..., device=..., default_nproc=...)`
is the distributed path of most training assets: it writes a `dagster_ir.neural.train_job` job into
`folder` (on the shared data directory), runs it under torchrun, reads the job function's result
back and removes the folder; it returns the result and the launch's metadata.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl

from dagster_ir.neural import train_job
from dagster_ir.neural.distributed import LaunchConfig, LaunchResult, launch, torchrun_command


class TorchrunSettings(dg.Config):
    """Maps onto `dagster_ir.neural.distributed.LaunchConfig` field by field."""

    nnodes: str = "1"  # "N" or "MIN:MAX"
    nproc_per_node: int = 0  # 0: the default the caller gives (a training asset: one per GPU of the host)
    rdzv_endpoint: str = ""  # "host:port"; "" = this host alone
    rdzv_id: str = ""  # "" = the run id (nodes of one job share it)
    max_restarts: int = 1
    relaunches: int = 1

    def to_domain(self, run_id: str, default_nproc: int = 1) -> LaunchConfig:
        return LaunchConfig(
            nnodes=self.nnodes,
            nproc_per_node=self.nproc_per_node or default_nproc,
            rdzv_endpoint=self.rdzv_endpoint,
            rdzv_id=self.rdzv_id or run_id,
            max_restarts=self.max_restarts,
            relaunches=self.relaunches,
        )


def is_distributed(settings: TorchrunSettings, default_nproc: int = 1) -> bool:
    """Whether `settings` ask for more than one training process (else the asset trains in its own process)."""
    return settings.nnodes != "1" or (settings.nproc_per_node or default_nproc) > 1


def run_torchrun(
    context: dg.AssetExecutionContext,
    settings: TorchrunSettings,
    module: str,
    args: list[str],
    metrics_path: Path,
    *,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    default_nproc: int = 1,
    add_metadata: bool = True,
) -> LaunchResult:
    """Run `module` under torchrun; raise `dg.Failure` (with torchrun's last lines) if every attempt fails.

    `default_nproc`: the processes per node when the settings leave `nproc_per_node` 0; `add_metadata`
    False leaves the materialization's metadata to the caller (`launch_metadata`)."""
    config = settings.to_domain(context.run_id, default_nproc)
    command = torchrun_command(config, module, args)
    context.log.info(f"torchrun: {' '.join(command)}")
    tail: list[str] = []

    def on_output(line: str) -> None:
        tail[:] = [*tail[-39:], line]
        context.log.debug(line)

    def on_metrics(record: dict) -> None:
        values = ", ".join(f"{k} {v:.4g}" for k, v in record.items() if k != "step" and isinstance(v, float))
        context.log.info(f"step {record.get('step')}: {values}")

    result = launch(
        command,
        metrics_path,
        relaunches=config.relaunches,
        env=env,
        on_output=on_output,
        on_metrics=on_metrics,
        timeout=timeout,
    )
    metadata = launch_metadata(config, result)
    if not result.ok:
        raise dg.Failure(
            description=f"torchrun failed {len(result.returncodes)} times (exit codes {result.returncodes})",
            metadata={**metadata, "output_tail": dg.MetadataValue.text("\n".join(tail))},
        )
    if add_metadata:
        context.add_output_metadata(metadata)
    return result


def launch_metadata(config: LaunchConfig, result: LaunchResult) -> dict:
    """Attempts, exit codes, world, seconds, logged steps and the loss curve of a torchrun launch."""
    losses = [r["loss"] for r in result.metrics if "loss" in r]
    metadata = {
        "torchrun_attempts": len(result.returncodes),
        "torchrun_exit_codes": str(result.returncodes),
        "world": f"{config.nnodes} x {config.nproc_per_node}",
        "launch_seconds": round(result.seconds, 1),
        "logged_steps": len(result.metrics),
    }
    if losses:
        metadata["last_loss"] = losses[-1]
        metadata["loss_curve"] = dg.MetadataValue.json(losses)
    return metadata


def run_train_job(
    context: dg.AssetExecutionContext,
    settings: TorchrunSettings,
    folder: Path,
    target: str,
    *,
    values: Mapping[str, Any],
    frames: Mapping[str, pl.DataFrame | pl.LazyFrame] | None = None,
    device: str = "cpu",
    default_nproc: int = 1,
    env: dict[str, str] | None = None,
) -> tuple[dict[str, Any], dict]:
    """Run `target` (a "module:function" taking a `train_job.Job`) under torchrun; (its result, launch metadata).

    The job folder is removed once its result is read; the checkpoint folders the function trains
    into are the caller's (a relaunch resumes from them)."""

    job = train_job.write_job(folder, target, values=values, frames=frames, device=device)
    launched = run_torchrun(
        context,
        settings,
        train_job.__name__,
        [str(job)],
        job / "metrics.jsonl",
        default_nproc=default_nproc,
        add_metadata=False,
        env=env,
    )
    result = train_job.read_result(job)
    shutil.rmtree(job, ignore_errors=True)
    metadata = launch_metadata(settings.to_domain(context.run_id, default_nproc), launched)
    return result, {k: v for k, v in metadata.items() if k != "loss_curve"}
