"""benchmarks/gpu_check.py: refuses clearly without CUDA; with a (simulated) GPU it reproduces
Cranfield for one seed under the paper profile through the command line."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import gpu_check  # noqa: E402

from dagster_ir.collections.config import load_collections_config  # noqa: E402


def test_without_cuda_it_stops_with_a_clear_message(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.main(["--data", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no CUDA device here" in err and "CUDA build of torch" in err and "\n" == err[-1] and err.count("\n") == 1
    assert not (tmp_path / "dagster-ir.yaml").exists()  # nothing started


def test_with_a_gpu_it_runs_the_paper_reproduction_of_one_seed(monkeypatch, tmp_path, capsys):
    import assets.cli.main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: "Fake H100")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setenv("DAGSTER_IR_CONFIG", "unset")  # gpu_check sets it; monkeypatch restores it afterwards
    calls = []
    monkeypatch.setattr(assets.cli.main, "main", lambda argv: calls.append(argv) or 0)
    cranfield = tmp_path / "cran"
    cranfield.mkdir()
    (cranfield / "cran.all.1400").write_text("")
    assert gpu_check.main(["--data", str(tmp_path / "d"), "--cranfield", str(cranfield), "--seed", "3"]) == 0
    assert calls == [["--data", str(tmp_path / "d"), "reproduce", "--collection", "cranfield", "--profile", "paper"]]
    assert "1 GPU(s): Fake H100; bf16" in capsys.readouterr().out
    spec = load_collections_config(tmp_path / "d" / "dagster-ir.yaml")["cranfield"]
    assert spec.path == cranfield.resolve() and spec.protocol.kind == "cv" and spec.protocol.seeds == (3,)


def test_the_default_source_is_ir_datasets(tmp_path):
    spec = load_collections_config(gpu_check.write_config(tmp_path / "c.yaml", None, 0))["cranfield"]
    assert spec.kind == "irds" and spec.dataset == "cranfield" and spec.protocol.seeds == (0,)
