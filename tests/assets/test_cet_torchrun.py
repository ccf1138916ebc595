"""The cet asset trains the lab under torchrun when asked for two processes: two gloo processes on the
CPU give the rankers (naive's R, CET's R and S) one process gives, within float tolerance, with the
same steps and dev MRR@10, and the job's metrics reach the materialization."""

from pathlib import Path

import dagster as dg
import pytest
import torch
from safetensors.torch import load_file
from test_cet_assets import _collection

from assets.defs.cet import CetConfig, SparseQrelsConfig, cet, sparse_qrels
from assets.lib.resources import DataDirResource
from dagster_ir.methods.cet.model import CoupledRanker

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
UNIT = "wiki-car/seed-0"


def _settings(backbone: str, nproc: int) -> CetConfig:
    # 3 training queries in one global batch of 3 (every process gets a share), 2 epochs
    return CetConfig(
        backbone=backbone,
        methods=["naive", "cet"],
        taus=[],
        layers=0,
        max_length=32,
        batch_size=3,
        epochs=2,
        lr=5e-3,
        negative_depth=4,
        device="cpu",
        bf16=False,
        torchrun={"nproc_per_node": nproc, "max_restarts": 0, "relaunches": 0},
        select_start=False,  # the trained weights are what two processes must equal, even where the start scores higher
    )


def _train(root: Path, backbone: str, nproc: int):
    c = _collection()
    labels = sparse_qrels(
        dg.build_asset_context(partition_key="wiki-car"),
        SparseQrelsConfig(pool_depth=2),
        c["candidate_runs"],
        c["qrels"],
        c["query_splits"],
    )
    context = dg.build_asset_context(partition_key=UNIT)
    trained = cet(
        context,
        _settings(backbone, nproc),
        DataDirResource(path=str(root)),
        c["candidate_runs"],
        c["queries"],
        c["corpus"].lazy(),
        c["qrels"],
        labels,
        c["query_splits"],
    ).value
    metadata = context.get_output_metadata("result")
    return trained, {k: getattr(v, "value", v) for k, v in (metadata or {}).items()}


def _flat(weights: dict) -> torch.Tensor:
    """Every weight but the score head's bias: a pairwise loss cancels it (R(q, d+) - R(q, d-)), so its
    gradient is float rounding, which Adam scales to steps of up to lr of either sign in either run."""
    return torch.cat([weights[k].flatten().double() for k in sorted(weights) if k != "classifier.bias"])


def test_two_gloo_processes_train_the_lab_one_process_trains(backbone, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    one, _ = _train(tmp_path / "one", backbone, 1)
    two, metadata = _train(tmp_path / "two", backbone, 2)
    assert metadata["world"] == "1 x 2" and metadata["torchrun_attempts"] == 1
    assert metadata["logged_steps"] == sum(two["steps"])  # rank 0's metrics of every ranker came back
    assert one["run_name"].to_list() == two["run_name"].to_list() == ["naive", "cet"]
    assert one["steps"].to_list() == two["steps"].to_list() == [2, 2]
    assert one["queries"].to_list() == two["queries"].to_list() and one["pairs"].to_list() == two["pairs"].to_list()
    for a, b in zip(one["dev_mrr10"], two["dev_mrr10"], strict=True):
        assert a == pytest.approx(b, abs=1e-6)
    assert not list((tmp_path / "two" / "files" / "cet" / "jobs").rglob("job.json"))  # the job folder is gone
    domain = _settings(backbone, 1).to_domain()
    start = _flat(
        CoupledRanker.build(domain.cet.ranker, coupled=False, seed=domain.cet.train.seed).relevance.model.state_dict()
    )
    folders = [("naive", "relevance"), ("cet", "relevance"), ("cet", "selection")]
    for ranker, part in folders:
        weights = {
            side: _flat(load_file(str(tmp_path / side / "files" / "cet" / UNIT / ranker / part / "model.safetensors")))
            for side in ("one", "two")
        }
        if part == "relevance":  # R starts where every ranker's R starts
            moved = (weights["one"] - start).norm()
            assert moved > 0
        assert (weights["two"] - weights["one"]).norm() < 0.01 * moved, (ranker, part)  # up to float rounding
