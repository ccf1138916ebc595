"""Wikipedia: dump reading, wikitext to text and links, segments, link graph and PHP groups."""

from dagster_ir.wiki.articles import (
    ArticleConfig,
    ExtractCounts,
    ExtractResult,
    LatestArticles,
    concat_results,
    extract_dump,
    extract_dump_parallel,
    iter_extract,
    latest_articles,
    latest_links,
    pack_segments,
    split_paragraph,
    write_extract_parts,
)
from dagster_ir.wiki.dump import DumpError, Page, check_dump, iter_pages, split_ranges, stream_offsets
from dagster_ir.wiki.graph import (
    GROUPS,
    assign_php_groups,
    build_link_graph,
    check_php_groups,
    link_statistics,
    resolve_links,
)
from dagster_ir.wiki.titles import is_article_title, namespace_of, normalize_title
from dagster_ir.wiki.wikitext import DEFAULT_DROP_SECTIONS, Link, Paragraph, parse_wikitext

__all__ = [
    "DEFAULT_DROP_SECTIONS",
    "GROUPS",
    "ArticleConfig",
    "DumpError",
    "ExtractCounts",
    "ExtractResult",
    "LatestArticles",
    "Link",
    "Page",
    "Paragraph",
    "assign_php_groups",
    "build_link_graph",
    "check_dump",
    "check_php_groups",
    "concat_results",
    "extract_dump",
    "extract_dump_parallel",
    "is_article_title",
    "iter_extract",
    "iter_pages",
    "latest_articles",
    "latest_links",
    "link_statistics",
    "namespace_of",
    "normalize_title",
    "pack_segments",
    "parse_wikitext",
    "resolve_links",
    "split_paragraph",
    "split_ranges",
    "stream_offsets",
    "write_extract_parts",
]
