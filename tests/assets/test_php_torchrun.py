"""A PHP pre-training stage trains under torchrun when asked for two processes: two gloo processes on
the CPU give the stage model one process gives (the same global batches, within float tolerance).

Without the MLM term: MLM is a mean over the masked tokens of each process's share of the batch (as
in BERT's own multi-GPU pre-training), so with it N processes weight the tokens slightly otherwise
than one process does (measured here: 10% of the distance the weights moved in 3 steps at lr 5e-3).
"""

from pathlib import Path

import dagster as dg
import pytest
import torch
from safetensors.torch import load_file
from test_php_assets import _upstream_assets, _upstream_tables

from assets.definitions import resources
from assets.defs.php import php_assets

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def _stage(root: Path, backbone: str, nproc: int, mlm_weight: float = 0.0):
    _upstream_tables(root)
    php = {
        "backbone": backbone,
        "max_length": 32,
        "max_query_length": 12,
        "n_negatives": 2,
        "batch_size": 4,
        "max_steps": 3,
        "lr": 5e-3,
        "device": "cpu",
        "bf16": False,
        "mlm_weight": mlm_weight,
    }
    run_config = {
        "ops": {
            "php_examples": {"config": php},
            "php_hp": {"config": {**php, "torchrun": {"nproc_per_node": nproc, "max_restarts": 0, "relaunches": 0}}},
        }
    }
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("wiki_dump", ["dump"])
        result = dg.materialize(
            _upstream_assets() + php_assets,
            selection=["php_examples", "php_hp"],
            resources=resources(str(root)),
            instance=instance,
            run_config=run_config,
        )
    assert result.success
    manifest = result.asset_value("php_hp")
    metadata = {k: v.value for k, v in result.asset_materializations_for_node("php_hp")[0].metadata.items()}
    return manifest, load_file(str(Path(manifest["path"][0]) / "model.safetensors")), metadata


def test_two_gloo_processes_pretrain_the_stage_one_process_pretrains(backbone, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    one, one_weights, _ = _stage(tmp_path / "one", backbone, 1)
    two, two_weights, metadata = _stage(tmp_path / "two", backbone, 2)
    assert metadata["world"] == "1 x 2" and metadata["torchrun_attempts"] == 1 and metadata["logged_steps"] == 3
    assert one["steps"].item() == two["steps"].item() == 3 and one["examples"].item() == two["examples"].item()
    assert not list((tmp_path / "two" / "files" / "php" / "jobs").rglob("job.json"))  # the job folder is gone
    start = {k: v for k, v in load_file(str(Path(backbone) / "model.safetensors")).items()}
    keys = sorted(k for k in one_weights if k.removeprefix("bert.") in start or k in start)
    flat = {
        name: torch.cat([w[k].flatten().float() for k in keys])
        for name, w in [("one", one_weights), ("two", two_weights)]
    }
    begin = torch.cat([start.get(k, start.get(k.removeprefix("bert."))).flatten().float() for k in keys])
    moved = (flat["one"] - begin).norm()
    assert moved > 0
    assert (flat["two"] - flat["one"]).norm() < 0.01 * moved  # the same stage model, up to float rounding
