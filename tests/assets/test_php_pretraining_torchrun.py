"""php_ablations and php_baselines pre-train under torchrun when asked for two processes: two gloo
processes on the CPU give the ablation (its three stages, each from the one before) and the Table 3
baseline (HARP) one process gives, within float tolerance. Without the MLM term, as in
test_php_torchrun (MLM's token mean is per process)."""

from pathlib import Path

import dagster as dg
import polars as pl
import pytest
import torch
from safetensors.torch import load_file
from test_php_assets import _upstream_assets, _upstream_tables

from assets.definitions import resources
from assets.defs.php import php_assets
from dagster_ir.storage.parquet import table_path, write_table

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def _pretrain(root: Path, backbone: str, nproc: int):
    _upstream_tables(root)
    for stage in ("hp", "shp", "mrds"):  # the PHP stages' manifests php_baselines reads its budget from
        write_table(
            pl.DataFrame({"stage": [stage], "path": ["unused"], "steps": [2]}), table_path(root, [f"php_{stage}"], None)
        )
    php = {
        "backbone": backbone,
        "max_length": 32,
        "max_query_length": 12,
        "n_negatives": 2,
        "batch_size": 4,
        "max_steps": 2,
        "lr": 5e-3,
        "device": "cpu",
        "bf16": False,
        "mlm_weight": 0.0,
    }
    torchrun = {"torchrun": {"nproc_per_node": nproc, "max_restarts": 0, "relaunches": 0}}
    run_config = {
        "ops": {
            "php_examples": {"config": php},
            "php_baseline_examples": {"config": php},
            "php_ablations": {"config": {**php, **torchrun, "variants": ["no-mlm"]}},
            "php_baselines": {"config": {**php, **torchrun, "methods": ["harp"], "match_php_steps": False}},
        }
    }
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("wiki_dump", ["dump"])
        result = dg.materialize(
            _upstream_assets() + php_assets,
            selection=["php_examples", "php_ablations", "php_baseline_examples", "php_baselines"],
            resources=resources(str(root)),
            instance=instance,
            run_config=run_config,
        )
    assert result.success
    manifests = {name: result.asset_value(name) for name in ("php_ablations", "php_baselines")}
    metadata = {
        name: {k: v.value for k, v in result.asset_materializations_for_node(name)[0].metadata.items()}
        for name in manifests
    }
    return manifests, metadata


def _flat(folder: str, start: dict) -> torch.Tensor:
    """The backbone's weights in a model folder (the score head is new in each)."""
    weights = load_file(str(Path(folder) / "model.safetensors"))
    keys = sorted(k for k in weights if k in start or k.removeprefix("bert.") in start)
    return torch.cat([weights[k].flatten().double() for k in keys])


def test_two_gloo_processes_pretrain_the_ablation_and_baseline_one_process_pretrains(backbone, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    one, _ = _pretrain(tmp_path / "one", backbone, 1)
    two, metadata = _pretrain(tmp_path / "two", backbone, 2)
    assert metadata["php_ablations"]["no-mlm_world"] == "1 x 2" and metadata["php_baselines"]["harp_world"] == "1 x 2"
    assert metadata["php_ablations"]["no-mlm_logged_steps"] == two["php_ablations"]["steps"].item() == 6  # 3 stages
    assert one["php_ablations"]["steps"].item() == 6 and one["php_ablations"]["stages"].item() == "hp,shp,mrds"
    assert one["php_baselines"]["steps"].item() == two["php_baselines"]["steps"].item() == 2
    assert not list((tmp_path / "two" / "files" / "php" / "jobs").rglob("job.json"))  # the job folders are gone
    start_weights = load_file(str(Path(backbone) / "model.safetensors"))
    for name in ("php_ablations", "php_baselines"):
        first, second = (_flat(side[name]["path"][0], start_weights) for side in (one, two))
        start = torch.cat(
            [
                start_weights.get(k, start_weights.get(k.removeprefix("bert."))).flatten().double()
                for k in sorted(
                    k
                    for k in load_file(str(Path(one[name]["path"][0]) / "model.safetensors"))
                    if k in start_weights or k.removeprefix("bert.") in start_weights
                )
            ]
        )
        moved = (first - start).norm()
        assert moved > 0, name
        assert (second - first).norm() < 0.01 * moved, name  # the same model, up to float rounding
