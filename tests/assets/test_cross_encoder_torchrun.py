"""The cross_encoder asset trains under torchrun when asked for more than one process: two gloo
processes on the CPU give the model one process gives (the same global batches, within float
tolerance), and the job's metrics reach the materialization."""

from pathlib import Path

import dagster as dg
import polars as pl
import pytest
import torch
from safetensors.torch import load_file

from assets.defs.php import CrossEncoderSettings, cross_encoder
from assets.lib.resources import DataDirResource
from dagster_ir.neural.cross_encoder import CrossEncoder
from dagster_ir.schemas import NEGATIVES, QRELS, QUERY_SPLITS, RUN

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
TOPICS = [
    "solar panel energy",
    "river fish species",
    "roman road empire",
    "coffee brew bean",
    "volcano ash lava",
    "chess opening theory",
    "tennis serve court",
    "piano chord melody",
]
SPLITS = ["train/model"] * 6 + ["dev", "test"]


def _frames() -> dict:
    docs = [(f"d{t}-{j}", "", f"{topic} " * (j + 1) + "notes") for t, topic in enumerate(TOPICS) for j in range(3)]
    negatives = [(f"q{t}", f"d{t}-0", f"d{(t + k) % 8}-1", k, k - 1) for t in range(8) for k in (1, 2)]
    run = [
        (f"q{t}", f"d{t2}-{j}", float(30 - r), r + 1, "bm25")
        for t in range(8)
        for r, (t2, j) in enumerate([(t, 0), (t, 1), ((t + 1) % 8, 0), ((t + 2) % 8, 2)])
    ]
    empty = {"stage": pl.String, "path": pl.String}
    return {
        "queries": pl.DataFrame({"query_id": [f"q{t}" for t in range(8)], "text": TOPICS}),
        "corpus": pl.DataFrame(docs, schema=["doc_id", "title", "text"], orient="row").lazy(),
        "qrels": pl.DataFrame([(f"q{t}", f"d{t}-0", 1) for t in range(8)], schema=QRELS, orient="row"),
        "query_splits": pl.DataFrame(
            {"query_id": [f"q{t}" for t in range(8)], "split": SPLITS, "fold": [0] * 8}, schema=QUERY_SPLITS
        ),
        "negatives": pl.DataFrame(negatives, schema=NEGATIVES, orient="row"),
        "candidate_runs": pl.DataFrame(run, schema=RUN, orient="row"),
        "php_hp": pl.DataFrame({"stage": ["hp"], "path": ["unused"]}, schema=empty),
        "php_shp": pl.DataFrame({"stage": ["shp"], "path": ["unused"]}, schema=empty),
        "php_mrds": pl.DataFrame({"stage": ["mrds"], "path": ["unused"]}, schema=empty),
        "php_ablations": pl.DataFrame(schema={"variant": pl.String, "path": pl.String}),
        "php_baselines": pl.DataFrame(schema={"method": pl.String, "path": pl.String}),
    }


def _train(root: Path, backbone: str, nproc: int):
    config = CrossEncoderSettings(
        backbone=backbone,
        inits=["bert"],
        max_length=32,
        max_query_length=8,
        n_negatives=2,
        batch_size=4,
        epochs=2,
        lr=5e-3,
        device="cpu",
        bf16=False,
        torchrun={"nproc_per_node": nproc, "max_restarts": 0, "relaunches": 0},
    )
    context = dg.build_asset_context(partition_key="wiki-car/seed-0")
    manifest = cross_encoder(context=context, config=config, data=DataDirResource(path=str(root)), **_frames()).value
    weights = load_file(str(Path(manifest["path"][0]) / "model.safetensors"))
    metadata = context.get_output_metadata("result")
    return manifest, weights, {k: getattr(v, "value", v) for k, v in (metadata or {}).items()}


def test_two_gloo_processes_train_the_model_one_process_trains(backbone, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    one, one_weights, _ = _train(tmp_path / "one", backbone, 1)
    two, two_weights, metadata = _train(tmp_path / "two", backbone, 2)
    assert metadata["bert_world"] == "1 x 2" and metadata["bert_torchrun_attempts"] == 1
    assert metadata["bert_logged_steps"] == 4  # rank 0's metrics reached the launching step
    assert one["steps"].item() == two["steps"].item() == 4  # 6 training queries, batches of 4, 2 epochs
    assert one["examples"].item() == two["examples"].item() == 6
    assert one["dev_score"].item() == pytest.approx(two["dev_score"].item(), abs=1e-6)  # chosen on dev alike
    assert not list((tmp_path / "two" / "files" / "cross_encoder" / "jobs").rglob("job.json"))  # the job is gone
    start = CrossEncoder.from_pretrained(backbone, max_length=32, max_query_length=8, seed=42).model.state_dict()
    keys = sorted(one_weights)
    flat = {
        name: torch.cat([w[k].flatten().float() for k in keys])
        for name, w in [("one", one_weights), ("two", two_weights), ("start", start)]
    }
    moved = (flat["one"] - flat["start"]).norm()
    assert moved > 0
    assert (flat["two"] - flat["one"]).norm() < 0.01 * moved  # the same model, up to float rounding
