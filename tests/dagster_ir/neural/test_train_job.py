"""The generic torchrun job: inputs written, the function run (here in one process), its result read back."""

import polars as pl
import pytest

from dagster_ir.neural import train_job
from dagster_ir.neural.training import on_rank_zero


def doubling(job: train_job.Job) -> dict:
    """A job function: reads a frame eagerly and one lazily, returns values and a frame."""
    frame = job.frame("numbers")
    total = int(job.lazy("more").select(pl.col("x").sum()).collect().item())
    return {
        "rows": frame.height,
        "total": total,
        "factor": job.values["factor"],
        "doubled": frame.with_columns(pl.col("x") * job.values["factor"]),
    }


def missing_frame(job: train_job.Job) -> dict:
    return {"rows": job.frame("absent").height}


def test_a_job_round_trips_its_inputs_and_result(tmp_path):
    numbers = pl.DataFrame({"x": [1, 2, 3]})
    folder = train_job.write_job(
        tmp_path / "job",
        "test_train_job:doubling",
        values={"factor": 2},
        frames={"numbers": numbers, "more": pl.LazyFrame({"x": [10, 20]})},
    )
    train_job.run_job(folder)
    result = train_job.read_result(folder)
    assert result["rows"] == 3 and result["total"] == 30 and result["factor"] == 2
    assert result["doubled"]["x"].to_list() == [2, 4, 6]

    train_job.write_job(folder, "test_train_job:doubling", values={"factor": 3}, frames={"numbers": numbers})
    with pytest.raises(FileNotFoundError, match="wrote no result"):  # a rewritten job never reads an old result
        train_job.read_result(folder)
    assert not list(folder.glob("result-*.parquet"))


def test_bad_targets_and_missing_frames_fail_clearly(tmp_path):
    with pytest.raises(ValueError, match="'package.module:function'"):
        train_job.write_job(tmp_path / "a", "test_train_job.doubling", values={})
    with pytest.raises(AttributeError):
        train_job.write_job(tmp_path / "b", "test_train_job:no_such_function", values={})
    folder = train_job.write_job(tmp_path / "c", "test_train_job:missing_frame", values={})
    with pytest.raises(FileNotFoundError, match="no frame 'absent'"):
        train_job.run_job(folder)


def test_on_rank_zero_writes_in_one_process(tmp_path):
    path = tmp_path / "written.txt"
    assert on_rank_zero(path.write_text, "weights") == len("weights")
    assert path.read_text() == "weights"


def lossy_training(job: train_job.Job) -> dict:
    """A linear model trained by the shared loop; the last rank is lost once (os._exit) at step `lose_at`."""
    import dataclasses
    import os
    from pathlib import Path

    import torch

    from dagster_ir.neural.training import TrainConfig, shuffled_batches, train, world

    rank, world_size = world()
    data = job.frame("data")
    x, y = torch.tensor(data.select("a", "b").to_numpy(), dtype=torch.float32), torch.tensor(data["y"].to_numpy())
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    config = TrainConfig(lr=1e-2, warmup_ratio=0.0, epochs=2, batch_size=4, checkpoint_every=2, seed=3, device="cpu")
    marker, calls = Path(job.values["marker"]), [0]

    def loss_fn(wrapped, batch):
        calls[0] += 1
        if rank == world_size - 1 and calls[0] == job.values["lose_at"] and not marker.exists():
            marker.write_text("lost\n")
            os._exit(17)
        rows = torch.tensor(batch)
        return ((wrapped(x[rows]).squeeze(-1) - y[rows].float()) ** 2).mean(), {}

    result = train(
        model,
        lambda epoch, rng: shuffled_batches(list(range(data.height)), 4, rng),
        loss_fn,
        config,
        job.values["checkpoints"],
        on_log=job.on_log,
    )
    return {
        "train": dataclasses.asdict(result),
        "world": world_size,
        "weights": [float(v) for v in torch.cat([model.weight.flatten(), model.bias]).detach()],
    }


def _launch(root, lose_at: int):
    """The lossy job under torchrun (two gloo processes, no restarts inside torchrun, one relaunch)."""
    import os
    from pathlib import Path

    from dagster_ir.neural.distributed import LaunchConfig, launch, torchrun_command

    here = Path(__file__).resolve()
    env = {**os.environ, "PYTHONPATH": f"{here.parents[3]}{os.pathsep}{here.parent}", "OMP_NUM_THREADS": "1"}
    data = pl.DataFrame(
        {
            "a": [float(i % 5) for i in range(16)],
            "b": [float(i % 3) for i in range(16)],
            "y": [float(2 * (i % 5) - (i % 3)) for i in range(16)],
        }
    )
    values = {"marker": str(root / "lost"), "lose_at": lose_at, "checkpoints": str(root / "checkpoints")}
    folder = train_job.write_job(root / "job", "test_train_job:lossy_training", values=values, frames={"data": data})
    config = LaunchConfig(nproc_per_node=2, max_restarts=0, relaunches=1, monitor_interval=0.5)
    lines: list[str] = []
    launched = launch(
        torchrun_command(config, train_job.__name__, [str(folder)]),
        folder / "metrics.jsonl",
        relaunches=config.relaunches,
        env=env,
        on_output=lines.append,
        timeout=300,
    )
    assert launched.ok, "\n".join(lines[-40:])
    return launched, train_job.read_result(folder)


@pytest.mark.slow
def test_a_job_relaunched_after_a_lost_worker_resumes_to_the_uninterrupted_weights(tmp_path):
    """`launch` starts the lost job again: it reads its inputs from the job folder again and the loop
    resumes from the newest checkpoint, ending where an uninterrupted job ends, bit for bit."""
    whole, expected = _launch(tmp_path / "whole", 0)
    assert whole.returncodes == [0] and expected["world"] == 2 and expected["train"]["resumed_from"] == 0
    launched, result = _launch(tmp_path / "lossy", 6)
    assert (tmp_path / "lossy" / "lost").is_file()
    assert len(launched.returncodes) == 2 and launched.returncodes[0] != 0  # lost, then relaunched
    assert result["train"]["resumed_from"] == 4  # the newest checkpoint before step 6 (every 2 steps)
    assert result["train"]["steps"] == 8 and result["weights"] == expected["weights"]
