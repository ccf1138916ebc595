"""`benchmarks/learning_curves.py`: reading validation scores at each budget, the summary table and figure."""

import math
import sys
from pathlib import Path

import polars as pl
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from learning_curves import Curve, budget_rows, markdown, plot, summary, trainer  # noqa: E402


def test_one_run_is_read_at_every_budget_and_the_kept_epoch_is_the_best_so_far():
    scores = [0.1, 0.3, 0.2, 0.25, 0.2, 0.4, 0.1, 0.1]  # 8 epochs = x4 of a 2-epoch demo budget
    rows = budget_rows("knrm", 0, 0, [1, 2, 4], 2, {4: Curve(scores, 10, 8.0, 7)}, 0.28)
    assert [r["epochs"] for r in rows] == [2, 4, 8]
    assert [r["validation_at_budget"] for r in rows] == [0.3, 0.25, 0.1]  # the weights at the budget's last epoch
    assert [r["validation_kept"] for r in rows] == [0.3, 0.3, 0.4]  # the best validation epoch up to there
    assert [r["kept_epoch"] for r in rows] == [2, 2, 6]
    assert [r["examples_seen"] for r in rows] == [20, 40, 80] and rows[0]["unit_examples"] == 7
    assert [r["train_seconds"] for r in rows] == [2.0, 4.0, 8.0] and all(r["one_run"] for r in rows)


def test_separate_runs_are_read_each_at_its_own_end():
    curves = {1: Curve([0.2, 0.3], 5, 1.0, 5), 4: Curve([0.1] * 7 + [0.35], 5, 4.0, 5)}
    rows = budget_rows("bert", 1, 2, [1, 4], 2, curves, 0.3)
    assert [r["validation_at_budget"] for r in rows] == [0.3, 0.35] and not any(r["one_run"] for r in rows)
    with pytest.raises(ValueError, match="x4 needs 8 epochs, the training ran 7"):
        budget_rows("bert", 1, 2, [4], 2, {4: Curve([0.1] * 7, 5, 4.0, 5)}, 0.3)


def test_the_table_averages_runs_and_the_figure_is_written(tmp_path):
    rows = budget_rows("drmm", 0, 0, [1, 4], 1, {4: Curve([0.2, 0.2, 0.2, 0.3], 4, 1.0, 4)}, 0.25) + budget_rows(
        "drmm", 1, 0, [1, 4], 1, {4: Curve([0.4, 0.2, 0.2, 0.5], 4, 1.0, 4)}, 0.35
    )
    table = summary(pl.DataFrame(rows))
    assert table["validation_at_budget"].to_list() == pytest.approx([0.3, 0.4]) and table["runs"].to_list() == [2, 2]
    assert "| drmm | x1 | 4 | 0.300 | 0.300 | 0.300 | 2 |" in markdown(table)
    plot("drmm", table, tmp_path / "drmm.png")
    assert (tmp_path / "drmm.png").read_bytes()[:4] == b"\x89PNG"


def test_every_method_has_a_trainer_and_an_unknown_one_is_refused():
    assert trainer("bert")[1] is False and trainer("ghrm")[1] is True and trainer("knrm")[1] is True
    with pytest.raises(SystemExit, match="unknown method 'nope'"):
        trainer("nope")


# --- CET on a tiny collection the tests make -----------------------------------------------------

import learning_curves  # noqa: E402

from dagster_ir.schemas import RUN  # noqa: E402

WORDS = [
    "wing",
    "flow",
    "shock",
    "heat",
    "boundary",
    "layer",
    "pressure",
    "nozzle",
    "plate",
    "wave",
    "drag",
    "lift",
    "cone",
    "jet",
    "mach",
    "vortex",
    "panel",
    "flutter",
    "stress",
    "buckling",
]
FOLDS = 5
PER_FOLD = 4  # 20 queries: 12 train (2 optimizer steps of 8 a CET epoch), 4 validation


def _tiny_inputs(tmp_path) -> learning_curves.Inputs:
    """20 queries, 40 documents; query i is about WORDS[i] and WORDS[i+1], its relevant document is d<2i>.

    BM25 puts the relevant document at rank 3 (inside the pool of 10 the sparse labels come from), the
    dense run puts it at rank 1 for training queries and ranks 2 / 1 / 1 / 3 for the validation ones.
    """
    n = FOLDS * PER_FOLD
    queries = pl.DataFrame(
        {"query_id": [f"q{i}" for i in range(n)], "text": [f"{WORDS[i]} {WORDS[(i + 1) % n]} effect" for i in range(n)]}
    )
    corpus = pl.DataFrame(
        {
            "doc_id": [f"d{j}" for j in range(2 * n)],
            "title": [f"on {WORDS[(j // 2) % n]}" for j in range(2 * n)],
            "text": [
                f"{WORDS[(j // 2) % n]} {WORDS[(j // 2 + 1) % n] if j % 2 == 0 else 'other'} measured in a tunnel"
                for j in range(2 * n)
            ],
        }
    )
    qrels = pl.DataFrame(
        {"query_id": [f"q{i}" for i in range(n)], "doc_id": [f"d{2 * i}" for i in range(n)], "relevance": [1] * n},
        schema={"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32},
    )
    splits = pl.DataFrame(
        {
            "query_id": [f"q{i}" for i in range(n)],
            "split": ["train/model"] * n,
            "fold": [i // PER_FOLD for i in range(n)],
        },
        schema={"query_id": pl.String, "split": pl.String, "fold": pl.Int32},
    )

    def run(name: str, relevant_rank) -> pl.DataFrame:
        rows = []
        for i in range(n):
            others = [f"d{j}" for j in range(2 * n) if j != 2 * i][:24]
            ranked = others[: relevant_rank(i) - 1] + [f"d{2 * i}"] + others[relevant_rank(i) - 1 :]
            rows += [(f"q{i}", d, float(100 - r), r + 1, name) for r, d in enumerate(ranked)]
        return pl.DataFrame(rows, schema=RUN, orient="row")

    validation_ranks = {4: 2, 5: 1, 6: 1, 7: 3}  # fold 1: the validation queries of rotation 0
    bm25 = run("bm25", lambda i: 3)
    return learning_curves.Inputs(
        corpus,
        queries,
        qrels,
        splits,
        bm25,
        tmp_path,
        dense=run("dense", lambda i: validation_ranks.get(i, 1)),
        deep=bm25,
    )


@pytest.fixture(scope="module")
def tiny_backbone(tmp_path_factory) -> str:
    """A tiny random BERT with the bundled vocabulary: the trainings below take seconds, not minutes."""
    from dagster_ir.neural.backbone import make_tiny_backbone

    return str(make_tiny_backbone(tmp_path_factory.mktemp("backbone") / "tiny", hidden_size=16))


@pytest.fixture
def tiny_cet(tiny_backbone, monkeypatch):
    """The demo profile's CET with the tiny BERT as R and S."""
    from dataclasses import replace

    folder = tiny_backbone
    demo = learning_curves.cet_config

    def config(seed, factor, candidates="dense"):
        real = demo(seed, factor, candidates)
        return replace(real, cet=replace(real.cet, ranker=replace(real.cet.ranker, backbone=folder, layers=None)))

    monkeypatch.setattr(learning_curves, "cet_config", config)


def _ndcg_at_rank(rank: int) -> float:
    return 1.0 / math.log2(rank + 1)


def test_cet_config_scales_the_epochs_and_offsets_the_seeds():
    base = learning_curves.cet.profile("demo")
    config = learning_curves.cet_config(2, 4, "bm25")
    assert config.cet.train.epochs == 4 * base.cet.train.epochs and config.cet.train.max_steps is None
    assert (
        config.cet.train.schedule == "linear" and config.cet.train.lr == base.cet.train.lr
    )  # decays: one run a budget
    assert config.cet.train.seed == base.cet.train.seed + 2 and config.negative_seed == base.negative_seed + 2
    assert config.methods == ("cet",) and config.taus == () and config.strong_run == "bm25"
    assert config.rerank_depth == base.rerank_depth == 20 and config.cet.tau == base.cet.tau
    assert learning_curves.trainer("cet") == (learning_curves.train_cet, False)
    assert learning_curves.demo_epochs("cet") == base.cet.train.epochs


def test_cet_is_scored_on_the_validation_queries_reranking_the_strong_runs_top_20(tmp_path, monkeypatch, tiny_cet):
    inputs = _tiny_inputs(tmp_path)
    seen = []

    def keep_order(model, run, queries, corpus, config, run_name):  # a reranker that keeps the candidates' order
        seen.append((sorted(run["query_id"].unique().to_list()), config.rerank_depth))
        return run.filter(pl.col("rank") <= config.rerank_depth).with_columns(run_name=pl.lit(run_name))

    monkeypatch.setattr(learning_curves, "rerank_with", keep_order)
    curve = learning_curves.train_cet(inputs, 0, 0, 1)
    expected = sum(_ndcg_at_rank(r) for r in (2, 1, 1, 3)) / 4  # the dense run's validation nDCG@10
    assert curve.scores == pytest.approx([expected])  # one score per epoch of the x1 budget
    assert seen == [(["q4", "q5", "q6", "q7"], 20)]
    assert curve.examples == 12 and curve.steps == 2  # 12 labelled training queries in batches of 8


def test_cet_rows_one_per_budget_from_one_training_per_budget(tmp_path, monkeypatch, tiny_cet):
    inputs = _tiny_inputs(tmp_path)
    curves = []
    train = learning_curves.train_cet
    monkeypatch.setattr(learning_curves, "train_cet", lambda *args: curves.append(train(*args)) or curves[-1])
    rows = learning_curves.points("cet", inputs, 0, 0, [1, 2])
    assert [(r["fold"], r["seed"], r["budget"]) for r in rows] == [(0, 0, "x1"), (0, 0, "x2")]
    assert [len(c.scores) for c in curves] == [1, 2] and [c.steps for c in curves] == [2, 4]  # the budget trains more
    assert [r["train_steps"] for r in rows] == [2, 4] and not any(r["one_run"] for r in rows)
    for row, curve in zip(rows, curves, strict=True):
        assert 0.0 <= row["validation_at_budget"] <= 1.0 and math.isfinite(row["validation_at_budget"])
        assert row["validation_at_budget"] == curve.scores[-1] and row["validation_kept"] == max(curve.scores)
        assert row["kept_epoch"] == curve.scores.index(max(curve.scores)) + 1
    assert rows[0]["bm25"] == pytest.approx(_ndcg_at_rank(3))
    assert rows[0]["candidates"] == "dense"
    assert rows[0]["candidates_score"] == pytest.approx(sum(_ndcg_at_rank(r) for r in (2, 1, 1, 3)) / 4)


def test_the_dense_run_is_the_bi_encoders_top_100(tmp_path):
    inputs = _tiny_inputs(tmp_path)
    inputs = learning_curves.Inputs(
        inputs.corpus, inputs.queries.head(3), inputs.qrels, inputs.splits, inputs.bm25, tmp_path
    )
    run = inputs.run("dense")
    assert run["run_name"].unique().to_list() == ["dense"] and run.group_by("query_id").len()["len"].max() == 40
    assert run.filter(pl.col("rank") == 1).sort("query_id")["doc_id"].to_list() == ["d0", "d2", "d4"]
    assert inputs.run("bm25") is inputs.bm25 and inputs.run("dense") is run  # built once


def test_a_method_reranking_another_run_gets_its_line_and_a_note(tmp_path):
    rows = budget_rows(
        "cet",
        0,
        0,
        [1, 4],
        1,
        {1: Curve([0.4], 8, 1.0, 8, 2), 4: Curve([0.3, 0.5, 0.4, 0.45], 8, 4.0, 8, 8)},
        0.35,
        ("dense", 0.42),
    )
    assert [r["train_steps"] for r in rows] == [2, 8] and [r["validation_kept"] for r in rows] == [0.4, 0.5]
    table = summary(pl.DataFrame(rows))
    assert "cet reranks dense, whose own validation nDCG@10 is 0.420." in markdown(table)
    plot("cet", table, tmp_path / "cet.png")
    assert (tmp_path / "cet.png").read_bytes()[:4] == b"\x89PNG"


# --- neural Model 1 and BERT-Model1 ----------------------------------------------------------------


def test_model1_configs_scale_epochs_and_the_step_cap_and_offset_the_seeds():
    neural, bert = learning_curves.model1_neural.PROFILES["demo"], learning_curves.model1_bert.PROFILES["demo"]
    config = learning_curves.model1_config("neural-model1", 1, 4)
    assert config.train.epochs == 4 * neural.train.epochs and config.train.max_steps is None
    assert config.train.seed == neural.train.seed + 1 and config.negatives.seed == neural.negatives.seed + 1
    assert config.train.bf16 is False and config.train.warmup_ratio > 0  # the warm-up spans a share of all steps
    config = learning_curves.model1_config("bert-model1", 0, 4)
    assert config.train.epochs == 4 * bert.train.epochs and config.train.max_steps == 4 * bert.train.max_steps
    assert config.train.schedule == "linear" and config.dev_depth == bert.dev_depth
    for method in ("neural-model1", "bert-model1"):
        assert learning_curves.trainer(method)[1] is False
        assert learning_curves.demo_epochs(method) == learning_curves.MODEL1[method].PROFILES["demo"].train.epochs


@pytest.mark.parametrize("method, steps_per_epoch", [("neural-model1", 1), ("bert-model1", 2)])
def test_model1_rows_one_per_budget_from_one_training_per_budget(
    method, steps_per_epoch, tmp_path, monkeypatch, tiny_backbone
):
    from dataclasses import replace

    demo = learning_curves.model1_config
    monkeypatch.setattr(learning_curves, "model1_config", lambda *args: replace(demo(*args), backbone=tiny_backbone))
    inputs = _tiny_inputs(tmp_path)
    curves = []
    train = learning_curves.train_model1
    monkeypatch.setattr(learning_curves, "train_model1", lambda *args: curves.append(train(*args)) or curves[-1])
    rows = learning_curves.points(method, inputs, 0, 0, [1, 2])
    epochs = learning_curves.demo_epochs(method)
    assert [(r["fold"], r["seed"], r["budget"]) for r in rows] == [(0, 0, "x1"), (0, 0, "x2")]
    assert [len(c.scores) for c in curves] == [epochs, 2 * epochs]  # one validation score per epoch
    assert [c.steps for c in curves] == [epochs * steps_per_epoch, 2 * epochs * steps_per_epoch]  # 12 train queries
    assert [r["train_steps"] for r in rows] == [c.steps for c in curves] and curves[0].examples == 12
    for row, curve in zip(rows, curves, strict=True):
        assert 0.0 <= row["validation_at_budget"] <= 1.0 and math.isfinite(row["validation_at_budget"])
        assert row["validation_at_budget"] == curve.scores[-1] and row["validation_kept"] == max(curve.scores)
    if method == "bert-model1":  # validates on BM25's top 5: that order is its reference line
        assert rows[0]["candidates"] == "bm25 top 5" and rows[0]["candidates_score"] == pytest.approx(_ndcg_at_rank(3))
    else:
        assert rows[0]["candidates"] == "bm25"


def test_the_cross_encoders_curve_trains_at_the_cranfield_examples_rate():
    from learning_curves import CRANFIELD_CROSS_ENCODER_LR

    from dagster_ir.collections import load_collections_config
    from dagster_ir.neural.finetune import PROFILES

    specs = load_collections_config(Path(__file__).resolve().parents[2] / "examples" / "cranfield.yaml")
    example = specs["cranfield"].assets["cross_encoder"]
    assert example["lr"] == CRANFIELD_CROSS_ENCODER_LR != PROFILES["demo"].train.lr
    assert example["epochs"] == 2 and example["max_steps"] == 0  # the curve's x1: 2 epochs, uncapped
