"""Wikipedia assets: dump file -> dump -> articles -> links -> link graph -> PHP link groups.

`wiki_dump_file` is observed, not materialized: its version per dump is the file's identity (size,
mtime, a hash of its head and tail), read again by every `dagster-ir update`, so a dump replaced in
place is parsed again. An article found in several dumps is taken from its newest revision.
"""

import time
from dataclasses import asdict
from urllib.parse import quote

import dagster as dg
import polars as pl

from assets.lib.metadata import source_metadata, source_tags
from assets.lib.partitions import wiki_dump_partitions
from assets.lib.plots import bar_chart_markdown
from assets.lib.resources import DataDirResource
from dagster_ir.storage.atomic import remove, temp_name
from dagster_ir.storage.parquet import ParquetParts, table_path
from dagster_ir.wiki import (
    DEFAULT_MEMORY_LIMIT,
    ArticleConfig,
    OutOfCoreLimits,
    assign_php_groups_out_of_core,
    build_link_graph_out_of_core,
    check_php_groups_out_of_core,
    latest_articles,
    link_statistics,
    php_group_sizes_out_of_core,
    resolve_links_out_of_core,
    write_extract_parts,
)

GROUP = "wikipedia"
D4_PER_SEGMENT = 64  # D4 rows kept per segment: above the paper's 24 negatives per example
CHECK_SAMPLE_ARTICLES = 2000  # articles whose groups the check works out in full


class WikiArticlesConfig(dg.Config):
    """Maps one to one onto `dagster_ir.wiki.ArticleConfig`."""

    segment_max_words: int = 180
    min_words: int = 100
    skip_bad_pages: bool = False
    processes: int = 1  # >1 parses a multistream dump's byte ranges in parallel worker processes

    def to_domain(self) -> ArticleConfig:
        return ArticleConfig(
            segment_max_words=self.segment_max_words,
            min_words=self.min_words,
            skip_bad_pages=self.skip_bad_pages,
        )  # `processes` is a run setting, not part of what is extracted


@dg.observable_source_asset(
    group_name=GROUP,
    partitions_def=wiki_dump_partitions,
    tags=source_tags("xml"),
    metadata=source_metadata(
        "the registered dump file: size, mtime and a hash of its head and tail",
        "wiki_dump of that partition, and everything parsed from it",
    ),
)
def wiki_dump_file(context, data: DataDirResource) -> dg.DataVersionsByPartition:
    """Each registered dump file as it is on disk now: size, mtime and a hash of its head and tail."""
    registry = data.dumps()
    entries = registry.entries()
    keys = context.instance.get_dynamic_partitions(wiki_dump_partitions.name)
    return dg.DataVersionsByPartition(
        {key: dg.DataVersion(registry.identity(key) if key in entries else "unregistered") for key in keys}
    )


@dg.asset(
    group_name=GROUP,
    partitions_def=wiki_dump_partitions,
    code_version="2",
    io_manager_key="io_manager",
    deps=[wiki_dump_file],
)
def wiki_dump(context: dg.AssetExecutionContext, data: DataDirResource) -> dg.Output[pl.DataFrame]:
    """A registered Wikipedia dump file (one partition per file or byte range); its version is the file's identity."""
    registry = data.dumps()
    path = registry.path_of(context.partition_key)
    stat = path.stat()
    frame = pl.DataFrame(
        {"dump": [context.partition_key], "path": [str(path)], "bytes": [stat.st_size], "mtime_ns": [stat.st_mtime_ns]}
    )
    version = registry.identity(context.partition_key)
    return dg.Output(
        frame, data_version=dg.DataVersion(version), metadata={"path": dg.MetadataValue.path(data.relative(path))}
    )


@dg.multi_asset(
    group_name=GROUP,
    partitions_def=wiki_dump_partitions,
    ins={"wiki_dump": dg.AssetIn()},
    outs={
        "wiki_articles": dg.AssetOut(
            code_version="2", description="Kept articles as plain-text segments; segment 1 is the lead."
        ),
        "wiki_redirects": dg.AssetOut(code_version="1", description="Redirect pages of the article namespace."),
        "wiki_raw_links": dg.AssetOut(
            code_version="1", description="Every link in the kept text, target title not yet resolved."
        ),
    },
)
def wiki_articles(
    context: dg.AssetExecutionContext, config: WikiArticlesConfig, data: DataDirResource, wiki_dump: pl.DataFrame
):
    """Stream one dump file into segments, redirects and links (memory bounded by a chunk of pages)."""
    work = temp_name(data.files("wiki_extract") / quote(context.partition_key, safe=""))  # this run's own
    try:
        started = time.monotonic()
        byte_range = data.dumps().byte_range(context.partition_key)  # a part of a multistream dump, or None
        counts = write_extract_parts(
            wiki_dump["path"][0], work, config.to_domain(), processes=config.processes, byte_range=byte_range
        )
        seconds = time.monotonic() - started
        metadata = {name: dg.MetadataValue.int(value) for name, value in asdict(counts).items()}
        metadata["seconds"] = dg.MetadataValue.float(round(seconds, 2))
        metadata["wikitext_mb_per_s"] = dg.MetadataValue.float(
            round(counts.wikitext_bytes / 1e6 / max(seconds, 1e-9), 2)
        )
        for table, output in [
            ("segments", "wiki_articles"),
            ("redirects", "wiki_redirects"),
            ("raw_links", "wiki_raw_links"),
        ]:
            parts = ParquetParts(tuple(sorted((work / table).glob("*.parquet"))))  # stored a row group at a time
            yield dg.Output(parts, output_name=output, metadata=metadata if output == "wiki_articles" else None)
    finally:  # the IO manager has stored every table by the time the generator ends
        remove(work)


class WikiLinksConfig(dg.Config):
    """How much memory the out-of-core joins of `wiki_links` / `wiki_link_graph` may hold (DuckDB spills the rest)."""

    # DuckDB's memory_limit: the joins' peak whatever the dump's size ($DAGSTER_IR_DUCKDB_MEMORY_LIMIT, else 2GB)
    memory_limit: str = DEFAULT_MEMORY_LIMIT
    threads: int = 2

    def to_domain(self) -> OutOfCoreLimits:
        return OutOfCoreLimits(memory_limit=self.memory_limit, threads=self.threads)


@dg.asset(
    group_name=GROUP,
    code_version="2",
    ins={
        "wiki_raw_links": dg.AssetIn(),
        "wiki_articles": dg.AssetIn(),
        "wiki_redirects": dg.AssetIn(),
    },
)
def wiki_links(
    context: dg.AssetExecutionContext,
    config: WikiLinksConfig,
    data: DataDirResource,
    wiki_raw_links: pl.LazyFrame,
    wiki_articles: pl.LazyFrame,
    wiki_redirects: pl.LazyFrame,
):
    """Links of every dump file with targets resolved through redirects to article ids (or null), out of core."""
    files = {
        name: [table_path(data.root(), [name], key) for key in context.asset_partition_keys_for_input(name)]
        for name in ("wiki_articles", "wiki_raw_links", "wiki_redirects")
    }  # the files the inputs scan
    out = temp_name(data.files("wiki_links") / "links.parquet")
    try:
        result = resolve_links_out_of_core(
            files["wiki_articles"],
            files["wiki_raw_links"],
            files["wiki_redirects"],
            out,
            temp_directory=data.files("wiki_links"),
            limits=config.to_domain(),
        )
        yield dg.Output(
            ParquetParts((result.path,)),
            metadata={"superseded_article_copies": result.superseded, "memory_limit": config.memory_limit},
        )
    finally:  # the IO manager has copied the file into the table, a row group at a time, by now
        remove(out)


@dg.asset(group_name=GROUP, code_version="1")
def wiki_link_graph(config: WikiLinksConfig, data: DataDirResource, wiki_links: pl.LazyFrame):
    """Directed edges between corpus articles with the reciprocal flag and Seg(a, d_i) of the back link, out of core."""
    out = temp_name(data.files("wiki_links") / "link_graph.parquet")
    try:
        build_link_graph_out_of_core(
            table_path(data.root(), ["wiki_links"], None),
            out,
            temp_directory=data.files("wiki_links"),
            limits=config.to_domain(),
        )
        yield dg.Output(ParquetParts((out,)), metadata={"memory_limit": config.memory_limit})
    finally:  # streamed into the table by the IO manager by now
        remove(out)


class PhpGroupsConfig(dg.Config):
    """How much of D4 `php_groups` stores (see `dagster_ir.wiki.assign_php_groups`)."""

    d4_per_segment: int | None = D4_PER_SEGMENT  # None: every D4 row (segments x out-degree)
    seed: int = 0
    memory_limit: str = DEFAULT_MEMORY_LIMIT  # of the out-of-core joins (DuckDB), as WikiLinksConfig's
    threads: int = 2

    def limits(self) -> OutOfCoreLimits:
        return OutOfCoreLimits(memory_limit=self.memory_limit, threads=self.threads)


@dg.asset(group_name=GROUP, code_version="2")
def php_groups(config: PhpGroupsConfig, data: DataDirResource, wiki_links: pl.LazyFrame, wiki_link_graph: pl.LazyFrame):
    """PHP link groups: D1-D3 for every (article, segment, linked article), D4 as a seeded sample per segment."""
    out = temp_name(data.files("wiki_links") / "php_groups.parquet")
    try:
        result = assign_php_groups_out_of_core(
            table_path(data.root(), ["wiki_links"], None),
            table_path(data.root(), ["wiki_link_graph"], None),
            out,
            temp_directory=data.files("wiki_links"),
            limits=config.limits(),
            d4_per_segment=config.d4_per_segment,
            seed=config.seed,
        )
        metadata = {
            "d4_per_segment": dg.MetadataValue.int(-1 if config.d4_per_segment is None else config.d4_per_segment),
            **{f"full_{g}": dg.MetadataValue.int(n) for g, n in result.sizes.items()},
        }
        yield dg.Output(ParquetParts((out,)), metadata=metadata)
    finally:  # streamed into the table by the IO manager by now
        remove(out)


@dg.asset_check(asset=php_groups, blocking=True, additional_ins={"wiki_links": dg.AssetIn()})
def php_groups_disjoint_and_covering(
    context: dg.AssetCheckExecutionContext, data: DataDirResource, php_groups: pl.LazyFrame, wiki_links: pl.LazyFrame
) -> dg.AssetCheckResult:
    """D1..D4 are disjoint and cover every (d, s, d_i): in full on a seeded sample of articles, D1-D3 everywhere."""
    k = _stored_d4_per_segment(context)
    problems = check_php_groups_out_of_core(  # over the stored files, at the default memory_limit
        table_path(data.root(), ["php_groups"], None),
        table_path(data.root(), ["wiki_links"], None),
        temp_directory=data.files("wiki_links"),
        d4_per_segment=k,
        sample_articles=CHECK_SAMPLE_ARTICLES,
    )
    return dg.AssetCheckResult(
        passed=not problems,
        metadata={
            "problems": dg.MetadataValue.md("\n".join(f"- {p}" for p in problems[:20]) or "none"),
            "articles_checked_in_full": dg.MetadataValue.int(CHECK_SAMPLE_ARTICLES),
        },
    )


def _stored_d4_per_segment(context: dg.AssetCheckExecutionContext) -> int | None:
    """The D4 sample size of the `php_groups` materialization being checked (its metadata)."""
    event = context.instance.get_latest_materialization_event(dg.AssetKey("php_groups"))
    value = (
        event.asset_materialization.metadata.get("d4_per_segment") if event and event.asset_materialization else None
    )
    if value is None:
        return D4_PER_SEGMENT
    return None if value.value < 0 else int(value.value)


@dg.asset(
    group_name=GROUP,
    code_version="3",
    ins={"wiki_articles": dg.AssetIn(), "wiki_redirects": dg.AssetIn()},
)
def wiki_stats(
    context: dg.AssetExecutionContext,
    data: DataDirResource,
    wiki_articles: pl.LazyFrame,
    wiki_redirects: pl.LazyFrame,
    wiki_links: pl.LazyFrame,
    wiki_link_graph: pl.LazyFrame,
    php_groups: pl.LazyFrame,
) -> pl.DataFrame:
    """Corpus statistics by queries over the Parquet files: articles, links, edges, symmetric share, groups, out-degrees."""
    articles = latest_articles(wiki_articles).segments
    stats = link_statistics(articles, wiki_redirects, wiki_links, wiki_link_graph, php_groups)
    histogram = stats.pop("out_degree_histogram")
    stored = stats.pop("group_sizes")
    scalars = {k: v for k, v in stats.items() if isinstance(v, (int, float))}
    sizes = php_group_sizes_out_of_core(
        table_path(data.root(), ["wiki_links"], None),
        table_path(data.root(), ["wiki_link_graph"], None),
        temp_directory=data.files("wiki_links"),
    )  # at the default memory_limit
    scalars.update({f"group_{g}": n for g, n in sizes.items()})
    scalars["group_D4_stored"] = stored["D4"]
    context.add_output_metadata(
        {
            **{
                k: (dg.MetadataValue.float(v) if isinstance(v, float) else dg.MetadataValue.int(v))
                for k, v in scalars.items()
            },
            "out_degree_histogram": bar_chart_markdown(
                [d for d, _ in histogram], [c for _, c in histogram], "out-degree (in-corpus edges)", "articles"
            ),
        }
    )
    return pl.DataFrame({"statistic": list(scalars), "value": [float(v) for v in scalars.values()]})


wiki_assets = [wiki_dump_file, wiki_dump, wiki_articles, wiki_links, wiki_link_graph, php_groups, wiki_stats]
wiki_checks = [php_groups_disjoint_and_covering]
