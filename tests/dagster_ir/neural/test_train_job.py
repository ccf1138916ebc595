"""The generic torchrun job: inputs written, the function run (here in one process), its result read back."""

import polars as pl
import pytest

from dagster_ir.neural import train_job
from dagster_ir.neural.training import on_rank_zero


def doubling(job: train_job.Job) -> dict:
    """A job function: reads a frame eagerly and one lazily, returns values and a frame."""
    frame = job.frame("numbers")
    total = int(job.lazy("more").select(pl.col("x").sum()).collect().item())
    return {"rows": frame.height, "total": total, "factor": job.values["factor"],
            "doubled": frame.with_columns(pl.col("x") * job.values["factor"])}


def missing_frame(job: train_job.Job) -> dict:
    return {"rows": job.frame("absent").height}


def test_a_job_round_trips_its_inputs_and_result(tmp_path):
    numbers = pl.DataFrame({"x": [1, 2, 3]})
    folder = train_job.write_job(tmp_path / "job", "test_train_job:doubling", values={"factor": 2},
                                 frames={"numbers": numbers, "more": pl.LazyFrame({"x": [10, 20]})})
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
