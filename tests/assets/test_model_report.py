import matplotlib.figure
import polars as pl
import pytest

from assets.defs.model_report import SECTIONS, _sections, every_query_rows, sweeps_figure
from dagster_ir.evaluation import ReportFigure, SignificanceConfig, evaluate_run
from dagster_ir.schemas import PER_QUERY_EVAL


def _runs(*names):
    return pl.DataFrame({"run_name": list(names)})


def test_sections_pick_their_runs_and_baselines():
    runs = {
        "bm25": 0.3,
        "dense": 0.5,
        "ghrm": 0.35,
        "bert": 0.4,
        "php": 0.45,
        "ict": 0.42,
        "naive": 0.2,
        "zhan": 0.25,
        "cet": 0.3,
    }
    measures = ["RR@10", "RR@100", "nDCG@10", "nDCG@100", "nDCG@20", "P@20", "AP", "R@100", "R@1000"]
    rows = [(run, f"q{i}", m, v + 0.01 * i) for run, v in runs.items() for i in range(5) for m in measures]
    per_query = pl.DataFrame(rows, schema=list(PER_QUERY_EVAL), orient="row").cast(PER_QUERY_EVAL)
    inputs = {
        "candidate_runs": _runs("bm25", "dense"),
        "reranked_runs": _runs("bert", "php", "ict"),
        "fusion_runs": _runs(),
        "ghrm_runs": _runs("ghrm"),
        "cet_runs": _runs("naive", "zhan", "cet"),
    }
    recall = ReportFigure.from_figure("recall", "Recall", matplotlib.figure.Figure())
    reports = _sections(per_query, inputs, SignificanceConfig(n_resamples=100), recall, cet_best="zhan")
    shown = {r.title: (r.baseline, sorted(r.comparison["run_name"].unique())) for r in reports}
    assert shown["First-stage retrieval"] == ("bm25", ["bm25", "dense"])
    assert shown["PHP: BERT and PHP rerankers of BM25's top-k"] == ("bert", ["bert", "bm25", "ict", "php"])
    against_php = "PHP: the pre-training baselines (Table 3) and ablations, against PHP"
    assert shown[against_php] == ("php", ["bert", "bm25", "ict", "php"])
    assert shown["CET: pooling bias (Table 1), against naive"] == ("naive", ["cet", "dense", "naive", "zhan"])
    assert shown["CET: pooling bias, against the best baseline on dev (zhan)"][0] == "zhan"  # dev's choice, given
    with_dml = _sections(
        per_query.vstack(per_query.filter(pl.col("run_name") == "naive").with_columns(run_name=pl.lit("dml"))),
        {**inputs, "cet_runs": _runs("naive", "zhan", "dml", "cet")},
        SignificanceConfig(n_resamples=100),
        recall,
    )
    titles = {r.title: r.baseline for r in with_dml}
    assert titles["CET: pooling bias (Table 1), against dml"] == "dml"  # Table 1's dagger reference
    assert not any("best baseline" in t for t in titles)  # no dev choice given: none made on test
    ghrm_title = next(s.title for s in SECTIONS if s.inputs == ("ghrm_runs",))
    assert shown[ghrm_title] == ("bm25", ["bert", "bm25", "ghrm"])  # ql absent here
    assert not any("Model 1" in title for title in shown)  # no runs, no section


def test_baseline_rows_join_the_sections_of_the_papers_that_list_them():
    names = ["bm25", "bert", "php", "fusion", "drmm", "knrm", "conv-knrm", "duet", "pacrr", "cedr-knrm"]
    measures = ["RR@10", "RR@100", "nDCG@10", "nDCG@100", "AP"]
    rows = [(run, f"q{i}", m, 0.1 * k + 0.01 * i) for k, run in enumerate(names) for i in range(5) for m in measures]
    per_query = pl.DataFrame(rows, schema=list(PER_QUERY_EVAL), orient="row").cast(PER_QUERY_EVAL)
    inputs = {
        "candidate_runs": _runs("bm25"),
        "reranked_runs": _runs("bert", "php"),
        "fusion_runs": _runs("fusion"),
        "ghrm_runs": _runs(),
        "cet_runs": _runs(),
        "neural_baselines": _runs("drmm", "knrm", "conv-knrm", "duet", "pacrr", "cedr-knrm"),
    }
    recall = ReportFigure.from_figure("recall", "Recall", matplotlib.figure.Figure())
    shown = {
        r.title: (r.baseline, sorted(r.comparison["run_name"].unique()))
        for r in _sections(per_query, inputs, SignificanceConfig(n_resamples=100), recall)
    }
    assert shown["PHP: BERT and PHP rerankers of BM25's top-k"] == (
        "bert",
        ["bert", "bm25", "conv-knrm", "drmm", "duet", "knrm", "php"],
    )  # PHP Table 3's baselines, not PACRR
    assert shown["Lexical translation: BM25 + Model 1 (Table 2)"] == ("bm25", ["bert", "bm25", "cedr-knrm", "fusion"])
    assert shown["Neural ranking baselines of BM25's top-k"] == (
        "bm25",
        ["bert", "bm25", "cedr-knrm", "conv-knrm", "drmm", "duet", "knrm", "pacrr"],
    )


def _ranked(run_name: str, query_ids: list[str], relevant_first: bool, folds: dict | None = None) -> pl.DataFrame:
    """Two documents per query, the relevant one ("r") first or second."""
    rows = []
    for q in query_ids:
        order = ["r", "n"] if relevant_first else ["n", "r"]
        rows += [(q, f"{q}-{d}", 2.0 - i, i + 1, run_name) for i, d in enumerate(order)]
    run = pl.DataFrame(rows, schema=["query_id", "doc_id", "score", "rank", "run_name"], orient="row")
    if folds is not None:
        run = run.with_columns(fold=pl.col("query_id").replace_strict(folds, return_dtype=pl.Int32))
    return run.cast({"rank": pl.Int32})


def test_the_ghrm_section_covers_every_query_exactly_once():
    """Ten queries over five test folds: every judged query once per run, whatever the report's split."""
    queries = [f"q{i}" for i in range(10)]
    folds = {q: i // 2 for i, q in enumerate(queries)}
    ghrm = _ranked("ghrm", queries, relevant_first=True, folds=folds)
    bm25 = _ranked("bm25", queries, relevant_first=False)
    bert = _ranked("bert", queries[:2], relevant_first=True)  # reranks the test split only
    qrels = pl.DataFrame(
        {"query_id": queries[:9], "doc_id": [f"{q}-r" for q in queries[:9]], "relevance": [1] * 9},
        schema={"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32},
    )  # q9 unjudged
    section = next(s for s in SECTIONS if s.inputs == ("ghrm_runs",))
    assert section.every_query
    inputs = {
        "ghrm_runs": ghrm,
        "candidate_runs": bm25,
        "reranked_runs": _runs(),
        "fusion_runs": _runs(),
        "cet_runs": _runs(),
    }
    runs = pl.concat([ghrm.drop("fold"), bm25, bert])
    rows, spread, note = every_query_rows(section, inputs, runs, qrels)
    assert spread["seeds"].unique().to_list() == [1]
    counted = rows.group_by("run_name", "measure").agg(pl.len(), pl.col("query_id").n_unique().alias("distinct"))
    assert sorted(counted["run_name"].unique()) == ["bm25", "ghrm"]  # bert answers 2 of the 9: left out
    assert counted["len"].to_list() == [9] * counted.height and counted["distinct"].to_list() == [9] * counted.height
    ndcg = rows.filter(pl.col("measure") == "nDCG@20")
    assert ndcg.filter(pl.col("run_name") == "ghrm")["value"].to_list() == [1.0] * 9
    assert "9 judged queries of 5 test folds" in note and "bert" in note

    # the section in the book: its table is over all 9, though the report's split holds 2 queries
    split_rows = evaluate_run(runs.filter(pl.col("query_id").is_in(queries[:2])), qrels.head(2), ["nDCG@20", "P@20"])
    recall = ReportFigure.from_figure("recall", "Recall", matplotlib.figure.Figure())
    figure = ReportFigure("sweeps", "sweeps", b"\x89PNG")
    (report,) = [
        r
        for r in _sections(
            split_rows,
            inputs,
            SignificanceConfig(n_resamples=100),
            recall,
            every=(runs, qrels),
            figures={section.title: [figure]},
        )
        if r.title == section.title
    ]
    assert report.comparison.filter(pl.col("run_name") == "ghrm")["n_queries"].unique().to_list() == [9]
    assert "sweeps" in [f.name for f in report.figures]

    # a query scored by two folds' models is an error
    twice = pl.concat([ghrm, ghrm.filter(pl.col("query_id") == "q0").with_columns(fold=pl.lit(3, pl.Int32))])
    with pytest.raises(ValueError, match="more than one fold"):
        every_query_rows(section, {**inputs, "ghrm_runs": twice}, runs, qrels)

    # two seeds, each over every query: still one (seed-averaged) value per query, and a spread of 2 seeds
    seeded = pl.concat([ghrm.with_columns(seed=pl.lit(s, pl.Int64)) for s in (0, 1)])
    seeded_runs = pl.concat([seeded.drop("fold"), bm25.with_columns(seed=pl.lit(None, pl.Int64))])
    rows, spread, _ = every_query_rows(section, {**inputs, "ghrm_runs": seeded}, seeded_runs, qrels)
    assert rows.group_by("run_name", "measure").len()["len"].to_list() == [9] * 4
    assert spread.filter(pl.col("run_name") == "ghrm")["seeds"].unique().to_list() == [2]


def test_sections_show_the_spread_over_seeds_when_a_run_has_several():
    from dagster_ir.evaluation import seed_spread

    measures = ["RR@10", "RR@100", "nDCG@10", "nDCG@100", "nDCG@20", "P@20", "AP", "R@100", "R@1000"]
    rows = [
        (run, f"q{i}", m, v + 0.1 * i, seed)
        for run, v, seeds in (
            ("bm25", 0.3, [None]),
            ("dense", 0.4, [None]),
            ("bert", 0.5, [0, 1]),
            ("php", 0.6, [0, 1]),
        )
        for seed in seeds
        for i in range(3)
        for m in measures
    ]
    per_seed = pl.DataFrame(rows, schema={**PER_QUERY_EVAL, "seed": pl.Int64}, orient="row")
    per_seed = per_seed.with_columns(value=pl.col("value") + pl.col("seed").fill_null(0) * 0.02)
    per_query = per_seed.group_by("run_name", "query_id", "measure", maintain_order=True).agg(pl.col("value").mean())
    inputs = {
        "candidate_runs": _runs("bm25", "dense"),
        "reranked_runs": _runs("bert", "php"),
        "fusion_runs": _runs(),
        "ghrm_runs": _runs(),
        "cet_runs": _runs(),
    }
    recall = ReportFigure.from_figure("recall", "Recall", matplotlib.figure.Figure())
    reports = _sections(
        per_query.select(list(PER_QUERY_EVAL)),
        inputs,
        SignificanceConfig(n_resamples=100),
        recall,
        seed_spread(per_seed),
    )
    php_section = next(r for r in reports if r.title.startswith("PHP"))
    table = php_section.seed_table()
    cells = {label: cells[0].text for label, cells in table.rows}
    assert cells["php"] == "0.7100 ± 0.0141 (2)" and cells["bm25"] == "0.4000 (1)"
    assert "± the sample standard deviation" in php_section.to_terminal()
    first_stage = next(r for r in reports if r.title == "First-stage retrieval")
    assert first_stage.seed_table() is None  # no run there has several seeds


def test_the_sweeps_figure_merges_every_unit():
    rows = [
        ("rate", rate, measure, value + 0.1 * fold, 3, fold, 0)
        for fold in (0, 1)
        for rate, value in ((0.4, 0.2), (0.8, 0.3))
        for measure in ("nDCG@20", "P@20")
    ]
    table = pl.DataFrame(
        rows,
        schema={
            "parameter": pl.String,
            "value": pl.Float64,
            "measure": pl.String,
            "validation": pl.Float64,
            "best_epoch": pl.Int32,
            "fold": pl.Int32,
            "seed": pl.Int64,
        },
        orient="row",
    )
    figure = sweeps_figure(table)
    assert figure.png[:4] == b"\x89PNG"
    assert "mean of 2 training unit(s)" in figure.caption and "rate=0.8" in figure.caption


def test_the_model1_section_tests_the_papers_pairs():
    """Model 1 rows against the multi-field BM25 of their tokens, BERT rows against BERT (short)."""
    fused = [
        "bm25+bm25(words)",
        "bm25+bm25(wp)",
        "bm25+model1(words)",
        "bm25+model1(wp)",
        "bm25+nn-model1",
        "bm25+nn-model1-exp",
        "bert-model1",
        "bert-vanilla",
    ]
    runs = {name: 0.3 + 0.01 * i for i, name in enumerate(["bm25", "bert", *fused])}
    rows = [
        (run, f"q{i}", m, v + 0.01 * i)
        for run, v in runs.items()
        for i in range(5)
        for m in ("nDCG@10", "RR@10", "AP", "RR@100", "nDCG@100")
    ]
    per_query = pl.DataFrame(rows, schema=list(PER_QUERY_EVAL), orient="row").cast(PER_QUERY_EVAL)
    inputs = {
        "candidate_runs": _runs("bm25"),
        "reranked_runs": _runs("bert"),
        "fusion_runs": _runs(*fused),
        "ghrm_runs": _runs(),
        "cet_runs": _runs(),
    }
    recall = ReportFigure.from_figure("recall", "Recall", matplotlib.figure.Figure())
    reports = _sections(per_query, inputs, SignificanceConfig(n_resamples=100), recall)
    shown = {r.title: (r.baseline, sorted(r.comparison["run_name"].unique())) for r in reports}
    title = "Lexical translation: BM25 + Model 1 (Table 2)"
    assert shown[title] == ("bm25", sorted(["bm25", "bert", *fused]))
    assert shown[f"{title}: the paper's test against bm25+bm25(words)"] == (
        "bm25+bm25(words)",
        ["bm25+bm25(words)", "bm25+model1(words)"],
    )
    assert shown[f"{title}: the paper's test against bm25+bm25(wp)"] == (
        "bm25+bm25(wp)",
        ["bm25+bm25(wp)", "bm25+model1(wp)", "bm25+nn-model1", "bm25+nn-model1-exp"],
    )
    assert shown[f"{title}: the paper's test against bert"] == ("bert", ["bert", "bert-model1", "bert-vanilla"])


def test_the_cet_section_gets_figure4_from_the_dev_sweeps_of_the_manifest():
    from assets.defs.model_report import CET_SECTION, cet_figures

    manifest = pl.DataFrame(
        {
            "run_name": ["naive", "cet", "cet-tau2", "rocketqa"],
            "method": ["naive", "cet", "cet", "rocketqa"],
            "tau": [None, 1.0, 2.0, None],
            "sweep": ["", "tau", "tau", ""],
            "sweep_value": [None, 1.0, 2.0, None],
            "dev_mrr10": [0.3, 0.4, 0.35, 0.32],
            "notes": ["{}", "{}", "{}", '{"eta": 0.1, "eta_quantile": 0.9}'],
        }
    )
    (figure,) = cet_figures(manifest)[CET_SECTION]
    assert figure.name == "cet_sweeps" and "dev" in figure.caption
    assert cet_figures(manifest.with_columns(sweep=pl.lit(""))) == {}  # no sweep, no figure
    assert cet_figures(manifest.drop("sweep")) == {}  # an older manifest


def test_reranked_runs_read_bm25_below_their_top_k_and_their_interpolations_are_shown():
    from assets.defs.model_report import BASELINE_ROWS, complete_below_k

    bm25 = pl.DataFrame(
        [("q1", d, 5.0 - r, r, "bm25") for r, d in enumerate("abcd", start=1)],
        schema=["query_id", "doc_id", "score", "rank", "run_name"],
        orient="row",
    ).cast({"rank": pl.Int32})
    reranked = (
        bm25.head(2)
        .reverse()
        .with_columns(
            rank=pl.Series([1, 2], dtype=pl.Int32), run_name=pl.lit("knrm"), seed=pl.lit(None, dtype=pl.Int64)
        )
    )
    qrels = pl.DataFrame({"query_id": ["q1"], "doc_id": ["d"], "relevance": [1]}).cast({"relevance": pl.Int32})
    assert evaluate_run(reranked, qrels, ["AP"])["value"].item() == 0.0  # depth 2: d never retrieved
    full = complete_below_k(reranked, bm25)
    assert full["doc_id"].to_list() == ["b", "a", "c", "d"] and full.columns == reranked.columns
    assert evaluate_run(full, qrels, ["AP"])["value"].item() == pytest.approx(1 / 4)  # as BM25's own AP
    assert "knrm+bm25" in BASELINE_ROWS["php"] and "cedr-knrm+bm25" in BASELINE_ROWS["model1"]
    notes = [s.note for s in SECTIONS if s.inputs in (("neural_baselines",), ("ghrm_runs",), ("reranked_runs",))]
    assert all("beyond the papers" in note for note in notes)


def test_the_sections_of_word_based_models_name_their_word_vectors():
    from assets.defs.model_report import vectors_note

    note = vectors_note(pl.DataFrame({"source": ["minilm"], "dim": [384]}))
    assert "MiniLM's input embeddings" in note and "384-d" in note
    assert "word2vec trained on this collection" in vectors_note(pl.DataFrame({"source": ["trained"], "dim": [50]}))
    assert "/data/glove.txt" in vectors_note(pl.DataFrame({"source": ["/data/glove.txt"], "dim": [300]}))
    names = ["bm25", "knrm", "knrm+bm25"]
    rows = [
        (run, f"q{i}", m, 0.1 * k + 0.01 * i)
        for k, run in enumerate(reversed(names))
        for i in range(5)
        for m in ["RR@10", "RR@100", "nDCG@10", "nDCG@100"]
    ]
    per_query = pl.DataFrame(rows, schema=list(PER_QUERY_EVAL), orient="row").cast(PER_QUERY_EVAL)
    inputs = {"candidate_runs": _runs("bm25"), "neural_baselines": _runs("knrm", "knrm+bm25")}
    recall = ReportFigure.from_figure("recall", "Recall", matplotlib.figure.Figure())
    reports = _sections(per_query, inputs, SignificanceConfig(n_resamples=100), recall, vectors=note)
    baselines = next(r for r in reports if r.title.startswith("Neural ranking baselines"))
    assert note in baselines.notes and "beyond the papers" in baselines.notes
    assert baselines.comparison["run_name"].unique(maintain_order=True).to_list() == names  # beside the pure row
    from assets.defs.model_report import beside_pure

    assert beside_pure(["bm25", "knrm", "drmm", "drmm+bm25", "knrm+bm25", "x+bm25"]) == [
        "bm25",
        "knrm",
        "knrm+bm25",
        "drmm",
        "drmm+bm25",
        "x+bm25",
    ]


def test_cet_rankings_are_completed_below_k_by_the_candidates_each_reranked():
    """Deep measures in CET's section compare like with like: a CET ranker's top k over the run it
    reranked (dense; BM25 for bm25+bert), as dense's own full row is."""
    from assets.defs.model_report import CET_SECTION, SECTIONS, complete_cet_below_k

    def run(name, docs):
        return pl.DataFrame(
            [("q1", d, 10.0 - r, r, name) for r, d in enumerate(docs, start=1)],
            schema=["query_id", "doc_id", "score", "rank", "run_name"],
            orient="row",
        ).cast({"rank": pl.Int32})

    candidate_runs = pl.concat([run("dense", "abcdef"), run("bm25", "fedcba")])
    seed = pl.lit(0, dtype=pl.Int64)
    cet_runs = pl.concat([run("cet", "ba"), run("naive", "ab"), run("bm25+bert", "ef")]).with_columns(seed=seed)
    manifest = pl.DataFrame({"run_name": ["cet", "bm25+bert"], "candidates": ["dense", "bm25"]})
    full = complete_cet_below_k(cet_runs, candidate_runs, manifest)
    ranked = {
        name: group.sort("rank")["doc_id"].to_list()
        for (name,), group in full.partition_by("run_name", as_dict=True).items()
    }
    assert ranked == {
        "cet": ["b", "a", "c", "d", "e", "f"],  # dense below k
        "naive": ["a", "b", "c", "d", "e", "f"],  # not in the manifest: the strong run, dense
        "bm25+bert": ["e", "f", "d", "c", "b", "a"],  # BM25 below k
    }
    assert full.columns == cet_runs.columns and full["seed"].null_count() == 0
    assert full.filter(pl.col("run_name") == "cet").sort("rank")["score"].is_sorted(descending=True)
    qrels = pl.DataFrame({"query_id": ["q1"], "doc_id": ["f"], "relevance": [1]}).cast({"relevance": pl.Int32})
    deep = evaluate_run(full.filter(pl.col("run_name") == "cet").drop("seed"), qrels, ["AP"])
    assert deep["value"].item() == pytest.approx(1 / 6)  # f at rank 6, as in dense's own list
    (note,) = [s.note for s in SECTIONS if s.title == CET_SECTION]
    assert "dense's row" in note and "BM25's other candidates" not in note


def test_a_sections_heading_states_the_depth_its_rows_rerank_and_two_depths_are_refused():
    from assets.defs.model_report import candidate_depths, depth_heading

    def run(name, per_query, seeds=(0,)):
        rows = [
            (f"q{q}", f"d{r}", 1.0 / r, r, name, s) for s in seeds for q in range(3) for r in range(1, per_query + 1)
        ]
        return pl.DataFrame(rows, schema=["query_id", "doc_id", "score", "rank", "run_name", "seed"], orient="row")

    short_query = run("ghrm", 30).filter(~((pl.col("query_id") == "q0") & (pl.col("rank") > 5)))
    inputs = {
        "candidate_runs": run("bm25", 100),  # a first stage: no depth of its own
        "reranked_runs": pl.concat([run("bert", 20), run("php", 20, seeds=(0, 1))]),
        "ghrm_runs": short_query,  # one query has 5 candidates only: the depth is still 30
        "cet_runs": run("cet", 20).drop("seed"),
    }
    depths = candidate_depths(inputs)
    assert depths == {"bert": 20, "php": 20, "ghrm": 30, "cet": 20}
    assert depth_heading(["bm25", "bert", "php"], depths) == ", k = 20"
    assert depth_heading(["bm25", "dense"], depths) == ""
    with pytest.raises(ValueError, match=r"'GHRM' rerank different depths \(top 20: bert, php; top 30: ghrm\)"):
        depth_heading(["bm25", "ghrm", "bert", "php"], depths, "GHRM")


@pytest.mark.parametrize("profile, k", [("demo", 20), ("paper", 100)])
def test_every_reranker_of_a_profile_reranks_the_same_depth(profile, k):
    """One k in every section of a profile's report: GHRM, the baselines, `bert` and the PHP rerankers,
    BERT-Model1, BERT-vanilla and the fused Model 1 rows rerank their candidates' top k; CET, alone in
    its section, reranks its own (20 in the demo, the paper's 1000)."""
    from assets.defs.php.config import RerankSettings
    from dagster_ir.methods.baselines import reranker
    from dagster_ir.methods.cet import model as cet
    from dagster_ir.methods.ghrm import config as ghrm
    from dagster_ir.methods.model1 import runs as model1

    depths = {
        "reranked_runs": RerankSettings(profile=profile).rerank_depth(),
        "neural_baselines": reranker.PROFILES[profile].rerank_depth,
        "ghrm_runs": ghrm.PROFILES[profile].training.rerank_depth,
        "fusion_runs": model1.PROFILES[profile].depth,
        "bert-model1": model1.PROFILES[profile].bert_depth,
    }
    assert set(depths.values()) == {k}, depths
    assert cet.PROFILES[profile].rerank_depth == {"demo": 20, "paper": 1000}[profile]


def test_the_notes_say_per_trained_row_in_how_many_units_the_start_was_kept():
    from assets.defs.model_report import kept_weights

    manifest = pl.DataFrame(
        {
            "run_name": ["bert", "bert", "php", "php", "harp"],
            "chosen_epoch": [0, 2, 1, 3, 1],
            "start_score": [0.40, 0.30, 0.20, 0.22, None],  # harp's start never scored: left out
            "dev_score": [0.40, 0.36, 0.30, 0.32, 0.5],
            "fold": [0, 1, 0, 1, 0],
        }
    )
    assert kept_weights(manifest) == {
        "bert": "bert: start kept in 1 of 2 units (per unit: start, epoch 2), "
        "mean validation score: start 0.350, kept weights 0.380",
        "php": "php: start kept in 0 of 2 units (per unit: epoch 1, epoch 3), "
        "mean validation score: start 0.210, kept weights 0.310",
    }
    assert kept_weights(manifest.drop("start_score")) == {} and kept_weights(pl.DataFrame()) == {}
    per_query = pl.DataFrame(
        [
            (run, f"q{i}", m, 0.1 * i)
            for run in ("bm25", "bert", "php")
            for i in range(4)
            for m in ("RR@10", "RR@100", "nDCG@10", "nDCG@100")
        ],
        schema=list(PER_QUERY_EVAL),
        orient="row",
    ).cast(PER_QUERY_EVAL)
    recall = ReportFigure.from_figure("recall", "Recall", matplotlib.figure.Figure())
    inputs = {"candidate_runs": _runs("bm25"), "reranked_runs": _runs("bert", "php")}
    reports = _sections(per_query, inputs, SignificanceConfig(n_resamples=50), recall, kept=kept_weights(manifest))
    (php,) = [r for r in reports if r.title.startswith("PHP: BERT and PHP")]
    assert "Weights kept, chosen on each unit's validation queries: bert: start kept in 1 of 2 units" in php.notes


def test_the_kept_weights_recorded_in_metadata_reach_the_report_beside_the_cross_encoders_manifest():
    """Trained assets record KEPT_WEIGHTS; the report reads each partition's latest materialization."""
    import dagster as dg

    from assets.defs.model_report import kept_of, kept_weights
    from assets.lib.metadata import KEPT_WEIGHTS, kept_weights_entry, recorded_kept

    epochs = iter([[0, 2], [1, 1], [3, 3]])  # fold-0's first materialization is replaced by its second

    @dg.asset(partitions_def=dg.StaticPartitionsDefinition(["c/fold-0", "c/fold-1", "d/fold-0"]))
    def trained(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        rows = [
            {"run_name": name, "unit": context.partition_key, "chosen_epoch": epoch, "start_score": 0.3,
             "dev_score": 0.3 if epoch == 0 else 0.41234}
            for name, epoch in zip(("knrm", "drmm"), next(epochs))
        ]  # fmt: skip
        return dg.MaterializeResult(metadata={KEPT_WEIGHTS: kept_weights_entry(rows)})

    @dg.asset(partitions_def=dg.StaticPartitionsDefinition(["c"]))
    def untrained() -> dg.MaterializeResult:
        return dg.MaterializeResult(metadata={"rows": 1})

    instance = dg.DagsterInstance.ephemeral()
    for partition in ("c/fold-0", "c/fold-1", "c/fold-0"):
        assert dg.materialize([trained], instance=instance, partition_key=partition).success
    assert dg.materialize([untrained], instance=instance, partition_key="c").success
    recorded = recorded_kept(instance, [("trained", "c/fold-0"), ("trained", "c/fold-1"), ("untrained", "c")])
    assert recorded.sort("unit", "run_name").rows() == [
        ("drmm", "c/fold-0", 3, 0.3, 0.4123),
        ("knrm", "c/fold-0", 3, 0.3, 0.4123),
        ("drmm", "c/fold-1", 1, 0.3, 0.4123),
        ("knrm", "c/fold-1", 1, 0.3, 0.4123),
    ]
    assert recorded_kept(instance, [("trained", "d/fold-0")]).height == 0  # never materialized
    cross_encoder = pl.DataFrame(
        {"run_name": ["bert"], "chosen_epoch": [0], "start_score": [0.5], "dev_score": [0.5], "fold": [0]}
    )
    notes = kept_weights(kept_of(cross_encoder, recorded))
    assert notes["bert"] == (
        "bert: start kept in 1 of 1 unit (per unit: start), mean validation score: start 0.500, kept weights 0.500"
    )
    assert notes["knrm"].startswith("knrm: start kept in 0 of 2 units (per unit: epoch 3, epoch 1),")
    assert kept_of(None, None).height == 0 and kept_of(pl.DataFrame(), recorded).height == 4
