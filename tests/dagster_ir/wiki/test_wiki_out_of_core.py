"""`resolve_links_out_of_core` (DuckDB, spilling) gives the rows of the in-memory reference
(`latest_articles` + `latest_links` + `resolve_links`), in the same order, on made-up dumps.

Two dumps ("a" and "b") of the same small wiki share articles: Lyon is newer in "a" (its revision
in "b" is lowered), Paris has the same revision in both (the greater partition key, "b", wins).
Links cover a redirect, a chain of two, a loop, a chain longer than the hop limit, a redirect whose
source is an article title (the article wins), a source with two redirects (the smaller target wins),
a target missing from the corpus, lower-case first letters, fragments, underscores and self links.
"""

from pathlib import Path

import polars as pl
import pytest
from wiki_dumps import page, write_dump

from dagster_ir.schemas import LINKS, RAW_LINKS, validate
from dagster_ir.wiki.articles import ArticleConfig, extract_dump, latest_articles, latest_links
from dagster_ir.wiki.graph import build_link_graph, resolve_links
from dagster_ir.wiki.out_of_core import (
    OutOfCoreLimits,
    build_link_graph_out_of_core,
    resolve_links_out_of_core,
    scan_link_graph,
    scan_links,
)

LINKING = (
    "Links go to [[paris]], [[Paris#History|its history]], [[City_of_light]], [[Lutetia]], [[Loop]], "
    "[[Long1]], [[Rome]], [[Twice]], [[Nowhere]], [[lyon]] and [[Self]] here."
)
COMMON = [
    page(1, "Paris", "Paris is a city. It links [[Rome]] and [[rome#Art|the arts]] and [[Paris]] itself."),
    page(2, "Rome", "Rome is a city too. It links [[Paris]] and [[Bee]] and [[Lyon]] in its text."),
    page(3, "Lyon", "Lyon is a third city. It links [[Paris]] only, through [[City of light]] again."),
    page(4, "Self", "Self links [[Self]] and " + LINKING),
    page(10, "City of light", "#REDIRECT [[Lutetia]]", redirect="Lutetia"),
    page(11, "Lutetia", "#REDIRECT [[Paris]]", redirect="Paris"),
    page(12, "Loop", "#REDIRECT [[Pool]]", redirect="Pool"),
    page(13, "Pool", "#REDIRECT [[Loop]]", redirect="Loop"),
    page(14, "Rome", "#REDIRECT [[Paris]]", redirect="Paris"),  # an article title: ignored
    page(15, "Twice", "#REDIRECT [[Rome]]", redirect="Rome"),
    page(16, "Twice", "#REDIRECT [[Lyon]]", redirect="Lyon"),  # two targets: the smaller, Lyon
    *[page(20 + i, f"Long{i}", f"#REDIRECT [[Long{i + 1}]]", redirect=f"Long{i + 1}") for i in range(1, 7)],
    page(27, "Long7", "Long7 is an article at the end of a long chain of redirects."),
]
ONLY_B = [page(5, "Bee", "Bee is in the second dump only. It links [[Lyon]] and [[Long5]] and " + LINKING)]
CONFIG = ArticleConfig(segment_max_words=14, min_words=3)


def write_partition(root: Path, name: str, pages, *, revision_shift: dict[str, int] | None = None) -> dict[str, Path]:
    """Extract a dump and store its tables as the IO manager does (a `partition` column per file)."""
    result = extract_dump(write_dump(root / f"{name}.xml", pages), CONFIG)
    segments = result.segments
    for article, shift in (revision_shift or {}).items():
        segments = segments.with_columns(
            revision_id=pl.when(pl.col("article_id") == article)
            .then(pl.col("revision_id") + shift)
            .otherwise(pl.col("revision_id"))
        )
    paths = {}
    for table, frame in (("segments", segments), ("raw_links", result.raw_links), ("redirects", result.redirects)):
        paths[table] = root / name / f"{table}.parquet"
        paths[table].parent.mkdir(parents=True, exist_ok=True)
        frame.with_columns(partition=pl.lit(name)).write_parquet(paths[table])
    return paths


def reference(parts: list[dict[str, Path]], max_hops: int = 5) -> tuple[pl.DataFrame, int]:
    """The in-memory rules, as the wiki_links asset applied them before (IO manager's scans)."""
    keep = len(parts) > 1

    def scan(table: str) -> pl.LazyFrame:
        frame = pl.scan_parquet([str(p[table]) for p in parts], missing_columns="insert")
        return frame if keep else frame.drop("partition", strict=False)

    latest = latest_articles(scan("segments"))
    articles = latest.segments.select("article_id", "title").unique()
    raw = latest_links(scan("raw_links"), latest).drop("partition", strict=False)
    links = resolve_links(raw, articles, scan("redirects").drop("partition", strict=False), max_hops=max_hops)
    return links.collect(), latest.superseded


DEFAULT_LIMITS = OutOfCoreLimits()


def out_of_core(tmp_path: Path, parts: list[dict[str, Path]], limits=DEFAULT_LIMITS, **kwargs):
    result = resolve_links_out_of_core(
        [p["segments"] for p in parts],
        [p["raw_links"] for p in parts],
        [p["redirects"] for p in parts],
        tmp_path / "out" / "links.parquet",
        temp_directory=tmp_path / "spill",
        limits=limits,
        **kwargs,
    )
    return result, scan_links(result.path).collect()


@pytest.fixture
def two_dumps(tmp_path: Path) -> list[dict[str, Path]]:
    a = write_partition(tmp_path, "a", COMMON)
    b = write_partition(tmp_path, "b", COMMON + ONLY_B, revision_shift={"3": -1})  # Lyon older in b
    return [a, b]


def test_two_dumps_give_the_reference_rows_in_order(tmp_path: Path, two_dumps) -> None:
    expected, superseded = reference(two_dumps)
    result, links = out_of_core(tmp_path, two_dumps)
    validate(links, LINKS, "links")
    assert links.equals(expected)
    assert (
        (result.rows, result.superseded) == (len(expected), superseded) == (len(expected), 5)
    )  # Paris, Rome, Lyon, Self, Long7
    assert not any((tmp_path / "spill").iterdir())  # the work database and spill files are gone


def test_the_rules_themselves(tmp_path: Path, two_dumps) -> None:
    _, links = out_of_core(tmp_path, two_dumps)
    winners = set(links["src_id"])
    assert winners == {"1", "2", "3", "4", "5"}
    self_links = links.filter(pl.col("src_id") == "4").select("target_title", "target_id").unique().sort("target_title")
    assert dict(self_links.iter_rows()) == {
        "Paris": "1",
        "City of light": "1",
        "Lutetia": "1",  # fragment and case; a chain of two
        "Loop": None,
        "Long1": None,  # a loop; a chain longer than five hops
        "Rome": "2",  # an article: its redirect to Paris is ignored
        "Twice": "3",  # two redirects: the smaller target, Lyon
        "Nowhere": None,
        "Lyon": "3",
        "Self": "4",
    }
    # Lyon is newer in a, Paris ties (b wins): each article's links come from one copy only
    assert (
        links.filter(pl.col("src_id") == "3").height
        == extract_dump(write_dump(tmp_path / "lyon.xml", COMMON[2:3]), CONFIG).raw_links.height
    )
    assert links.filter(pl.col("src_id") == "5", pl.col("target_title") == "Long5")["target_id"].to_list() == ["27"]


def test_one_dump_and_fewer_hops(tmp_path: Path, two_dumps) -> None:
    expected, superseded = reference(two_dumps[1:], max_hops=1)
    result, links = out_of_core(tmp_path, two_dumps[1:], max_hops=1)
    assert links.equals(expected) and result.superseded == superseded == 0
    target = dict(links.select("target_title", "target_id").unique().iter_rows())
    assert (target["Lutetia"], target["City of light"], target["Long5"]) == ("1", None, None)  # one hop only


def test_spills_under_a_small_memory_limit(tmp_path: Path) -> None:
    """200 000 links over 20 000 titles and 20 000 redirects through a 64 MB limit, one thread."""
    n_titles = 20_000
    ids = pl.int_range(n_titles, eager=True).cast(pl.String)
    segments = pl.DataFrame(
        {
            "article_id": ids,
            "title": "T" + ids,
            "segment_no": 1,
            "section": "",
            "text": "x",
            "n_words": 1,
            "revision_id": 1,
        }
    ).cast({"segment_no": pl.Int32, "n_words": pl.Int32})
    redirects = pl.DataFrame({"from_title": "R" + ids, "to_title": "T" + ids.reverse()})
    k = pl.int_range(200_000, eager=True)
    raw = pl.DataFrame(
        {
            "src_id": (k % n_titles).cast(pl.String),
            "src_segment": 1,
            "anchor_text": "anchor " + k.cast(pl.String),
            "anchor_start": 0,
            "anchor_end": 6,
            "target_title": pl.Series(["T", "R", "M"]).gather(k % 3) + ((k * 7919) % (n_titles + 500)).cast(pl.String),
        }
    )
    raw = raw.cast(RAW_LINKS)
    part = {}
    for table, frame in (("segments", segments), ("raw_links", raw), ("redirects", redirects)):
        part[table] = tmp_path / f"{table}.parquet"
        frame.write_parquet(part[table])
    expected, _ = reference([part])
    limits = OutOfCoreLimits(memory_limit="64MB", threads=1)
    result, links = out_of_core(tmp_path, [part], limits=limits)
    assert links.equals(expected)
    assert 0 < links["target_id"].null_count() < links.height
    graph = tmp_path / "graph.parquet"
    rows = build_link_graph_out_of_core(result.path, graph, temp_directory=tmp_path / "spill", limits=limits)
    expected_graph = build_link_graph(expected)
    assert scan_link_graph(graph).collect().equals(expected_graph) and rows == expected_graph.height
    assert 0 < expected_graph["reciprocal"].sum() < rows


def test_link_graph_of_two_dumps(tmp_path: Path, two_dumps) -> None:
    result, links = out_of_core(tmp_path, two_dumps)
    graph = tmp_path / "graph.parquet"
    build_link_graph_out_of_core(result.path, graph, temp_directory=tmp_path / "spill")
    stored = scan_link_graph(graph).collect()
    assert stored.equals(build_link_graph(links))
    paris_rome = stored.filter(pl.col("src_id") == "1", pl.col("dst_id") == "2").row(0, named=True)
    assert (paris_rome["n_links"], paris_rome["reciprocal"]) == (2, True)  # [[Rome]] and [[rome#Art]]
    assert stored.filter(pl.col("src_id") == pl.col("dst_id")).height == 0  # self links make no edge


def test_bad_input_names_the_file_or_field(tmp_path: Path, two_dumps) -> None:
    missing = tmp_path / "nope.parquet"
    with pytest.raises(FileNotFoundError, match="raw_links: .*nope.parquet"):
        resolve_links_out_of_core(
            [two_dumps[0]["segments"]], [missing], [], tmp_path / "o.parquet", temp_directory=tmp_path
        )
    with pytest.raises(ValueError, match="threads"):
        OutOfCoreLimits(threads=0)
    with pytest.raises(ValueError, match="max_hops"):
        out_of_core(tmp_path, two_dumps, max_hops=-1)


@pytest.mark.parametrize("k", [None, 0, 1, 3])
def test_php_groups_equal_the_in_memory_ones(tmp_path: Path, two_dumps, k) -> None:
    from dagster_ir.wiki.graph import assign_php_groups, php_group_sizes
    from dagster_ir.wiki.out_of_core import assign_php_groups_out_of_core, scan_php_groups

    result, links = out_of_core(tmp_path, two_dumps)
    graph_path = tmp_path / "graph.parquet"
    build_link_graph_out_of_core(result.path, graph_path, temp_directory=tmp_path / "spill")
    graph = scan_link_graph(graph_path).collect()
    out = tmp_path / "groups.parquet"
    made = assign_php_groups_out_of_core(
        result.path, graph_path, out, temp_directory=tmp_path / "spill", d4_per_segment=k, seed=7
    )
    expected = assign_php_groups(links, graph, d4_per_segment=k, seed=7)
    assert scan_php_groups(out).collect().equals(expected) and made.rows == expected.height
    assert made.sizes == php_group_sizes(links, graph)
    from dagster_ir.wiki.out_of_core import php_group_sizes_out_of_core

    assert php_group_sizes_out_of_core(result.path, graph_path, temp_directory=tmp_path / "spill") == made.sizes
    assert set(expected["group"]) == ({"D1", "D2", "D3"} if k == 0 else {"D1", "D2", "D3", "D4"})


def test_php_groups_sample_of_many_links_under_a_small_limit(tmp_path: Path) -> None:
    """D4 samples of 2 000 articles with 30 out-edges each, two segments, at 64 MB and one thread."""
    from dagster_ir.wiki.graph import assign_php_groups
    from dagster_ir.wiki.out_of_core import assign_php_groups_out_of_core, scan_php_groups

    n = 2_000
    k = pl.int_range(n * 40, eager=True)
    src = k // 40
    links = pl.DataFrame(
        {
            "src_id": src.cast(pl.String),
            "src_segment": 1 + (k % 40 >= 30).cast(pl.Int32),
            "anchor_text": "a",
            "anchor_start": 0,
            "anchor_end": 1,
            "target_title": "t",
            "target_id": ((src + 1 + (k % 40) % 30 * 37) % n).cast(pl.String),
        }
    ).cast(LINKS)
    links_path, graph_path = tmp_path / "links.parquet", tmp_path / "graph.parquet"
    links.write_parquet(links_path)
    limits = OutOfCoreLimits(memory_limit="64MB", threads=1)
    build_link_graph_out_of_core(links_path, graph_path, temp_directory=tmp_path, limits=limits)
    graph = scan_link_graph(graph_path).collect()
    out = tmp_path / "groups.parquet"
    assign_php_groups_out_of_core(
        links_path, graph_path, out, temp_directory=tmp_path, limits=limits, d4_per_segment=8, seed=3
    )
    expected = assign_php_groups(links, graph, d4_per_segment=8, seed=3)
    assert scan_php_groups(out).collect().equals(expected)
    # segment 1 links all 30 of its article's edges (no D4), segment 2 links 10: 8 of its 20 D4
    assert expected.filter(pl.col("group") == "D4").group_by("segment_no").len().rows() == [(2, n * 8)]
