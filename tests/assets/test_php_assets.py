"""PHP assets: config mapping, held-out articles, init names; a tiny end-to-end materialization (slow)."""

from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from assets.defs.php import (
    CrossEncoderSettings,
    PhpBaselineSettings,
    PhpSettings,
    RerankSettings,
    php_assets,
    php_checks,
)
from assets.defs.php.assets import eval_articles, php_baseline_examples, php_examples, resolve_init
from assets.defs.php.checks import php_baseline_examples_are_contrastive
from dagster_ir.methods import php
from dagster_ir.neural import finetune
from dagster_ir.schemas import PHP_GROUPS


def test_settings_map_onto_the_profiles_and_every_override_matters():
    fp32_cpu = {"device": "cpu", "bf16": False}  # the profiles' own; by default the device resolves ("auto")
    assert PhpSettings(**fp32_cpu).to_domain() == php.PROFILES["demo"]
    assert PhpSettings(profile="paper", **fp32_cpu).to_domain() == php.PROFILES["paper"]
    custom = PhpSettings(
        n_negatives=5,
        anchor_mask_prob=0.3,
        mlm_weight=0.0,
        max_examples=0,
        lr=2e-5,
        max_steps=0,
        hp_epochs=3,
        device="cuda",
        bf16=True,
    ).to_domain()
    assert (custom.n_negatives, custom.anchor_mask_prob, custom.mlm_weight, custom.max_examples) == (5, 0.3, 0.0, None)
    assert (custom.train.lr, custom.train.max_steps, custom.hp_epochs) == (2e-5, None, 3)
    assert (custom.train.device, custom.train.bf16) == ("cuda", True)
    tuned = CrossEncoderSettings(profile="paper", epochs=2, batch_size=16, n_negatives=7).to_domain()
    assert tuned.train.epochs == 2 and tuned.train.batch_size == 16 and tuned.n_negatives == 7
    assert tuned.train.lr == finetune.PROFILES["paper"].train.lr
    assert RerankSettings().rerank_depth() == 20 and RerankSettings(profile="paper").rerank_depth() == 100
    default = CrossEncoderSettings().to_domain()
    assert (default.train_pairs, default.pair_depth, default.select_start) == ("candidates", 20, True)
    changed = CrossEncoderSettings(train_pairs="negatives", train_depth=50, select_start=False).to_domain()
    assert (changed.train_pairs, changed.pair_depth, changed.select_start) == ("negatives", 50, False)
    with pytest.raises(ValueError, match="unknown profile 'fast'"):
        PhpSettings(profile="fast").to_domain()


def test_dev_and_test_articles_of_the_evaluation_collection_are_held_out():
    queries = pl.DataFrame(
        {"query_id": ["a/x", "a/y", "b/x", "c/x"], "text": ["t"] * 4, "article_id": ["a", "a", "b", "c"]}
    )
    splits = pl.DataFrame(
        {
            "query_id": ["a/x", "a/y", "b/x", "c/x"],
            "split": ["test", "test", "train/model", "dev"],
            "fold": [0, 0, 1, 2],
        }
    )
    assert eval_articles(queries, splits) == ["a", "c"]
    assert eval_articles(queries.drop("article_id"), splits) == []
    assert eval_articles(None, None) == []


def test_init_names_resolve_to_folders():
    stages = {"hp": "/m/hp", "shp": "/m/shp", "mrds": "/m/mrds"}
    ablations = pl.DataFrame({"variant": ["no-mlm"], "path": ["/m/ab/no-mlm"]})
    assert resolve_init("bert", stages, ablations) == ""
    assert resolve_init("php", stages, ablations) == "/m/mrds"
    assert resolve_init("php-shp", stages, ablations) == "/m/shp"
    assert resolve_init("php-no-mlm", stages, ablations) == "/m/ab/no-mlm"
    with pytest.raises(ValueError, match="php-anchor-0.9"):
        resolve_init("php-anchor-0.9", stages, ablations)
    baselines = pl.DataFrame({"method": ["ict", "harp"], "path": ["/m/b/ict", "/m/b/harp"]})
    assert resolve_init("harp", stages, ablations, baselines) == "/m/b/harp"
    with pytest.raises(ValueError, match="'wlp'; choose from .*'ict', 'harp'"):
        resolve_init("wlp", stages, ablations, baselines)


def test_cranfield_pretrains_and_fine_tunes_all_four_table3_baselines(monkeypatch):
    import assets.defs.php.assets as php_assets_module
    from dagster_ir.collections import load_collections_config

    specs = load_collections_config(Path(__file__).parents[2] / "examples" / "cranfield.yaml")
    inits = specs["cranfield"].assets["cross_encoder"]["inits"]
    assert {"bert", "php", *php.METHODS} <= set(inits)
    monkeypatch.setattr(php_assets_module, "collection_specs", lambda: specs)
    assert php_assets_module.baselines_to_pretrain(PhpBaselineSettings()) == ["ict", "wlp", "prop", "harp"]
    monkeypatch.setattr(php_assets_module, "collection_specs", lambda: {})
    assert php_assets_module.baselines_to_pretrain(PhpBaselineSettings()) == ["ict", "harp"]  # the default inits
    assert php_assets_module.baselines_to_pretrain(PhpBaselineSettings(methods=["wlp"])) == ["wlp"]
    with pytest.raises(ValueError, match="unknown methods \\['bm25'\\]"):
        php_assets_module.baselines_to_pretrain(PhpBaselineSettings(methods=["bm25"]))


def test_baseline_settings_share_phps_and_map_onto_the_generators():
    settings = PhpBaselineSettings(n_negatives=4, mu=50.0, harp_objectives=["rdp"], max_length=64)
    assert settings.to_domain() == PhpSettings(n_negatives=4, max_length=64).to_domain()
    generators = settings.generator_config()
    assert (generators.n_negatives, generators.mu, generators.harp_objectives) == (4, 50.0, ("rdp",))
    assert generators.seed == settings.to_domain().train.seed
    assert PhpBaselineSettings(baseline_negatives=1).generator_config().n_negatives == 1
    assert generators.max_examples == 20_000  # bounded by default
    assert PhpBaselineSettings(baseline_max_examples=0).generator_config().max_examples is None  # 0: every example


def test_php_baseline_examples_asset_leaves_out_held_out_articles():
    from dagster_ir.schemas import LINKS, SEGMENTS

    texts = {
        "a": "Rivers flow. They reach the b sea.",
        "b": "The sea is deep. It is salty.",
        "c": "Castles are old. One stands by the a river.",
    }
    segments = pl.DataFrame([(k, k, 1, "", t, 6) for k, t in texts.items()], schema=list(SEGMENTS), orient="row").cast(
        SEGMENTS
    )
    links = pl.DataFrame(
        [
            ("a", 1, "b", texts["a"].index(" b ") + 1, texts["a"].index(" b ") + 2, "B", "b"),
            ("c", 1, "a", texts["c"].index(" a ") + 1, texts["c"].index(" a ") + 2, "A", "a"),
        ],
        schema=list(LINKS),
        orient="row",
    ).cast(LINKS)
    queries = pl.DataFrame({"query_id": ["c/x"], "text": ["t"], "article_id": ["c"]})
    splits = pl.DataFrame({"query_id": ["c/x"], "split": ["test"], "fold": [0]})
    frame = php_baseline_examples(
        dg.build_asset_context(),
        config=PhpBaselineSettings(n_negatives=1),
        wiki_articles=segments.lazy(),
        wiki_links=links,
        queries=queries,
        query_splits=splits,
    )
    assert set(frame["method"]) == {"ict", "prop", "harp"}  # WLP: a's only other linking segment is c's, held out
    assert frame.filter(pl.col("method") == "harp").select("objective", "key").sort("objective").rows() == [
        ("rdp", "a->b"),
        ("rqp", "b"),
    ]
    assert not any("Castles" in t for t in frame["docs"].explode().to_list())
    assert php_baseline_examples_are_contrastive(frame).passed
    leaking = pl.DataFrame([("ict", "ict", "a/1", ["q", "q"], ["d", "d"])], schema=php.BASELINE_EXAMPLES, orient="row")
    assert not php_baseline_examples_are_contrastive(leaking).passed  # the preferred pair repeated


def test_php_examples_asset_builds_every_stage_and_leaves_out_held_out_articles():
    groups = pl.DataFrame(
        [("a", 1, "b", "D1"), ("a", 1, "c", "D2"), ("a", 1, "e", "D3"), ("a", 1, "f", "D4")],
        schema=list(PHP_GROUPS),
        orient="row",
    ).cast(PHP_GROUPS)
    queries = pl.DataFrame({"query_id": ["f/x"], "text": ["t"], "article_id": ["f"]})
    splits = pl.DataFrame({"query_id": ["f/x"], "split": ["test"], "fold": [0]})
    context = dg.build_asset_context()
    graph = _link_graph([("a", "b", True), ("a", "c", True), ("a", "e", False), ("a", "f", True)])
    frame = php_examples(
        context,
        config=PhpSettings(n_negatives=2),
        php_groups=groups,
        queries=queries,
        query_splits=splits,
        wiki_link_graph=graph,
    )
    assert frame.filter(pl.col("stage") == "hp").height == 0  # its only negative, f, is held out
    assert frame.filter(pl.col("stage") == "shp")["pos_id"].sort().to_list() == ["b", "c"]
    kept = php_examples(
        dg.build_asset_context(),
        config=PhpSettings(n_negatives=2, exclude_eval_articles=False),
        php_groups=groups,
        queries=queries,
        query_splits=splits,
        wiki_link_graph=graph,
    )
    assert kept.filter(pl.col("stage") == "hp").height == 3
    literal = php_examples(
        dg.build_asset_context(),
        wiki_link_graph=graph,
        queries=queries,
        query_splits=splits,
        config=PhpSettings(n_negatives=2, exclude_eval_articles=False, d4_rule="literal", fill_negatives="none"),
        php_groups=groups,
    )
    assert literal.filter(pl.col("stage") == "hp").height == 0  # f links back to a: no D4 under the literal rule


def _link_graph(edges):
    from dagster_ir.schemas import LINK_GRAPH

    rows = [(src, dst, 1, 1, both, 1 if both else None) for src, dst, both in edges]
    return pl.DataFrame(rows, schema=list(LINK_GRAPH), orient="row").cast(LINK_GRAPH)


def _upstream_assets() -> list:
    """The assets the PHP assets read (the report, which reads ours, is left out)."""
    from assets.defs.collections import collection_assets
    from assets.defs.retrieval import retrieval_assets
    from assets.defs.wiki import wiki_assets

    return [*wiki_assets, *collection_assets, *retrieval_assets]


def test_assets_and_checks_load_into_definitions():
    from assets.definitions import resources

    defs = dg.Definitions(assets=_upstream_assets() + php_assets, asset_checks=php_checks, resources=resources())
    graph = defs.resolve_asset_graph()
    parents = {key.to_user_string() for key in graph.get(dg.AssetKey("php_mrds")).parent_keys}
    assert {"php_shp", "php_examples", "wiki_articles", "wiki_links"} <= parents
    parents = {key.to_user_string() for key in graph.get(dg.AssetKey("cross_encoder")).parent_keys}
    assert {"negatives", "php_mrds", "php_ablations", "candidate_runs"} <= parents


# --- end to end on tiny tables with a tiny backbone ---------------------------------------------

TOPICS = {
    "a": "river water flows to the sea",
    "b": "castle walls of old stone",
    "c": "mountain peaks and snow",
    "d": "music of the opera house",
    "e": "football teams and their players",
    "f": "planets around stars",
    "g": "bread baked in ovens",
}


def _upstream_tables(root) -> None:
    """Tables of the upstream assets, where the IO manager looks for them."""
    from dagster_ir.schemas import LINKS, NEGATIVES, QRELS, RUN, SEGMENTS
    from dagster_ir.storage.parquet import table_path, write_table

    def put(name, frame, partition=None):
        write_table(frame, table_path(root, [name], partition), partition=partition)

    segments = [
        (k, k.upper(), n, "" if n == 1 else "Part", f"{text} part {n} links {' '.join(TOPICS)}", 9)
        for k, text in TOPICS.items()
        for n in (1, 2)
    ]
    put("wiki_articles", pl.DataFrame(segments, schema=list(SEGMENTS), orient="row").cast(SEGMENTS), "dump")
    # Article i's segment 1 links articles i+1 (D1), i+2 (D2), i+3 (D3); segment 2 links i+3 and i+4 (D3).
    names, links, groups = list(TOPICS), [], []
    layout = {1: {1: "D1", 2: "D2", 3: "D3", 4: "D4"}, 2: {3: "D3", 4: "D3", 1: "D4", 2: "D4"}}
    for i, src in enumerate(names):
        for n, by_offset in layout.items():
            text = segments[i * 2 + n - 1][4]
            for offset, group in by_offset.items():
                dst = names[(i + offset) % len(names)]
                groups.append((src, n, dst, group))
                if group != "D4":
                    start = text.rindex(f" {dst}") + 1
                    links.append((src, n, dst, start, start + 1, dst.upper(), dst))
    put("wiki_links", pl.DataFrame(links, schema=list(LINKS), orient="row").cast(LINKS))
    put("php_groups", pl.DataFrame(groups, schema=list(PHP_GROUPS), orient="row").cast(PHP_GROUPS))
    from dagster_ir.wiki.graph import build_link_graph

    put("wiki_link_graph", build_link_graph(pl.DataFrame(links, schema=list(LINKS), orient="row").cast(LINKS)))
    docs = [(f"{k}/{n}", "", f"{text} part {n}") for k, text in TOPICS.items() for n in (1, 2)]
    put("corpus", pl.DataFrame(docs, schema=["doc_id", "title", "text"], orient="row"), "wiki-car")
    queries = pl.DataFrame(
        {
            "query_id": [f"{k}/q" for k in TOPICS],
            "text": [t.split()[0] for t in TOPICS.values()],
            "article_id": list(TOPICS),
        }
    )
    put("queries", queries, "wiki-car")
    put(
        "qrels",
        pl.DataFrame([(f"{k}/q", f"{k}/2", 1) for k in TOPICS], schema=list(QRELS), orient="row").cast(QRELS),
        "wiki-car",
    )
    splits = ["train/model"] * 5 + ["dev", "test"]
    put(
        "query_splits",
        pl.DataFrame({"query_id": queries["query_id"], "split": splits, "fold": [i % 5 for i in range(7)]}).cast(
            {"fold": pl.Int32}
        ),
        "wiki-car",
    )
    others = {k: [o for o in TOPICS if o != k] for k in TOPICS}
    put(
        "negatives",
        pl.DataFrame(
            [(f"{k}/q", f"{k}/2", f"{o}/1", i + 2, i) for k in list(TOPICS)[:3] for i, o in enumerate(others[k][:3])],
            schema=list(NEGATIVES),
            orient="row",
        ).cast(NEGATIVES),
        "wiki-car",
    )
    run = [
        (f"{k}/q", doc, 10.0 - r, r, "bm25")
        for k in TOPICS
        for r, doc in enumerate([f"{o}/1" for o in others[k]] + [f"{k}/2"], start=1)
    ]
    put("candidate_runs", pl.DataFrame(run, schema=list(RUN), orient="row").cast(RUN), "wiki-car")


@pytest.mark.slow
def test_php_and_rerankers_materialize_end_to_end(tmp_path):
    from assets.definitions import resources
    from dagster_ir.neural.backbone import make_tiny_backbone
    from dagster_ir.storage.catalog import Catalog

    tiny = str(make_tiny_backbone(tmp_path / "tiny", hidden_size=16))
    root = tmp_path / "data"
    _upstream_tables(root)
    php_config = {"backbone": tiny, "max_length": 32, "max_query_length": 12, "n_negatives": 2, "batch_size": 2}
    ce_config = {
        "backbone": tiny,
        "max_length": 32,
        "max_query_length": 8,
        "n_negatives": 2,
        "batch_size": 2,
        "inits": ["bert", "php", "php-no-mlm", "harp"],
        "epochs": 2,
    }
    run_config = {
        "ops": {
            "php_examples": {"config": php_config},
            "php_hp": {"config": php_config},
            "php_baseline_examples": {"config": php_config},
            "php_baselines": {"config": {**php_config, "methods": ["harp"]}},
            "php_shp": {"config": php_config},
            "php_mrds": {"config": php_config},
            "php_ablations": {"config": {**php_config, "variants": ["no-mlm", "negatives-1"]}},
        }
    }
    everything = _upstream_assets() + php_assets
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("wiki_dump", ["dump"])
        pretrained = dg.materialize(
            everything,
            selection=[
                "php_examples",
                "php_hp",
                "php_shp",
                "php_mrds",
                "php_ablations",
                "php_baseline_examples",
                "php_baselines",
            ],
            resources=resources(str(root)),
            instance=instance,
            run_config=run_config,
        )
        assert pretrained.success
        examples = pretrained.asset_value("php_examples")
        assert set(examples["stage"]) == {"hp", "shp", "mrds"}
        held_out = {"f", "g"}  # the articles of wiki-car's dev and test queries
        assert not held_out & set(examples["article_id"]) and not held_out & set(examples["pos_id"])
        ablations = pretrained.asset_value("php_ablations")
        assert ablations["variant"].to_list() == ["no-mlm", "negatives-1"] and (ablations["steps"] > 0).all()
        hp = pretrained.asset_materializations_for_node("php_hp")[0].metadata
        assert hp["steps"].value > 0 and "loss_curve" in hp and hp["seed"].value == 42
        tuned = dg.materialize(
            everything,
            selection=["cross_encoder", "reranked_runs"],
            partition_key="wiki-car/seed-0",
            resources=resources(str(root)),
            instance=instance,
            run_config={"ops": {"cross_encoder": {"config": ce_config}}},
        )
        assert tuned.success
    manifest = tuned.asset_value("cross_encoder")
    assert manifest["run_name"].to_list() == ["bert", "php", "php-no-mlm", "harp"]
    assert manifest["dev_score"].is_not_null().all() and manifest["start_score"].is_not_null().all()  # chosen on dev
    assert manifest["chosen_epoch"].is_between(0, 2).all() and set(manifest["head"]) == {"cls"}  # the tiny backbone
    metadata = tuned.asset_materializations_for_node("cross_encoder")[0].metadata
    assert not Path(metadata["training_curves_png"].value).is_absolute()  # under the data directory
    assert (root / metadata["training_curves_png"].value).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert metadata["bert_curve"].value["epoch"] == [0, 1, 2] and metadata["train_pairs"].value == "candidates"
    assert metadata["bert_cross_attention"].value == "full" and "bert_gates" not in metadata  # a [CLS] backbone
    assert manifest["train_seed"].to_list() == [42] * 4 and manifest["seed"].to_list() == [0] * 4
    php_steps = sum(pretrained.asset_value(f"php_{stage}")["steps"].item() for stage in ("hp", "shp", "mrds"))
    baseline_steps = pretrained.asset_value("php_baselines")["steps"].item()
    assert 0 < baseline_steps <= php_steps  # HARP's RDP (one example per link), within PHP's budget
    reranked = Catalog(root).query("select run_name, query_id, seed, count(*) as n from reranked_runs group by all")
    pure = {"bert", "php", "php-no-mlm", "harp", "bi-encoder"}
    assert set(reranked["run_name"]) == pure | {f"{n}+bm25" for n in pure} and (reranked["n"] == len(TOPICS)).all()
    assert set(reranked["query_id"]) == {"g/q"} and set(reranked["seed"]) == {0}  # the unit's test queries only
    reranked_metadata = tuned.asset_materializations_for_node("reranked_runs")[0].metadata
    # the validation rerankings cross_encoder kept beside each model are read, not computed again
    assert reranked_metadata["validation reused from cross_encoder"].value == "bert, php, php-no-mlm, harp"
