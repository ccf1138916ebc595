"""BERT-FirstP / MaxP and CEDR-KNRM on a tiny random BERT: passages, masking, pooling, learning."""

from dataclasses import replace

import numpy as np
import polars as pl
import pytest
import torch

from dagster_ir.methods.baselines import reranker
from dagster_ir.methods.baselines.bert_passages import PassageConfig, aggregate_passages, split_passages
from dagster_ir.neural.backbone import make_tiny_backbone


@pytest.fixture(scope="module")
def backbone(tmp_path_factory):
    return str(make_tiny_backbone(tmp_path_factory.mktemp("backbone") / "tiny", hidden_size=32, layers=2))


def config_for(backbone: str) -> reranker.BaselineConfig:
    return replace(
        reranker.profile("demo"),
        backbone=backbone,
        bert_max_length=48,
        threads=1,
        passages=PassageConfig(passage_words=6, stride=3, max_passages=4),
    )


def learning_config(backbone: str, **changes) -> reranker.BaselineConfig:
    """`config_for` in float32 on one torch thread, for the learning tests: the demo profile's
    bfloat16 autocast runs natively on CPUs with AMX or AVX-512 BF16 and emulated elsewhere, and its
    `bert_threads=0` is every core, so under it what a test learns depends on the machine."""
    return replace(config_for(backbone), bf16=False, bert_threads=1, **changes)


def test_split_passages_by_hand():
    text = " ".join(f"w{i}" for i in range(10))
    assert split_passages(text, 6, 3, 8) == ["w0 w1 w2 w3 w4 w5", "w3 w4 w5 w6 w7 w8", "w6 w7 w8 w9"]
    assert split_passages(text, 6, 3, 2) == ["w0 w1 w2 w3 w4 w5", "w3 w4 w5 w6 w7 w8"]
    assert split_passages("a b", 6, 3, 8) == ["a b"]


def test_passage_pooling_by_hand():
    scores = torch.tensor([[0.2, 0.9, 5.0], [-1.0, -3.0, 7.0]])
    mask = torch.tensor([[True, True, False], [True, True, False]])  # the third slot is padding
    assert aggregate_passages(scores, mask, "max").tolist() == pytest.approx([0.9, -1.0])
    assert aggregate_passages(scores, mask, "first").tolist() == pytest.approx([0.2, -1.0])


@pytest.mark.parametrize("name", reranker.BERT_MODELS)
def test_shapes_and_padded_passages(name, backbone):
    model, encoder = reranker.build_bert_model(name, config_for(backbone))
    model.eval()
    long_doc = " ".join(f"word{i}" for i in range(14))
    encoder.add_texts({"q": "apple river"}, {"short": "apple and river", "long": long_doc})
    n_query = len(encoder.queries["q"])
    batch = encoder.batch([("q", "short"), ("q", "long")])
    passages = 1 if name == "bert-firstp" else 4
    assert batch["input_ids"].shape[:2] == (2, passages)
    assert batch["passage_mask"].tolist()[0] == [True] + [False] * (passages - 1)
    segment = batch["segment"][0, 0].tolist()
    assert segment[: n_query + 2] == [0] + [1] * n_query + [0] and segment[n_query + 2] == 2  # [CLS] q [SEP] passage
    with torch.no_grad():
        together = model(batch)
        alone = model(encoder.batch([("q", "short")]))
    assert together.shape == (2,) and torch.isfinite(together).all()
    assert together[0].item() == pytest.approx(alone[0].item(), abs=1e-5)  # padded passages change nothing


def collection(seed=0, n_queries=30, docs_per_query=6, query_words=6):
    """One-word queries (`query_words` distinct words, so test queries reuse words seen in training:
    a tiny random BERT cannot learn token identity for unseen words in a few steps); the one relevant
    document per query holds the word, the others do not."""
    rng = np.random.default_rng(seed)
    words = [
        w
        for w in (
            "apple bird cloud dune eagle fjord grape harbor island jungle kite lemon meadow night ocean "
            "piano quartz river stone tiger umbrella violin willow yacht zebra"
        ).split()
    ]
    queries, docs, qrels, run = {}, {}, [], []
    for q in range(n_queries):
        term = words[q % query_words]
        queries[f"q{q}"] = term
        others = [w for w in words if w != term]
        for d in range(docs_per_query):
            body = list(rng.choice(others, 5))
            if d == 0:
                body[int(rng.integers(5))] = term
                qrels.append((f"q{q}", f"q{q}d{d}", 1))
            docs[f"q{q}d{d}"] = " ".join(body)
        order = rng.permutation(docs_per_query)
        run += [(f"q{q}", f"q{q}d{d}", float(-r), r + 1, "shuffled") for r, d in enumerate(order)]
    qrels = pl.DataFrame(
        qrels, schema={"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32}, orient="row"
    )
    run = pl.DataFrame(
        run,
        schema={
            "query_id": pl.String,
            "doc_id": pl.String,
            "score": pl.Float64,
            "rank": pl.Int32,
            "run_name": pl.String,
        },
        orient="row",
    )
    return queries, docs, qrels, run


@pytest.mark.parametrize("name", ["bert-maxp", "cedr-knrm"])
def test_learns_exact_match(name, backbone, tmp_path):
    """A tiny random BERT fits the exact-match labels of its training queries (nDCG@10 over their
    shuffled candidates), and trained on the labels swapped, ranks the relevant documents below a
    shuffled order. The swapped run is what shows training moved the model: an untrained CEDR-KNRM
    may already rank exact matches first (its kernels count matching tokens; 0.94 at seed 42).
    Held-out queries are not asked for: in 100-odd steps a random 2-layer BERT learns these queries'
    words, not token identity in general (measured: held-out 0.68-0.79 against 0.61 shuffled after
    90-300 steps, where the interaction models, on word2vec-like vectors, generalise).
    Measured in float32 on one thread, seeds 42, 0, 1, under torch's AVX-512, AVX2 and default
    kernels (shuffled 0.548): MaxP 0.923-0.948 learned, 0.359-0.366 swapped; CEDR-KNRM 0.954-1.0
    and 0.356."""
    queries, docs, qrels, run = collection()
    config = learning_config(backbone, epochs=8, batch_size=8, steps_per_epoch=50, bert_lr=2e-3)
    train_ids = [f"q{i}" for i in range(24)]
    examples = [(q, f"{q}d0", (f"{q}d{n}",)) for q in train_ids for n in range(1, 6)]
    found = {}
    for labels, train in (("right", examples), ("swapped", [(q, negs[0], (pos,)) for q, pos, negs in examples])):
        model, encoder = reranker.build_bert_model(name, config)
        encoder.add_texts(queries, docs)
        reranker.train_baseline(name, model, encoder, train, config, tmp_path / labels)
        reranked = reranker.rerank_with(model, encoder, run, train_ids, 6, name, threads=1)
        found[labels] = reranker.mean_measure(reranked, qrels, train_ids, "nDCG@10")
    shuffled = reranker.mean_measure(run, qrels, train_ids, "nDCG@10")
    assert found["right"] > shuffled + 0.2, (name, found, shuffled)
    assert found["swapped"] < shuffled - 0.1, (name, found, shuffled)


def _reference_cedr(model, batch):
    """CEDR-KNRM's forward as first written: every position of the query axis, float32 throughout."""
    b, p, length = batch["input_ids"].shape
    real = batch["passage_mask"]
    flat = {
        k: batch[k].reshape(b * p, length)[real.reshape(-1)] for k in ("input_ids", "attention_mask", "token_type_ids")
    }
    states = model.bert(**flat, output_hidden_states=True).hidden_states
    query_mask = (batch["segment"][:, 0] == 1).float()
    doc_mask = ((batch["segment"] == 2) & real.unsqueeze(-1)).float().reshape(b, p * length)
    mask = query_mask.unsqueeze(2) * doc_mask.unsqueeze(1)
    features = []
    for layer in states:
        full = layer.new_zeros(b * p, length, layer.shape[-1])
        full[real.reshape(-1)] = layer
        unit = torch.nn.functional.normalize(full.reshape(b, p, length, -1), dim=-1)
        sim = torch.einsum("bpqh,bpdh->bqpd", unit, unit).reshape(b, length, p * length)
        features.append(model.pool(sim * mask, mask))
    cls = states[-1].new_zeros(b * p, states[-1].shape[-1])
    cls[real.reshape(-1)] = states[-1][:, 0]
    cls = (cls.reshape(b, p, -1) * real.unsqueeze(-1)).sum(1) / real.sum(1, keepdim=True).clamp(min=1)
    start = torch.full((b * p,), -torch.inf)
    start[real.reshape(-1)] = model.cross_encoder(**flat)  # the cross-encoder's own scoring path
    return model.combine(torch.cat([start.reshape(b, p).max(1).values.unsqueeze(1), cls, *features], dim=1)).squeeze(-1)


def test_cedr_reads_the_query_rows_only(backbone):
    """The similarity matrices cut to the query's rows give the scores of the full matrices (the rows
    past the query are masked out), for queries of different lengths and padded passages."""
    model, encoder = reranker.build_bert_model("cedr-knrm", config_for(backbone))
    model.eval()
    encoder.add_texts(
        {"short": "apple", "long": "apple river stone tiger"},
        {"d1": "apple and river", "d2": " ".join(f"word{i} apple" for i in range(8))},
    )
    batch = encoder.batch([("short", "d1"), ("long", "d2"), ("long", "d1"), ("short", "d2")])
    torch.nn.init.normal_(model.combine.weight)  # every input weighted, not only the start's
    with torch.no_grad():
        assert model(batch).tolist() == pytest.approx(_reference_cedr(model, batch).tolist(), abs=1e-4)


def test_cedr_starts_as_bert_maxp(backbone):
    """Untrained, CEDR-KNRM scores a document as BERT-MaxP does (the cross-encoder's best passage): its combining
    layer weighs that score 1 and the [CLS] and kernel features 0, so the BERT baselines share one start."""
    config = config_for(backbone)
    cedr, cedr_encoder = reranker.build_bert_model("cedr-knrm", config)
    maxp, maxp_encoder = reranker.build_bert_model("bert-maxp", config)
    texts = (
        {"q": "apple river", "r": "stone"},
        {"d1": "apple and river", "d2": " ".join(f"word{i} apple stone" for i in range(6)), "d3": "tiger"},
    )
    pairs = [("q", "d1"), ("q", "d2"), ("r", "d2"), ("r", "d3")]
    scores = []
    for model, encoder in ((cedr, cedr_encoder), (maxp, maxp_encoder)):
        model.eval()
        encoder.add_texts(*texts)
        with torch.no_grad():
            scores.append(model(encoder.batch(pairs)).tolist())
    assert cedr_encoder.batch(pairs)["passage_mask"].sum(1).tolist() == [1, 4, 4, 1]  # several passages to choose from
    assert scores[0] == pytest.approx(scores[1], abs=1e-5)
    assert len(set(scores[1])) == 4  # four different scores, not a constant


class _FixedStates(torch.nn.Module):
    """Stands in for CEDR's backbone: the same hidden states (in bfloat16, as autocast gives them) for any input."""

    def __init__(self, config, states):
        super().__init__()
        self.config, self.states = config, states

    def forward(self, input_ids, **inputs):
        logits = torch.zeros(len(input_ids), 1)
        return type("Output", (), {"hidden_states": self.states, "logits": logits})()


def test_cedr_kernels_stay_float32_under_autocast(backbone):
    """Under bfloat16 autocast, the cosines and kernels of CEDR-KNRM run in float32: with a document token
    equal to a query token (cosine 1, the exact-match kernel's sigma 1e-3 is below bfloat16's resolution
    there) the score is the one computed without autocast."""
    model, encoder = reranker.build_bert_model("cedr-knrm", config_for(backbone))
    model.eval()
    encoder.add_texts({"q": "apple river"}, {"d": "stone apple river tiger"})
    batch = encoder.batch([("q", "d")])
    length, hidden = batch["input_ids"].shape[2], model.bert.config.hidden_size
    generator = torch.Generator().manual_seed(0)
    states = []
    for _ in range(model.bert.config.num_hidden_layers + 1):
        layer = torch.randn(1, length, hidden, generator=generator)
        layer[0, 5] = layer[
            0, 1
        ]  # the passage's "apple" (position 5: [CLS] apple river [SEP] stone apple) = the query's
        states.append(layer.to(torch.bfloat16))
    # the encoder the kernels read (the cross-encoder's model under its [CLS] head, whose score is the start)
    model.bert = model.cross_encoder.model = _FixedStates(model.bert.config, tuple(states))
    torch.nn.init.normal_(model.combine.weight)  # the kernels weighted (untrained, only the start is)
    with torch.no_grad():
        plain = model(batch)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            mixed = model(batch)
    assert mixed.dtype == torch.float32
    assert mixed.item() == pytest.approx(plain.item(), abs=1e-6)


def test_bert_models_take_their_own_threads_and_precision():
    config = replace(reranker.profile("demo"), threads=1, bert_threads=3, bf16=True)
    assert reranker.runs_on("cedr-knrm", config) == (3, True)
    assert reranker.runs_on("bert-maxp", config) == (3, True)
    assert reranker.runs_on("knrm", config) == (1, False)  # interaction models: never bfloat16


def test_bf16_on_a_cpu_without_it_is_a_warning(monkeypatch):
    config = replace(reranker.profile("demo"), bf16=True)
    monkeypatch.setattr(reranker, "bf16_supported", lambda: False)
    assert "emulated" in reranker.check_precision(config)[0]
    assert reranker.check_precision(replace(config, bf16=False)) == []
    assert reranker.check_precision(replace(config, device="cuda")) == []
    monkeypatch.setattr(reranker, "bf16_supported", lambda: True)
    assert reranker.check_precision(config) == []


@pytest.mark.parametrize("name", reranker.BERT_MODELS)
def test_bf16_scores_follow_fp32(name, backbone):
    """Scoring under bfloat16 autocast keeps the float32 ranking's scores to within bfloat16's error."""
    queries, docs, qrels, run = collection(n_queries=6)
    model, encoder = reranker.build_bert_model(name, config_for(backbone))
    encoder.add_texts(queries, docs)
    fp32 = reranker.rerank_with(model, encoder, run, list(queries), 6, name, threads=1).sort("query_id", "doc_id")
    bf16 = reranker.rerank_with(model, encoder, run, list(queries), 6, name, threads=1, bf16=True).sort(
        "query_id", "doc_id"
    )
    spread = float(fp32["score"].std())
    assert spread > 0
    assert float((fp32["score"] - bf16["score"]).abs().max()) < 0.05 * spread + 1e-3
    assert bf16["score"].to_list() != fp32["score"].to_list()  # bfloat16 did run


def _late_word_collection(seed: int, n_queries: int = 24, docs_per_query: int = 6):
    """Queries of one word (six distinct words); each query's one relevant document holds its word among
    words 6-11 of 12, in the second passage of 6 words (stride 6) and not in the first."""
    rng = np.random.default_rng(seed)
    words = "apple bird cloud dune eagle fjord grape harbor island jungle kite lemon meadow night ocean piano".split()
    queries, docs, qrels, run = {}, {}, [], []
    for q in range(n_queries):
        queries[f"q{q}"] = words[q % 6]
        for d in range(docs_per_query):
            body = list(rng.choice(words[6:], 12))
            if d == 0:
                body[6 + int(rng.integers(6))] = words[q % 6]
                qrels.append((f"q{q}", f"s{seed}q{q}d{d}", 1))
            docs[f"s{seed}q{q}d{d}"] = " ".join(body)
        run += [
            (f"q{q}", f"s{seed}q{q}d{d}", float(-r), r + 1, "shuffled")
            for r, d in enumerate(rng.permutation(docs_per_query))
        ]
    qrels = pl.DataFrame(
        qrels, schema={"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32}, orient="row"
    )
    run = pl.DataFrame(
        run,
        schema={
            "query_id": pl.String,
            "doc_id": pl.String,
            "score": pl.Float64,
            "rank": pl.Int32,
            "run_name": pl.String,
        },
        orient="row",
    )
    return queries, docs, qrels, run


def test_maxp_finds_what_firstp_cannot_see(backbone, tmp_path):
    """Trained on one set of documents and scored on new ones (the same query words, so a tiny random
    BERT can learn them), MaxP, which scores every passage, ranks the relevant documents first; FirstP,
    which reads the first passage alone, where the query word never is, stays near a shuffled ranking.
    Measured in float32 on one thread (seeds 42, 0, 1; AVX-512, AVX2 and default kernels; shuffled
    0.604): MaxP 0.948-0.979, FirstP 0.517-0.569."""
    queries, docs, _, _ = _late_word_collection(seed=0)
    held_queries, held_docs, held_qrels, held_run = _late_word_collection(seed=1)
    config = learning_config(
        backbone,
        epochs=12,
        batch_size=8,
        steps_per_epoch=50,
        bert_lr=2e-3,
        passages=PassageConfig(passage_words=6, stride=6, max_passages=2),
    )
    examples = [(q, f"s0{q}d0", (f"s0{q}d{n}",)) for q in queries for n in range(1, 6)]
    found = {}
    for name in ("bert-maxp", "bert-firstp"):
        model, encoder = reranker.build_bert_model(name, config)
        encoder.add_texts(queries, {**docs, **held_docs})
        reranker.train_baseline(name, model, encoder, examples, config, tmp_path / name)
        reranked = reranker.rerank_with(model, encoder, held_run, list(held_queries), 6, name, threads=1)
        found[name] = reranker.mean_measure(reranked, held_qrels, list(held_queries), "nDCG@10")
    shuffled = reranker.mean_measure(held_run, held_qrels, list(held_queries), "nDCG@10")
    assert found["bert-maxp"] > shuffled + 0.2, (found, shuffled)
    assert found["bert-firstp"] < shuffled + 0.1, (found, shuffled)


def test_passage_models_start_from_the_bundled_backbones_cosine_head():
    """BERT-FirstP/MaxP over the bundled bi-encoder start where the cross-encoders start: the cosine head."""
    model, encoder = reranker.build_bert_model("bert-maxp", replace(reranker.profile("demo"), bert_max_length=64))
    assert model.cross_encoder.head == "cosine"
    model.eval()
    encoder.add_texts(
        {"q": "heat transfer in supersonic flow"},
        {"on": "heat transfer to a flat plate in supersonic flow", "off": "a recipe for apple pie"},
    )
    with torch.no_grad():
        on, off = model(encoder.batch([("q", "on"), ("q", "off")])).tolist()
    assert on > off  # untrained, the on-topic document already scores higher
