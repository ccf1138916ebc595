"""neural_model1, bert_model1 and bert_vanilla train under torchrun when asked for two processes: two
gloo processes on the CPU give the model one process gives (the same global batches, within float
tolerance), the dev choice alike, and the job's metrics reach the materialization."""

from pathlib import Path

import dagster as dg
import pytest
import torch
from safetensors.torch import load_file
from test_model1_assets import collection_frames

from assets.defs.model1 import BertModel1AssetConfig, NeuralModel1AssetConfig, bert_model1, bert_vanilla, neural_model1
from assets.lib.resources import DataDirResource

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
UNIT = "wiki-car/seed-0"
ASSETS = {
    "neural_model1": (neural_model1, NeuralModel1AssetConfig),
    "bert_model1": (bert_model1, BertModel1AssetConfig),
    "bert_vanilla": (bert_vanilla, BertModel1AssetConfig),
}


def _train(name: str, root: Path, backbone: str, nproc: int, lr: float = 1e-2, max_steps: int | None = None):
    asset, settings = ASSETS[name]
    config = settings(
        backbone=backbone,
        epochs=2,
        batch_size=4,
        lr=lr,
        device="cpu",
        bf16=False,
        max_steps=max_steps,
        torchrun={"nproc_per_node": nproc, "max_restarts": 0, "relaunches": 0},
        select_start=False,  # the trained weights are what two processes must equal, even where the start scores higher
    )
    context = dg.build_asset_context(partition_key=UNIT)
    frames = collection_frames()
    frames["corpus"] = frames["corpus"].lazy()
    manifest = asset(context=context, config=config, data=DataDirResource(path=str(root)), **frames).value
    weights = {}
    for file in sorted(Path(manifest["path"][0]).glob("*.safetensors")):
        weights.update({f"{file.name}:{k}": v for k, v in load_file(str(file)).items()})
    metadata = context.get_output_metadata("result")
    return manifest, weights, {k: getattr(v, "value", v) for k, v in (metadata or {}).items()}


@pytest.mark.parametrize("name", list(ASSETS))
def test_two_gloo_processes_train_the_model_one_process_trains(name, backbone, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    one, one_weights, _ = _train(name, tmp_path / "one", backbone, 1)
    two, two_weights, metadata = _train(name, tmp_path / "two", backbone, 2)
    assert metadata["world"] == "1 x 2" and metadata["torchrun_attempts"] == 1
    assert metadata["logged_steps"] == two["steps"].item()  # rank 0's metrics reached the launching step
    assert one["steps"].item() == two["steps"].item() >= 4  # 2 epochs of 2 batches or more
    assert one["best_epoch"].item() == two["best_epoch"].item()
    assert one["dev_ndcg10"].item() == pytest.approx(two["dev_ndcg10"].item(), abs=1e-6)  # chosen on dev alike
    assert not list((tmp_path / "two" / "files" / name).rglob("job.json"))  # the job folder is gone
    assert sorted(one_weights) == sorted(two_weights)
    _, start_weights, _ = _train(name, tmp_path / "start", backbone, 1, lr=1e-12, max_steps=1)  # where they began
    flat = {
        side: torch.cat([w[k].flatten().double() for k in sorted(w)])
        for side, w in [("one", one_weights), ("two", two_weights), ("start", start_weights)]
    }
    moved = (flat["one"] - flat["start"]).norm()
    assert moved > 0
    assert (flat["two"] - flat["one"]).norm() < 0.01 * moved  # the same model, up to float rounding
