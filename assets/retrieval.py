"""Retrieval assets: the Lucene index, dense corpus embeddings, candidate runs and negatives."""

import time
from dataclasses import asdict

import dagster as dg
import polars as pl

from assets.partitions import collection_partitions
from assets.project import collection_specs, run_imports
from assets.resources import DataDirResource
from dagster_ir.negatives import NegativeConfig, sample_negatives
from dagster_ir.retrieval.dense import DenseConfig, dense_search, encode, encode_corpus_to, load_corpus_embeddings
from dagster_ir.retrieval.lucene import Bm25Config, QlConfig, build_index, search
from dagster_ir.retrieval.runs import import_run, recall_at_k
from dagster_ir.retrieval.trec import write_run

GROUP = "retrieval"


class IndexConfig(dg.Config):
    threads: int = 2


@dg.asset(group_name=GROUP, partitions_def=collection_partitions, code_version="1")
def bm25_index(context: dg.AssetExecutionContext, config: IndexConfig, data: DataDirResource, corpus: pl.LazyFrame) -> pl.DataFrame:
    """A Pyserini (Lucene) index of the corpus with positions, document vectors and raw documents."""
    index_dir = data.files("bm25_index") / context.partition_key
    batches = (corpus.slice(i, 50_000).collect() for i in range(0, corpus.select(pl.len()).collect().item(), 50_000))
    stats = build_index(batches, index_dir, threads=config.threads)
    context.add_output_metadata({"documents": stats.documents, "seconds": round(stats.seconds, 2),
                                 "index": dg.MetadataValue.path(str(index_dir))})
    return pl.DataFrame({"path": [str(index_dir)], "documents": [stats.documents], "empty": [stats.empty],
                         "seconds": [stats.seconds]})


class DenseEncodingConfig(dg.Config):
    """Maps onto `dagster_ir.retrieval.dense.DenseConfig`; model "" is the bundled all-MiniLM-L6-v2."""

    model: str = ""
    max_length: int = 128  # demo default (all-MiniLM-L6-v2 was trained at 128); the model's own limit is 256
    batch_size: int = 64
    device: str = "cpu"

    def to_domain(self) -> DenseConfig:
        extra = {"model": self.model} if self.model else {}
        return DenseConfig(max_length=self.max_length, batch_size=self.batch_size, device=self.device, **extra)


@dg.asset(group_name=GROUP, partitions_def=collection_partitions, code_version="1")
def dense_embeddings(
    context: dg.AssetExecutionContext, config: DenseEncodingConfig, data: DataDirResource, corpus: pl.LazyFrame
) -> pl.DataFrame:
    """The corpus encoded once by the bi-encoder (all-MiniLM-L6-v2 by default), for exact inner-product search."""
    path = data.files("dense") / f"{context.partition_key}.npy"
    encoded = encode_corpus_to(path, corpus, config.to_domain())
    rate = encoded.n_docs / max(encoded.seconds, 1e-9)
    context.add_output_metadata({"documents": encoded.n_docs, "dim": encoded.dim,
                                 "passages_per_s": round(rate, 1), "file": dg.MetadataValue.path(str(path))})
    return pl.DataFrame({"path": [str(path)], "documents": [encoded.n_docs], "dim": [encoded.dim],
                         "model": [config.to_domain().model]})


class CandidateRunsConfig(dg.Config):
    """BM25 and QL settings (Pyserini), the run depth, and the dense model's query encoding."""

    k1: float = 0.9
    b: float = 0.4
    mu: float = 1000.0
    depth: int = 1000
    threads: int = 2
    dense: DenseEncodingConfig = DenseEncodingConfig()


@dg.asset(group_name=GROUP, partitions_def=collection_partitions, code_version="1")
def candidate_runs(
    context: dg.AssetExecutionContext,
    config: CandidateRunsConfig,
    data: DataDirResource,
    bm25_index: pl.DataFrame,
    dense_embeddings: pl.DataFrame,
    queries: pl.DataFrame,
    qrels: pl.DataFrame,
) -> pl.DataFrame:
    """First-stage runs for every query: BM25, QL (Dirichlet), dense (bi-encoder), and imported TREC runs."""
    index = bm25_index["path"][0]
    runs, seconds = [], {}
    for name, model in [("bm25", Bm25Config(k1=config.k1, b=config.b)), ("ql", QlConfig(mu=config.mu))]:
        started = time.monotonic()
        runs.append(search(index, queries, k=config.depth, model=model, threads=config.threads, run_name=name))
        seconds[name] = time.monotonic() - started
    started = time.monotonic()
    doc_emb, doc_ids = load_corpus_embeddings(dense_embeddings["path"][0])
    query_emb = encode(queries["text"].to_list(), config.dense.to_domain())
    runs.append(dense_search(doc_emb, doc_ids, query_emb, queries["query_id"], config.depth, "dense"))
    seconds["dense"] = time.monotonic() - started
    for name, path in run_imports().get(context.partition_key, {}).items():
        runs.append(import_run(path, name))
    run = pl.concat(runs, how="vertical")
    out_dir = data.files("runs", context.partition_key)
    metadata = {}
    for frame in run.partition_by("run_name", maintain_order=True):
        name = frame["run_name"][0]
        write_run(frame, out_dir / f"{name}.trec")
        for k in (100, 1000):
            metadata[f"{name}_R@{k}"] = round(recall_at_k(frame, qrels, k), 4)
        if name in seconds:
            metadata[f"{name}_queries_per_s"] = round(queries.height / max(seconds[name], 1e-9), 1)
    metadata["trec_files"] = dg.MetadataValue.path(str(out_dir))
    context.add_output_metadata(metadata)
    return run


class NegativesConfig(dg.Config):
    """Maps onto `dagster_ir.negatives.NegativeConfig`; `run_name` picks the candidate run to sample from."""

    run_name: str = "bm25"
    strategy: str = "random"
    depth: int = 100
    n_per_positive: int = 4
    seed: int = 42


@dg.asset(group_name=GROUP, partitions_def=collection_partitions, code_version="2")
def negatives(
    context: dg.AssetExecutionContext,
    config: NegativesConfig,
    candidate_runs: pl.DataFrame,
    qrels: pl.DataFrame,
    query_splits: pl.DataFrame,
) -> pl.DataFrame:
    """Negatives per training query sampled from a named candidate run, seeded (train/model; under cv every query).

    Under `protocol: cv` every query trains some rotation's model, so every query gets negatives;
    each trained asset keeps those of its unit's training queries. Sampling is per (query, positive),
    so a query's negatives do not depend on which other queries are sampled.
    """
    run = candidate_runs.filter(pl.col("run_name") == config.run_name)
    if run.height == 0:
        raise ValueError(f"negatives: no candidate run named {config.run_name!r} "
                         f"(have {candidate_runs['run_name'].unique().sort().to_list()})")
    if collection_specs()[context.partition_key].protocol.kind == "cv":
        train = query_splits["query_id"]
    else:
        train = query_splits.filter(pl.col("split") == "train/model")["query_id"]
    domain = NegativeConfig(strategy=config.strategy, depth=config.depth,
                            n_per_positive=config.n_per_positive, seed=config.seed)
    sample = sample_negatives(run, qrels.filter(pl.col("query_id").is_in(train.implode())), train, domain)
    context.add_output_metadata({"rows": sample.negatives.height, **asdict(sample.counts)})
    return sample.negatives


retrieval_assets = [bm25_index, dense_embeddings, candidate_runs, negatives]
