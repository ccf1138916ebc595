"""Dense bi-encoder: embeddings equal sentence-transformers'; exact top-k, deterministic ties."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from dagster_ir.retrieval import dense
from dagster_ir.retrieval.dense import (
    DenseConfig,
    check_query_encoder,
    corpus_encoder,
    dense_search,
    encode,
    encode_corpus_to,
    load_corpus_embeddings,
)
from dagster_ir.schemas import RUN

TEXTS = [
    "experimental investigation of the aerodynamics of a wing in a slipstream",
    "shock waves",
    "",
    "heat transfer " * 200,  # longer than 256 tokens: truncated
    "Simple shear flow past a flat plate in an incompressible fluid of small viscosity.",
]


@pytest.fixture(scope="module")
def reference() -> object:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(DenseConfig().model, device="cpu")


@pytest.mark.slow  # importing sentence-transformers takes seconds
def test_embeddings_equal_sentence_transformers(reference: object) -> None:
    ours = encode(TEXTS, DenseConfig(batch_size=2))  # several batches, sorted by length
    theirs = reference.encode(TEXTS, batch_size=2)  # type: ignore[attr-defined]
    assert ours.dtype == np.float32 and ours.shape == (5, 384)
    np.testing.assert_allclose(ours, theirs, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-6)


@pytest.mark.slow
def test_max_length_truncates_like_sentence_transformers(reference: object) -> None:
    reference.max_seq_length = 16  # type: ignore[attr-defined]
    try:
        theirs = reference.encode(TEXTS)  # type: ignore[attr-defined]
    finally:
        reference.max_seq_length = 256  # type: ignore[attr-defined]
    short = encode(TEXTS, DenseConfig(max_length=16))
    np.testing.assert_allclose(short, theirs, atol=1e-5)
    assert not np.allclose(short[3], encode(TEXTS[3:4], DenseConfig())[0], atol=1e-3)


def test_normalize_off_gives_the_unit_vectors_scaled() -> None:
    raw = encode(TEXTS[:2], DenseConfig(normalize=False))
    norms = np.linalg.norm(raw, axis=1, keepdims=True)
    assert not np.allclose(norms, 1.0, atol=1e-2)
    np.testing.assert_allclose(raw / norms, encode(TEXTS[:2], DenseConfig()), atol=1e-6)


def test_batch_size_does_not_change_embeddings() -> None:
    np.testing.assert_allclose(encode(TEXTS, DenseConfig(batch_size=1)), encode(TEXTS, DenseConfig()), atol=1e-5)
    assert encode([], DenseConfig()).shape == (0, 384)


def test_fast_forward_equals_the_models_own_forward() -> None:
    config = DenseConfig(batch_size=2)
    encoder = dense._load_encoder(config.model, config.device)
    fast = dense.FastBert.for_model(encoder.model)
    assert fast is not None  # the bundled MiniLM is a BERT: encode takes the fast path
    features = encoder.tokenizer(TEXTS, truncation=True, max_length=config.max_length)
    batch = [{key: values[i] for key, values in features.items()} for i in (3, 0, 4)]  # padded to row 3's 256
    ours = dense._embed(encoder, batch, config, fast).numpy()
    with dense.torch.inference_mode():
        plain = dense._embed(encoder, batch, config).numpy()
    np.testing.assert_allclose(ours, plain, rtol=0, atol=1e-6)
    np.testing.assert_allclose(encode([TEXTS[i] for i in (3, 0, 4)], config), plain, rtol=0, atol=1e-6)


def expected_top_k(docs: np.ndarray, queries: np.ndarray, k: int) -> list[list[int]]:
    """Positions of the top-k docs per query: score descending, ties by position (numpy)."""
    scores = queries.astype(np.float64) @ docs.T.astype(np.float64)
    positions = np.arange(docs.shape[0])
    return [list(np.lexsort((positions, -row))[:k]) for row in scores]


def test_dense_search_is_exact_top_k_across_blocks() -> None:
    rng = np.random.default_rng(0)
    docs = rng.standard_normal((50, 8)).astype(np.float32)
    queries = rng.standard_normal((7, 8)).astype(np.float32)
    doc_ids = [f"d{i}" for i in range(50)]
    run = dense_search(docs, doc_ids, queries, [f"q{i}" for i in range(7)], 10, "dense",
                       query_block=3, doc_block=8)  # fmt: skip
    assert run.schema == pl.Schema(RUN)
    for qi, positions in enumerate(expected_top_k(docs, queries, 10)):
        rows = run.filter(pl.col("query_id") == f"q{qi}")
        assert rows["doc_id"].to_list() == [doc_ids[p] for p in positions]
        np.testing.assert_allclose(rows["score"], docs[positions] @ queries[qi], rtol=1e-5)
        assert rows["rank"].to_list() == list(range(1, 11))


def test_ties_are_ranked_by_corpus_position_even_across_the_cut() -> None:
    # Small integers: every product is exact, so ties are real ties in torch and numpy alike.
    firsts = [1, 2, 1, 0, 2, 1, 2, 1, 1]  # doc 3 is [0, 1]
    docs = np.array([[x, int(x == 0)] for x in firsts], np.float32)
    queries = np.array([[1, 0], [0, 0]], np.float32)  # the second query ties all 9 documents
    doc_ids = ["z", "y", "x", "w", "v", "u", "t", "s", "r"]
    for doc_block in (2, 3, 100):
        run = dense_search(docs, doc_ids, queries, ["a", "b"], 5, "dense", doc_block=doc_block)
        by_query = run.group_by("query_id", maintain_order=True).agg("doc_id")
        assert by_query["doc_id"].to_list() == [
            ["y", "v", "t", "z", "x"],  # the 2s in order, then the first two of the tied 1s
            ["z", "y", "x", "w", "v"],
        ]
        expected = expected_top_k(docs, queries, 5)
        assert expected == [[1, 4, 6, 0, 2], [0, 1, 2, 3, 4]]


def test_k_larger_than_the_corpus_returns_every_document() -> None:
    docs = np.eye(3, dtype=np.float32)
    run = dense_search(docs, ["a", "b", "c"], docs[:1], ["q"], 10, "dense")
    assert run["doc_id"].to_list() == ["a", "b", "c"]
    assert run["score"].to_list() == [1.0, 0.0, 0.0]


def test_bad_search_inputs_raise() -> None:
    docs = np.eye(3, dtype=np.float32)
    with pytest.raises(ValueError, match="2 doc ids for 3 doc rows"):
        dense_search(docs, ["a", "b"], docs, ["p", "q", "r"], 1, "dense")
    with pytest.raises(ValueError, match="doc_ids must be unique"):
        dense_search(docs, ["a", "a", "b"], docs, ["p", "q", "r"], 1, "dense")
    with pytest.raises(ValueError, match="equal width"):
        dense_search(docs, ["a", "b", "c"], docs[:, :2], ["p", "q", "r"], 1, "dense")
    broken = docs.copy()
    broken[1, 1] = np.nan
    with pytest.raises(ValueError, match="non-finite scores against documents 0..2"):
        dense_search(broken, ["a", "b", "c"], docs, ["p", "q", "r"], 1, "dense")


def test_encode_corpus_round_trip_in_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dense, "_ROWS_PER_CHUNK", 2)
    corpus = pl.DataFrame({"doc_id": ["d1", "d2", "d3"], "title": ["Wing", None, ""], "text": ["lift", "drag", "x"]})
    written = encode_corpus_to(tmp_path / "emb.npy", corpus.lazy(), DenseConfig())
    assert (written.n_docs, written.dim) == (3, 384)
    matrix, ids = load_corpus_embeddings(written.embeddings_path)
    assert ids.to_list() == ["d1", "d2", "d3"]
    expected = encode(["Wing\nlift", "drag", "x"], DenseConfig())
    np.testing.assert_allclose(matrix, expected, atol=1e-6)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["emb.doc_ids.parquet", "emb.manifest.json", "emb.npy"]


def test_queries_must_be_encoded_like_the_documents(tmp_path: Path) -> None:
    corpus = pl.DataFrame({"doc_id": ["d1"], "title": [""], "text": ["lift"]})
    path = encode_corpus_to(tmp_path / "emb.npy", corpus, DenseConfig(max_length=64)).embeddings_path
    encoder = corpus_encoder(path)
    assert encoder.model == DenseConfig().model and encoder.normalize and encoder.max_length == 64
    check_query_encoder(path, DenseConfig())  # the same model; a query length of its own is fine
    other = tmp_path / "other-model"
    other.mkdir()
    with pytest.raises(ValueError, match=r"emb\.npy: .*encoded by .*other-model.*documents were by model=.*minilm"):
        check_query_encoder(path, DenseConfig(model=str(other)))
    with pytest.raises(ValueError, match="normalize"):
        check_query_encoder(path, DenseConfig(normalize=False))
    (tmp_path / "emb.manifest.json").unlink()
    with pytest.raises(ValueError, match=r"no manifest"):
        check_query_encoder(path, DenseConfig())


def test_models_are_loaded_from_safetensors_only(tmp_path: Path) -> None:
    """A folder whose weights are a pickle (pytorch_model.bin) is refused, never unpickled."""
    import shutil

    import torch
    from safetensors.torch import load_file

    folder = tmp_path / "pickled"
    shutil.copytree(DenseConfig().model, folder)
    torch.save(load_file(str(folder / "model.safetensors")), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    with pytest.raises(OSError, match="model.safetensors"):
        encode(["x"], DenseConfig(model=str(folder)))


def test_bi_encoder_scorer_is_the_cosine_of_separately_encoded_texts():
    from dagster_ir.retrieval.dense import BiEncoderScorer, DenseConfig, encode

    queries = ["heat transfer in supersonic flow", "heat transfer in supersonic flow", "apple pie"]
    docs = ["heat transfer to a flat plate at mach 3", "a recipe for apple pie", "a recipe for apple pie"]
    scores = BiEncoderScorer(DenseConfig()).score_pairs(queries, docs)
    q, d = encode(queries, DenseConfig()), encode(docs, DenseConfig())
    np.testing.assert_allclose(scores, (q * d).sum(axis=1), atol=1e-5)
    assert scores[0] > scores[1] and scores[2] > scores[1]
    with pytest.raises(ValueError, match="2 queries but 1 documents"):
        BiEncoderScorer().score_pairs(queries[:2], docs[:1])
