"""The Table 3 baselines' example generators on a handmade four-article dump, and their training."""

import math
from collections import Counter
from dataclasses import replace

import numpy as np
import polars as pl
import pytest
import torch

from dagster_ir.methods.php import (
    BaselineConfig,
    PhpConfig,
    build_baseline_examples,
    pairwise_hinge,
    pretrain_baseline,
)
from dagster_ir.methods.php.baselines import BASELINE_EXAMPLES, _LanguageModels, sentences, words
from dagster_ir.neural.backbone import make_tiny_backbone
from dagster_ir.neural.training import TrainConfig
from dagster_ir.schemas import LINKS, SEGMENTS

RIVER_1 = "A river is water. It flows to the sea."
RIVER_2 = "Rivers feed lakes."
SEA = "The sea is salty. Ships sail on it."
CASTLE = "A castle is a fort. It stands by the river."
LAKE = "A lake is still water."
TEXTS = {("river", 1): RIVER_1, ("river", 2): RIVER_2, ("sea", 1): SEA, ("castle", 1): CASTLE, ("lake", 1): LAKE}
RIVER = f"{RIVER_1} {RIVER_2}"  # the article lead first, as a document


def _segments():
    rows = [(a, a.title(), n, "" if n == 1 else "Course", t, len(t.split())) for (a, n), t in TEXTS.items()]
    return pl.DataFrame(rows, schema=list(SEGMENTS), orient="row").cast(SEGMENTS)


def _link(src, seg, anchor, target):
    start = TEXTS[(src, seg)].index(anchor)
    return (src, seg, anchor, start, start + len(anchor), target.title(), target)


def _links():
    # river/1 -> sea ("sea"), river/2 -> lake ("lakes"), castle/1 -> river ("river"); a dangling link too
    rows = [
        _link("river", 1, "sea", "sea"),
        _link("river", 2, "lakes", "lake"),
        _link("castle", 1, "river", "river"),
        ("sea", 1, "Ships", 18, 23, "Ship", None),
    ]
    return pl.DataFrame(rows, schema=list(LINKS), orient="row").cast(LINKS)


TWO_NEGATIVES = BaselineConfig(n_negatives=2)


def _examples(method, config=TWO_NEGATIVES, exclude=()):
    return build_baseline_examples(method, _segments(), _links(), config, exclude)


def _split(text):
    first, second = sentences(text)
    return {(first, second), (second, first)}


def test_ict_queries_are_a_sentence_and_documents_its_context():
    frame = _examples("ict")
    # segments with two sentences or more: river/1, sea/1, castle/1 (river/2 and lake/1 have one)
    assert frame["key"].to_list() == ["castle/1", "river/1", "sea/1"]
    rows = {r["key"]: r for r in frame.iter_rows(named=True)}
    contexts = {}
    for key, text in [("castle/1", CASTLE), ("river/1", RIVER_1), ("sea/1", SEA)]:
        queries, docs = rows[key]["queries"], rows[key]["docs"]
        assert (queries[0], docs[0]) in _split(text) and queries == [queries[0]] * 3
        contexts[key] = docs[0]
    for key in rows:  # the negatives: the contexts of the two other articles' examples
        assert sorted(rows[key]["docs"][1:]) == sorted(c for k, c in contexts.items() if k != key)
    assert set(frame["method"]) == set(frame["objective"]) == {"ict"}


def test_wlp_queries_are_a_lead_sentence_and_documents_a_linking_segment():
    frame = _examples("wlp")
    # lake <- river/2, sea <- river/1; river <- castle/1 has no negative (the only other linking
    # segments are river's own), so it gives no example
    assert frame.select("key", "docs").rows() == [
        ("river/2->lake", [RIVER_2, CASTLE, CASTLE]),
        ("river/1->sea", [RIVER_1, CASTLE, CASTLE]),
    ]
    assert frame["queries"][0].to_list() == [LAKE] * 3
    assert frame["queries"][1][0] in sentences(SEA)


def test_harp_rdp_prefers_the_linked_article_over_the_one_holding_the_anchor():
    frame = _examples("harp", BaselineConfig(harp_objectives=("rdp",)))
    assert frame.select("objective", "key", "queries", "docs").rows() == [
        ("rdp", "castle->river", ["river", "river"], [RIVER, CASTLE]),
        ("rdp", "river->lake", ["lakes", "lakes"], [LAKE, RIVER]),
        ("rdp", "river->sea", ["sea", "sea"], [SEA, RIVER]),
    ]


def test_harp_rqp_prefers_the_anchor_over_a_word_set_of_the_article():
    frame = _examples("harp", BaselineConfig(harp_objectives=("rqp",)))
    assert frame["key"].to_list() == ["lake", "river", "sea"]
    assert [q[0] for q in frame["queries"].to_list()] == ["lakes", "river", "sea"]
    assert frame["docs"].to_list() == [[LAKE] * 2, [RIVER] * 2, [SEA] * 2]
    vocabulary = set(words(" ".join(TEXTS.values())))
    assert all(set(q[1].split()) <= vocabulary for q in frame["queries"].to_list())
    both = _examples("harp")
    assert both["objective"].value_counts().sort("objective").rows() == [("rdp", 3), ("rqp", 3)]


def test_prop_prefers_the_word_set_of_higher_likelihood():
    config = BaselineConfig(mu=2.0, query_length_mean=2.0)
    frame = _examples("prop", config)
    assert frame["key"].to_list() == ["castle", "lake", "river", "sea"]
    documents = {"castle": CASTLE, "lake": LAKE, "river": RIVER, "sea": SEA}
    models = _LanguageModels(documents, 2.0)
    for key, queries, docs in frame.select("key", "queries", "docs").iter_rows():
        assert docs == [documents[key]] * 2
        better, worse = (q.split() for q in queries)
        assert better and worse and len(set(better)) == len(better)  # drawn without replacement
        assert models.log_likelihood(key, better) > models.log_likelihood(key, worse)
    assert frame.equals(_examples("prop", config))
    assert not frame.equals(_examples("prop", replace(config, seed=7)))


def test_language_model_is_dirichlet_smoothed_by_hand():
    models = _LanguageModels({"x": "red red blue", "y": "blue green"}, mu=2.0)
    # corpus: red 2, blue 2, green 1 of 5; p(red|x) = (2 + 2 * 2/5) / (3 + 2), p(green|x) = (0 + 2 * 1/5) / 5
    assert models.log_likelihood("x", ["red", "green"]) == pytest.approx(math.log(2.8 / 5) + math.log(0.4 / 5))
    assert words("The Red and the Blue") == ["red", "blue"]  # lower-cased, stop words out
    rng = np.random.default_rng(0)
    own = _LanguageModels({"x": "red red blue", "y": "green yellow"}, mu=1e-9)  # no smoothing: x's words only
    assert all(set(own.sample("x", rng, 5.0)) <= {"red", "blue"} for _ in range(50))
    drawn = Counter(w for _ in range(2000) for w in models.sample("y", rng, 1e-9))  # one word a draw
    # p(.|y) = (tf + 2 p(w|C)) / 4: blue 0.45, green 0.35, red 0.2
    expected = {"blue": 0.45, "green": 0.35, "red": 0.2}
    assert drawn.keys() == expected.keys()
    assert all(abs(drawn[w] / 2000 - p) < 0.035 for w, p in expected.items())  # 3 sd of 2000 draws
    assert sum(models.probability("y", w) for w in expected) == pytest.approx(1.0)


def test_excluded_articles_leave_every_generator():
    for method in ("ict", "wlp", "prop", "harp"):
        frame = _examples(method, exclude=["sea"])
        texts = [t for column in ("queries", "docs") for t in frame[column].explode().to_list()]
        assert not any(SEA in t or t in SEA for t in texts), method
    assert _examples("wlp", exclude=["sea"])["key"].to_list() == ["river/2->lake"]
    with pytest.raises(ValueError, match="unknown pre-training baseline 'bfs'"):
        _examples("bfs")
    with pytest.raises(ValueError, match="harp_objectives"):
        BaselineConfig(harp_objectives=("qdm",))


def _dump(n=40):
    """n articles of two segments: a lead of two sentences linking to the next article, a second linking 7 on."""
    texts, links = {}, []
    for i in range(n):
        name, after, later = f"a{i:02d}", f"a{(i + 1) % n:02d}", f"a{(i + 7) % n:02d}"
        texts[(name, 1)] = f"Article {name} tells of rivers {i} times. It leads to {after} by boat."
        texts[(name, 2)] = f"See also {later} for lakes and seas of size {i}."
        for seg, target in ((1, after), (2, later)):
            start = texts[(name, seg)].index(target)
            links.append((name, seg, target, start, start + len(target), target.title(), target))
    segments = pl.DataFrame(
        [(a, a.title(), s, "" if s == 1 else "More", t, len(t.split())) for (a, s), t in texts.items()],
        schema=list(SEGMENTS),
        orient="row",
    ).cast(SEGMENTS)
    return segments, pl.DataFrame(links, schema=list(LINKS), orient="row").cast(LINKS)


@pytest.mark.parametrize("method", ["ict", "wlp", "prop", "harp"])
def test_scans_and_a_cap_that_does_not_bind_give_the_table_of_frames(tmp_path, method):
    segments, links = _dump()
    segments.write_parquet(tmp_path / "segments.parquet")
    links.write_parquet(tmp_path / "links.parquet")
    config = BaselineConfig(n_negatives=2)
    frames = build_baseline_examples(method, segments, links, config, ["a05"])
    assert frames.height > 30
    scans = build_baseline_examples(
        method,
        pl.scan_parquet(tmp_path / "segments.parquet"),
        pl.scan_parquet(tmp_path / "links.parquet"),
        replace(config, max_examples=80),
        ["a05"],
    )
    assert scans.equals(frames)
    assert _examples(method).equals(
        build_baseline_examples(method, _segments(), _links(), replace(BaselineConfig(n_negatives=2), max_examples=5))
    )  # the handmade dump: at most 4 keys an objective


def test_several_methods_at_once_are_their_tables_in_order():
    segments, links = _dump()
    config = BaselineConfig(n_negatives=2, max_examples=7)
    methods = ("harp", "ict", "prop", "wlp")
    together = build_baseline_examples(methods, segments, links, config)
    assert together.equals(pl.concat([build_baseline_examples(m, segments, links, config) for m in methods]))
    assert build_baseline_examples([], segments, links, config).schema == pl.Schema(BASELINE_EXAMPLES)
    with pytest.raises(ValueError, match="unknown pre-training baseline 'bfs'"):
        build_baseline_examples(("ict", "bfs"), segments, links, config)


@pytest.mark.parametrize("method", ["ict", "wlp", "prop", "harp"])
def test_a_binding_cap_keeps_the_keys_of_smallest_hash_and_their_own_draws(method):
    segments, links = _dump()
    config = BaselineConfig(n_negatives=2)
    every = build_baseline_examples(method, segments, links, config)
    capped = {
        cap: build_baseline_examples(method, segments, links, replace(config, max_examples=cap)) for cap in (6, 11)
    }
    for objective, rows in every.group_by("objective"):
        small, large = (frame.filter(pl.col("objective") == objective[0]) for frame in capped.values())
        assert (small.height, large.height) == (6, 11), objective  # exactly the cap, each objective
        assert set(small["key"]) < set(large["key"]) < set(rows["key"])  # nested: the smallest hashes first
        kept = set(small["key"])
        assert small["key"].to_list() == [k for k in rows["key"] if k in kept]  # in the order of the uncapped table
        full = {key: (queries, docs) for key, queries, docs in rows.select("key", "queries", "docs").iter_rows()}
        for key, queries, docs in small.select("key", "queries", "docs").iter_rows():
            if method in ("prop", "harp"):  # the example draws on its own key's text and the whole corpus alone
                assert (queries, docs) == full[key]
            else:  # the query and positive are its own draws; negatives come from the capped pool
                assert (queries[0], docs[0]) == (full[key][0][0], full[key][1][0])
                assert len(docs) == 3 and docs[0] not in docs[1:]
    other = build_baseline_examples(method, segments, links, replace(config, max_examples=6, seed=7))
    assert set(other["key"]) != set(capped[6]["key"])  # the seed chooses
    with pytest.raises(ValueError, match="max_examples must be >= 1"):
        BaselineConfig(max_examples=0)


def test_pairwise_hinge_by_hand():
    scores = torch.tensor([[2.0, 0.5], [0.0, 0.5]])
    assert pairwise_hinge(scores).item() == pytest.approx((0.0 + 1.5) / 2)
    with pytest.raises(ValueError, match="pairwise_hinge"):
        pairwise_hinge(torch.zeros(3))


@pytest.mark.parametrize("method", ["ict", "harp"])
def test_a_baseline_trains_and_saves_a_cross_encoder_folder(tmp_path, method):
    from dagster_ir.neural.cross_encoder import CrossEncoder

    tiny = str(make_tiny_backbone(tmp_path / "tiny", hidden_size=16))
    config = PhpConfig(
        backbone=tiny,
        max_length=32,
        max_query_length=12,
        hp_epochs=1,
        shp_epochs=0,
        mrds_epochs=1,
        train=TrainConfig(lr=1e-3, warmup_ratio=0.0, batch_size=2, seed=3),
    )
    examples = _examples(method)
    logs = []
    result = pretrain_baseline(
        method, examples, config, tmp_path / method, tmp_path / "ckpt", on_log=lambda step, values: logs.append(values)
    )
    assert result.examples == examples.height and result.train.steps == 2 * math.ceil(examples.height / 2)
    assert all(math.isfinite(v["rank"]) and "mlm" in v for v in logs)
    assert CrossEncoder.from_pretrained(str(result.path)).max_length == 32
    capped = pretrain_baseline(method, examples, config, tmp_path / "capped", tmp_path / "ckpt3", max_steps=1)
    assert capped.train.steps == 1  # PHP's step count, when the asset passes it
    empty = pretrain_baseline(method, examples.head(0), config, tmp_path / "empty", tmp_path / "ckpt2")
    assert empty.train is None and empty.examples == 0


def test_baseline_inputs_are_the_pairs_reranking_would_encode_and_masking_follows_mlm(tmp_path):
    from dagster_ir.methods.php import BaselineInputs
    from dagster_ir.neural.cross_encoder import CrossEncoder
    from dagster_ir.neural.rerank import CrossEncoderScorer

    model = CrossEncoder.from_pretrained(
        str(make_tiny_backbone(tmp_path / "tiny", hidden_size=16)), max_length=16, max_query_length=4
    )
    examples = _examples("harp", BaselineConfig(harp_objectives=("rdp",)))
    plain = BaselineInputs(examples, model, PhpConfig(mlm_weight=0.0))
    pairs, labels = plain.example(0, np.random.default_rng(0))  # castle->river: "river" with river, castle
    expected = CrossEncoderScorer(model).encode(["river", "river"], [RIVER, CASTLE])
    assert [p.input_ids for p in pairs] == [e.input_ids for e in expected] and len(pairs[0].input_ids) == 16
    assert all((label == -100).all() for label in labels)
    masked, labels = BaselineInputs(examples, model, PhpConfig(mask_prob=1.0)).example(0, np.random.default_rng(0))
    for pair, label in zip(pairs, labels, strict=True):  # every token but [CLS] and the two [SEP] is predicted
        special = [0, pair.token_type_ids.index(1) - 1, len(pair.input_ids) - 1]
        assert (label[special] == -100).all() and (np.delete(label, special) != -100).all()
