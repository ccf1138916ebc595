"""Collection assets: corpus, queries, qrels and query splits, one partition per configured collection.

`collection_config` is observed, not materialized: its version per collection is a hash of that
collection's section of the collections YAML and of the files it names (size, mtime), so editing
one collection's entry (a split seed, a new field) or its local files makes that collection's
assets stale, and no other's. Only wiki-car collections read the Wikipedia segments.
"""

import dagster as dg
import polars as pl

from assets.lib.io_managers import load_partitions
from assets.lib.metadata import source_metadata, source_tags
from assets.lib.partitions import collection_partitions, wiki_dump_partitions
from assets.lib.project import collection_specs, config_path
from assets.lib.resources import DataDirResource
from assets.lib.staleness import UPSTREAM_READ_BY
from dagster_ir.collections import WikiCarSpec, collection_layout, load_collection, split_queries
from dagster_ir.collections.config import collection_versions, qrels_source
from dagster_ir.collections.known_ids import check_known_ids
from dagster_ir.storage.atomic import remove, temp_name
from dagster_ir.storage.parquet import files_version, frame_version, spool_batches
from dagster_ir.wiki import latest_articles

GROUP = "collections"


@dg.observable_source_asset(
    group_name=GROUP,
    partitions_def=collection_partitions,
    tags=source_tags("yaml"),
    metadata=source_metadata(
        "the collection's section of the collections YAML and the size and mtime of each file it names",
        "corpus, queries, qrels and query_splits of that collection",
    ),
)
def collection_config() -> dg.DataVersionsByPartition:
    """Each collection's section of the collections YAML and the files it names (size, mtime)."""
    versions = collection_versions(config_path())
    return dg.DataVersionsByPartition(
        {
            name: dg.DataVersion(versions.get(name, "not configured"))
            for name in collection_partitions.get_partition_keys()
        }
    )


def _wiki_collections() -> list[str]:
    return sorted(name for name, spec in collection_specs().items() if isinstance(spec, WikiCarSpec))


def _out(description: str) -> dg.AssetOut:
    return dg.AssetOut(
        code_version="2", description=description, metadata={UPSTREAM_READ_BY: {"wiki_articles": _wiki_collections()}}
    )


@dg.multi_asset(
    group_name=GROUP,
    partitions_def=collection_partitions,
    deps=[dg.AssetDep("wiki_articles", partition_mapping=dg.AllPartitionMapping()), dg.AssetDep(collection_config)],
    outs={
        "corpus": _out("Documents (doc_id, title, text) of the collection."),
        "queries": _out("Queries (query_id, text) of the collection."),
        "qrels": _out("Relevance judgments (query_id, doc_id, relevance)."),
        "query_splits": _out(
            "train/fusion, train/model, dev, test split and fold (for k-fold rotation) of each query."
        ),
    },
)
def collection(context: dg.AssetExecutionContext, data: DataDirResource):
    """Load one configured collection (wiki-car from the Wikipedia segments, ir_datasets, local files, Cranfield).

    Each output's data version is a hash of its content, so a change upstream that leaves a
    collection as it was (a new dump for Cranfield, say) does not make its indexes and runs stale.
    """
    spec = collection_specs()[context.partition_key]
    segments, superseded = None, 0
    if isinstance(spec, WikiCarSpec):  # the others do not read (or wait for) the dumps
        dumps = context.instance.get_dynamic_partitions(wiki_dump_partitions.name)
        latest = latest_articles(load_partitions(context, data.root(), "wiki_articles", dumps))
        segments, superseded = latest.segments, latest.superseded  # lazy: the corpus text is streamed
    loaded = load_collection(spec, segments=segments)
    spool = temp_name(data.files("corpus_parts") / context.partition_key)  # this run's own folder
    try:
        corpus = spool_batches(loaded.corpus, spool)
        _check_unique_ids(corpus, context.partition_key)
        qrels, unknown = check_known_ids(  # before anything is stored
            loaded.qrels,
            query_ids=loaded.queries["query_id"],
            doc_ids=corpus,
            source=qrels_source(spec),
            what="qrels",
            on_unknown=spec.on_unknown,
            collection=context.partition_key,
        )
        n_docs = corpus.select(pl.len()).collect().item()
        yield dg.Output(
            corpus,
            output_name="corpus",
            data_version=dg.DataVersion(files_version(spool.glob("*.parquet"))),
            metadata={
                "documents": n_docs,
                "kind": spec.kind,
                "layout": collection_layout(spec),
                "superseded_article_copies": superseded,
            },
        )
    finally:  # the IO manager has stored the corpus table by the time we resume
        remove(spool)
    splits = split_queries(loaded.queries, spec.split)
    judged = qrels.filter(pl.col("relevance") > 0)
    yield dg.Output(
        loaded.queries,
        output_name="queries",
        data_version=dg.DataVersion(frame_version(loaded.queries)),
        metadata={"queries": loaded.queries.height},
    )
    yield dg.Output(
        qrels,
        output_name="qrels",
        data_version=dg.DataVersion(frame_version(qrels)),
        metadata={
            "judgments": qrels.height,
            "relevant": judged.height,
            "judged_queries": judged["query_id"].n_unique(),
            "unknown_ids_dropped": unknown.rows_dropped,  # rows for unknown queries/documents (on_unknown: drop)
        },
    )
    counts = splits.group_by("split").len().sort("split")
    yield dg.Output(
        splits,
        output_name="query_splits",
        data_version=dg.DataVersion(frame_version(splits)),
        metadata={f"queries_{row['split']}": row["len"] for row in counts.iter_rows(named=True)},
    )


def _check_unique_ids(corpus: pl.LazyFrame, collection_name: str) -> None:
    """Fail before anything is stored if a document id repeats (readers of files name the line)."""
    repeated = corpus.group_by("doc_id").len().filter(pl.col("len") > 1).sort("doc_id").head(5).collect()
    if repeated.height:
        shown = ", ".join(f"{d!r} ({n} times)" for d, n in repeated.iter_rows())
        raise ValueError(f"collection {collection_name!r}: repeated document ids: {shown}")


collection_assets = [collection_config, collection]
