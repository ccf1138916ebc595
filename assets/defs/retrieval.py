"""Retrieval assets: the Lucene index, dense corpus embeddings, candidate runs and negatives.

`imported_runs` is observed, not materialized: its version per collection is a hash of the external
run files the collections YAML imports for it (`runs:`), by content, so a changed or added run file
makes that collection's candidate runs stale; their data version is their content's, so the change
reaches every reader down to the reports.
"""

from dataclasses import asdict

import dagster as dg
import polars as pl

from assets.lib.metadata import source_metadata, source_tags
from assets.lib.partitions import collection_partitions
from assets.lib.project import collection_specs, config_path, run_imports
from assets.lib.resources import DataDirResource
from dagster_ir.collections.config import run_import_versions
from dagster_ir.collections.known_ids import check_known_ids
from dagster_ir.negatives import NegativeConfig, sample_negatives
from dagster_ir.neural.device import Placement, resolve_device
from dagster_ir.retrieval.blocks import write_runs_in_blocks
from dagster_ir.retrieval.dense import (
    DenseConfig,
    check_query_encoder,
    corpus_encoder,
    dense_search,
    encode,
    encode_corpus_to,
    load_corpus_embeddings,
)
from dagster_ir.retrieval.lucene import IMPACT_MAX_POSTINGS, Bm25Config, QlConfig, build_index, search
from dagster_ir.retrieval.runs import import_run
from dagster_ir.storage.atomic import remove, temp_name
from dagster_ir.storage.parquet import files_version

GROUP = "retrieval"


@dg.observable_source_asset(
    group_name=GROUP,
    partitions_def=collection_partitions,
    tags=source_tags("trec"),
    metadata=source_metadata(
        "the content of each TREC run file listed under `runs:` for the collection", "candidate_runs of that collection"
    ),
)
def imported_runs() -> dg.DataVersionsByPartition:
    """External TREC run files imported per collection (`runs:` in the collections YAML), by content."""
    versions = run_import_versions(config_path())
    return dg.DataVersionsByPartition(
        {name: dg.DataVersion(versions.get(name, "none")) for name in collection_partitions.get_partition_keys()}
    )


class IndexConfig(dg.Config):
    threads: int = 2


@dg.asset(group_name=GROUP, partitions_def=collection_partitions, code_version="1")
def bm25_index(
    context: dg.AssetExecutionContext, config: IndexConfig, data: DataDirResource, corpus: pl.LazyFrame
) -> pl.DataFrame:
    """A Pyserini (Lucene) index of the corpus with positions, document vectors and raw documents."""
    index_dir = data.files("bm25_index") / context.partition_key
    batches = (corpus.slice(i, 50_000).collect() for i in range(0, corpus.select(pl.len()).collect().item(), 50_000))
    stats = build_index(batches, index_dir, threads=config.threads)
    context.add_output_metadata(
        {
            "documents": stats.documents,
            "seconds": round(stats.seconds, 2),
            "index": dg.MetadataValue.path(data.relative(index_dir)),
        }
    )
    return pl.DataFrame(
        {"path": [str(index_dir)], "documents": [stats.documents], "empty": [stats.empty], "seconds": [stats.seconds]}
    )


class DenseEncodingConfig(dg.Config):
    """Maps onto `dagster_ir.retrieval.dense.DenseConfig`; model "" is the bundled all-MiniLM-L6-v2
    (for the queries of `candidate_runs`: the model the corpus was encoded with)."""

    model: str = ""
    max_length: int = 128  # demo default (all-MiniLM-L6-v2 was trained at 128); the model's own limit is 256
    batch_size: int = 64
    device: str = "auto"  # "auto": CUDA when available, else the CPU (float32 either way)

    def to_domain(self, default_model: str | None = None) -> DenseConfig:
        model = self.model or default_model
        extra = {"model": model} if model else {}
        return DenseConfig(
            max_length=self.max_length, batch_size=self.batch_size, device=resolve_device(self.device), **extra
        )


@dg.asset(group_name=GROUP, partitions_def=collection_partitions, code_version="2")
def dense_embeddings(
    context: dg.AssetExecutionContext, config: DenseEncodingConfig, data: DataDirResource, corpus: pl.LazyFrame
) -> pl.DataFrame:
    """The corpus encoded once by the bi-encoder (all-MiniLM-L6-v2 by default), for exact inner-product search."""
    path = data.files("dense") / f"{context.partition_key}.npy"
    encoded = encode_corpus_to(path, corpus, config.to_domain())
    rate = encoded.n_docs / max(encoded.seconds, 1e-9)
    context.add_output_metadata(
        {
            "documents": encoded.n_docs,
            "dim": encoded.dim,
            **Placement(config.to_domain().device, False).metadata(),
            "passages_per_s": round(rate, 1),
            "file": dg.MetadataValue.path(data.relative(path)),
        }
    )
    return pl.DataFrame(
        {"path": [str(path)], "documents": [encoded.n_docs], "dim": [encoded.dim], "model": [config.to_domain().model]}
    )


class CandidateRunsConfig(dg.Config):
    """BM25 and QL settings (Pyserini), the run depth, and the dense model's query encoding."""

    k1: float = 0.9
    b: float = 0.4
    mu: float = 1000.0
    depth: int = 1000
    threads: int = 2
    query_block: int = 2_000  # queries searched and written at once: memory does not grow with the queries
    # BM25 of an index with at most this many postings runs from impacts in memory (~16 bytes a
    # posting; the same run as Lucene's searcher); 0: always Lucene's searcher
    bm25_impact_max_postings: int = IMPACT_MAX_POSTINGS
    dense: DenseEncodingConfig = DenseEncodingConfig()


@dg.asset(group_name=GROUP, partitions_def=collection_partitions, code_version="2", deps=[imported_runs])
def candidate_runs(
    context: dg.AssetExecutionContext,
    config: CandidateRunsConfig,
    data: DataDirResource,
    bm25_index: pl.DataFrame,
    dense_embeddings: pl.DataFrame,
    queries: pl.DataFrame,
    qrels: pl.DataFrame,
):
    """First-stage runs for every query: BM25, QL (Dirichlet), dense (bi-encoder), and imported TREC runs."""
    index = bm25_index["path"][0]
    embeddings = dense_embeddings["path"][0]
    query_encoder = config.dense.to_domain(default_model=corpus_encoder(embeddings).model)
    check_query_encoder(embeddings, query_encoder)  # queries in the documents' vector space
    doc_emb, doc_ids = load_corpus_embeddings(embeddings)

    def lucene(name, model):
        return lambda block: search(
            index,
            block,
            k=config.depth,
            model=model,
            threads=config.threads,
            run_name=name,
            impact_max_postings=config.bm25_impact_max_postings,
        )

    def dense(block):
        query_emb = encode(block["text"].to_list(), query_encoder)
        return dense_search(doc_emb, doc_ids, query_emb, block["query_id"], config.depth, "dense")

    searchers = {
        "bm25": lucene("bm25", Bm25Config(k1=config.k1, b=config.b)),
        "ql": lucene("ql", QlConfig(mu=config.mu)),
        "dense": dense,
    }
    imported, dropped = {}, {}
    on_unknown = collection_specs()[context.partition_key].on_unknown
    for name, path in run_imports().get(context.partition_key, {}).items():
        imported[name], unknown = check_known_ids(
            import_run(path, name),
            query_ids=queries["query_id"],
            doc_ids=doc_ids,
            source=path,
            what=f"run {name!r}",
            on_unknown=on_unknown,
            collection=context.partition_key,
        )
        dropped[f"{name}_unknown_ids_dropped"] = unknown.rows_dropped
    work = temp_name(data.files("candidate_run_parts") / context.partition_key)  # this run's own
    try:
        written = write_runs_in_blocks(
            queries,
            searchers,
            work,
            data.files("runs", context.partition_key),
            qrels=qrels,
            block_size=config.query_block,
            extra_runs=imported,
        )
        metadata = {
            f"{name}_R@{k}": round(value, 4) for name, by_k in written.recall.items() for k, value in by_k.items()
        }
        metadata.update(
            {f"{name}_queries_per_s": round(queries.height / max(s, 1e-9), 1) for name, s in written.seconds.items()}
        )
        metadata["query_blocks"] = written.blocks
        metadata.update(dropped)
        metadata["trec_files"] = dg.MetadataValue.path(data.relative(data.files("runs", context.partition_key)))
        context.add_output_metadata(metadata)
        # by content: the version Dagster records of `imported_runs` never changes (see assets.lib.staleness)
        version = dg.DataVersion(files_version(work.glob("part-*.parquet")))
        yield dg.Output(written.runs, data_version=version)  # streamed from the parts by the IO manager
    finally:
        remove(work)


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
        raise ValueError(
            f"negatives: no candidate run named {config.run_name!r} "
            f"(have {candidate_runs['run_name'].unique().sort().to_list()})"
        )
    if collection_specs()[context.partition_key].protocol.kind == "cv":
        train = query_splits["query_id"]
    else:
        train = query_splits.filter(pl.col("split") == "train/model")["query_id"]
    domain = NegativeConfig(
        strategy=config.strategy, depth=config.depth, n_per_positive=config.n_per_positive, seed=config.seed
    )
    sample = sample_negatives(run, qrels.filter(pl.col("query_id").is_in(train.implode())), train, domain)
    context.add_output_metadata({"rows": sample.negatives.height, **asdict(sample.counts)})
    return sample.negatives


retrieval_assets = [imported_runs, bm25_index, dense_embeddings, candidate_runs, negatives]
