"""Collection assets: corpus, queries, qrels and query splits, one partition per configured collection."""

import shutil

import dagster as dg
import polars as pl

from assets.partitions import collection_partitions
from assets.project import collection_specs
from assets.resources import DataDirResource
from dagster_ir.collections import WikiCarSpec, load_collection, split_queries
from dagster_ir.storage.parquet import files_version, frame_version, spool_batches

GROUP = "collections"


@dg.multi_asset(
    group_name=GROUP,
    partitions_def=collection_partitions,
    ins={"wiki_articles": dg.AssetIn(partition_mapping=dg.AllPartitionMapping())},
    outs={
        "corpus": dg.AssetOut(code_version="1", description="Documents (doc_id, title, text) of the collection."),
        "queries": dg.AssetOut(code_version="1", description="Queries (query_id, text) of the collection."),
        "qrels": dg.AssetOut(code_version="1", description="Relevance judgments (query_id, doc_id, relevance)."),
        "query_splits": dg.AssetOut(
            code_version="1",
            description="train/fusion, train/model, dev, test split and fold (for k-fold rotation) of each query.",
        ),
    },
)
def collection(context: dg.AssetExecutionContext, data: DataDirResource, wiki_articles: pl.LazyFrame):
    """Load one configured collection (wiki-car from the Wikipedia segments, ir_datasets, local files, Cranfield).

    Each output's data version is a hash of its content, so a change upstream that leaves a
    collection as it was (a new dump for Cranfield, say) does not make its indexes and runs stale.
    """
    spec = collection_specs()[context.partition_key]
    segments = wiki_articles.collect() if isinstance(spec, WikiCarSpec) else None
    loaded = load_collection(spec, segments=segments)
    spool = data.files("corpus_parts") / context.partition_key
    corpus = spool_batches(loaded.corpus, spool)
    splits = split_queries(loaded.queries, spec.split)
    n_docs = corpus.select(pl.len()).collect().item()
    judged = loaded.qrels.filter(pl.col("relevance") > 0)
    yield dg.Output(
        corpus, output_name="corpus", data_version=dg.DataVersion(files_version(spool.glob("*.parquet"))),
        metadata={"documents": n_docs, "kind": spec.kind},
    )
    shutil.rmtree(spool)  # the IO manager has stored the corpus table by the time we resume
    yield dg.Output(
        loaded.queries, output_name="queries", data_version=dg.DataVersion(frame_version(loaded.queries)),
        metadata={"queries": loaded.queries.height},
    )
    yield dg.Output(
        loaded.qrels, output_name="qrels", data_version=dg.DataVersion(frame_version(loaded.qrels)),
        metadata={
            "judgments": loaded.qrels.height,
            "relevant": judged.height,
            "judged_queries": judged["query_id"].n_unique(),
        },
    )
    counts = splits.group_by("split").len().sort("split")
    yield dg.Output(
        splits, output_name="query_splits", data_version=dg.DataVersion(frame_version(splits)),
        metadata={f"queries_{row['split']}": row["len"] for row in counts.iter_rows(named=True)},
    )


collection_assets = [collection]
