"""neural_baselines trains under torchrun when asked for two processes: two gloo processes on the CPU
give the test runs (and the epochs chosen on validation) one process gives, within float tolerance,
for an interaction model (KNRM) and the BERT ones (BERT-FirstP, CEDR-KNRM: a tiny BERT without dropout)."""

from dataclasses import replace
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
import torch
from safetensors.torch import load_file
from test_baselines_assets import _collection

from assets.defs.baselines import NeuralBaselinesConfig, neural_baselines
from assets.defs.ghrm import Word2VecAssetConfig, word2vec
from assets.lib.resources import DataDirResource

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
MODELS = ["knrm", "bert-firstp", "cedr-knrm"]


def _train(root: Path, backbone: str, nproc: int):
    corpus, queries, qrels, splits, run, negatives = _collection()
    data = DataDirResource(path=str(root))
    vectors = word2vec(
        context=dg.build_asset_context(partition_key="wiki-car"),
        config=Word2VecAssetConfig(source="trained", dim=8, epochs=2, min_count=1),
        data=data,
        corpus=corpus.lazy(),
    ).value
    config = NeuralBaselinesConfig(
        models=MODELS,
        epochs=2,
        batch_size=4,
        query_words=3,
        doc_words=16,
        rerank_depth=6,
        threads=1,
        bert_threads=1,
        backbone=backbone,
        device="cpu",
        bf16=False,
        lr=1e-2,
        bert_lr=5e-3,
        torchrun={"nproc_per_node": nproc, "max_restarts": 0, "relaunches": 0},
    )
    context = dg.build_asset_context(partition_key="wiki-car/seed-0")
    runs = neural_baselines(
        context=context,
        config=config,
        data=data,
        corpus=corpus.lazy(),
        queries=queries,
        qrels=qrels,
        query_splits=splits,
        candidate_runs=run,
        negatives=negatives,
        word2vec=vectors,
    ).value
    metadata = context.get_output_metadata("result")
    return runs, {k: getattr(v, "value", v) for k, v in (metadata or {}).items()}


def _best(root: Path, name: str, backbone: str) -> dict[str, torch.Tensor]:
    """The weights validation chose (the checkpoint folder's `best`), or the untrained model's (root "start")."""
    if root.name == "start":
        from dagster_ir.methods.baselines import profile
        from dagster_ir.methods.baselines.reranker import build_bert_model

        return build_bert_model(name, replace(profile("demo"), backbone=backbone))[0].state_dict()
    [path] = (root / "files" / "neural_baselines").rglob(f"{name}-*/best/model.safetensors")
    return load_file(str(path))


def _flat(weights: dict[str, torch.Tensor], keys: list[str]) -> torch.Tensor:
    return torch.cat([weights[k].flatten().double() for k in keys])


def test_two_gloo_processes_score_the_test_queries_as_one_process(backbone, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    one, one_meta = _train(tmp_path / "one", backbone, 1)
    two, two_meta = _train(tmp_path / "two", backbone, 2)
    assert two_meta["world"] == "1 x 2" and two_meta["torchrun_attempts"] == 1
    assert "world" not in one_meta  # one process trained in the step's own process
    for name in MODELS:
        assert one_meta[f"{name} kept epoch"] == two_meta[f"{name} kept epoch"]
        assert one_meta[f"{name} validation nDCG@10"] == pytest.approx(two_meta[f"{name} validation nDCG@10"], abs=1e-6)
    assert (
        sorted(one["run_name"].unique())
        == sorted(two["run_name"].unique())
        == sorted([*MODELS, *(f"{m}+bm25" for m in MODELS)])
    )
    joined = one.join(two, on=["run_name", "query_id", "doc_id"], suffix="_two")
    assert joined.height == one.height == two.height
    knrm = joined.filter(pl.col("run_name").str.starts_with("knrm"))
    assert knrm.select((pl.col("score") - pl.col("score_two")).abs().max()).item() < 1e-6
    # BERT: Adam turns float rounding in near-zero gradients into updates of up to lr, so the scores of a
    # tiny BERT trained at a high rate differ in their last digits; its weights are compared instead
    for name in ("bert-firstp", "cedr-knrm"):
        one_bert, two_bert, start = (_best(tmp_path / side, name, backbone) for side in ("one", "two", "start"))
        keys = sorted(one_bert)  # the file holds a tensor shared by two modules once
        one_bert, two_bert, start = (_flat(w, keys) for w in (one_bert, two_bert, start))
        moved = (one_bert - start).norm()
        assert moved > 0, name
        assert (two_bert - one_bert).norm() < 0.01 * moved, name  # the same model, up to float rounding
    for name in MODELS:  # the models did learn something: their scores differ from the candidates'
        assert one.filter(pl.col("run_name") == name)["score"].n_unique() > 1
    assert not list((tmp_path / "two" / "files" / "neural_baselines" / "jobs").rglob("job.json"))
