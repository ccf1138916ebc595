"""`wiki_links`, `wiki_link_graph` and `php_groups` out of core: newest copy of each article, titles,
redirects, link targets, edges and PHP groups as DuckDB queries over the Parquet files, spilling to
disk, so that peak memory is set by `memory_limit`, not by the number of titles, redirects or links.

The rules are those of the in-memory reference, `latest_articles` + `latest_links` + `resolve_links`
(Polars hash joins whose memory grows with the dump), row for row and in the same order:
- an article found in several dumps (partitions) is taken from the dump with its highest
  `revision_id` (a dump without revisions counts -1), ties to the greatest partition key; only that
  copy's segments give titles and only its links are kept;
- a title names the smallest article id holding it; a redirect whose source is an article title is
  ignored (articles win) and a source with several redirects goes to the smallest target;
- a link target is followed through at most `max_hops` redirects; a chain that is longer, or a loop,
  ends on a title that is no article and stays unresolved (null `target_id`), as does a target that
  names no article of the corpus;
- the links come out in the order of the raw link files and of their rows.

`build_link_graph_out_of_core` gives the rows of `build_link_graph` (same order: by src, dst), and
`assign_php_groups_out_of_core` those of `assign_php_groups` with their sizes (`php_group_sizes`):
the D4 sample's per-article order is the same Polars hash of (seed, d, d_i), computed row by row in a
streaming pass (bounded), and ranked in DuckDB. `check_php_groups_out_of_core` finds the problems of
`check_php_groups` (disjoint and covering groups) by queries over the PHP_GROUPS and LINKS files.

Every intermediate table lives in a DuckDB database file under `temp_directory` (the buffer manager
evicts and spills it under `memory_limit`); joins, aggregates and the final sort spill there too.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import duckdb
import polars as pl

from dagster_ir.schemas import LINK_GRAPH, LINKS, PHP_GROUPS
from dagster_ir.storage.atomic import atomic_path, remove, temp_name
from dagster_ir.wiki.graph import GROUPS

PathLike = str | os.PathLike[str]
MEMORY_LIMIT_ENV = "DAGSTER_IR_DUCKDB_MEMORY_LIMIT"
#: The default memory_limit of every out-of-core step: 2GB (a few GiB on a 24 GiB machine shared
#: with the rest of a run), or $DAGSTER_IR_DUCKDB_MEMORY_LIMIT where set.
DEFAULT_MEMORY_LIMIT = os.environ.get(MEMORY_LIMIT_ENV) or "2GB"


@dataclass(frozen=True)
class OutOfCoreLimits:
    """What DuckDB may use: `memory_limit` as DuckDB reads it ("2GB", "512MB"), worker `threads`."""

    memory_limit: str = DEFAULT_MEMORY_LIMIT
    threads: int = 2

    def __post_init__(self) -> None:
        if self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {self.threads}")
        if not str(self.memory_limit).strip():
            raise ValueError("memory_limit must name a size, e.g. '2GB'")


@dataclass(frozen=True)
class ResolvedLinks:
    path: Path  # the LINKS Parquet file written
    rows: int
    superseded: int  # older article copies dropped (an article in three dumps counts two)


def resolve_links_out_of_core(
    segments: Sequence[PathLike],
    raw_links: Sequence[PathLike],
    redirects: Sequence[PathLike],
    out: PathLike,
    *,
    temp_directory: PathLike,
    limits: OutOfCoreLimits = OutOfCoreLimits(),
    max_hops: int = 5,
) -> ResolvedLinks:
    """Write LINKS for the given Parquet files of segments, raw links and redirects to `out` (atomic).

    Each list holds one file per dump (partition), in the same order for segments and raw links; a
    file's `partition` column (when present) names its dump. `temp_directory` holds the work
    database and DuckDB's spill files and is removed afterwards.
    """
    if max_hops < 0:
        raise ValueError(f"max_hops must be >= 0, got {max_hops}")
    out = Path(out)
    for kind, paths in (("segments", segments), ("raw_links", raw_links), ("redirects", redirects)):
        missing = [str(p) for p in paths if not Path(p).exists()]
        if missing:
            raise FileNotFoundError(f"{kind}: Parquet files not found: {', '.join(missing)}")
    with _work_database(temp_directory, "resolve_links", limits) as (con, _):
        superseded = _load(con, segments, raw_links, redirects)
        _resolve(con, max_hops)
        _write_parquet(con, f"select {', '.join(_quote(c) for c in LINKS)} from links order by file_no, row_no", out)
        rows = int(con.execute("select count(*) from links").fetchone()[0])
    return ResolvedLinks(out, rows, superseded)


def build_link_graph_out_of_core(
    links: PathLike, out: PathLike, *, temp_directory: PathLike, limits: OutOfCoreLimits = OutOfCoreLimits()
) -> int:
    """Write LINK_GRAPH for the LINKS Parquet file `links` to `out` (atomic); returns its rows.

    The edges between distinct articles of the corpus with their link count, the first segment of
    src linking dst and, from the reverse edge, `reciprocal` and `back_segment` (Seg(a, d_i)).
    """
    if not Path(links).exists():
        raise FileNotFoundError(f"wiki_links: Parquet file not found: {links}")
    with _work_database(temp_directory, "link_graph", limits) as (con, _):
        con.execute(
            "create table edges as select src_id, target_id as dst_id, count(*)::integer as n_links, "
            f"min(src_segment)::integer as src_first_segment from read_parquet({_literal(links)}) "
            "where target_id is not null and target_id <> src_id group by src_id, target_id"
        )
        columns = ", ".join(_quote(c) for c in LINK_GRAPH)
        _write_parquet(
            con,
            f"select {columns} from (select e.src_id, e.dst_id, e.n_links, e.src_first_segment, "
            "b.src_first_segment is not null as reciprocal, b.src_first_segment as back_segment "
            "from edges e left join edges b on e.src_id = b.dst_id and e.dst_id = b.src_id) "
            "order by src_id, dst_id",
            out,
        )
        return int(con.execute("select count(*) from edges").fetchone()[0])


@dataclass(frozen=True)
class PhpGroupsResult:
    rows: int  # rows written (D1-D3 and the D4 sample)
    sizes: dict[str, int]  # rows of each group of the full table, as `php_group_sizes`


def assign_php_groups_out_of_core(
    links: PathLike,
    link_graph: PathLike,
    out: PathLike,
    *,
    temp_directory: PathLike,
    limits: OutOfCoreLimits = OutOfCoreLimits(),
    d4_per_segment: int | None = None,
    seed: int = 0,
) -> PhpGroupsResult:
    """Write PHP_GROUPS for the LINKS and LINK_GRAPH Parquet files to `out` (atomic), as
    `assign_php_groups(links, link_graph, d4_per_segment=..., seed=...)` would, sorted by
    (article_id, segment_no, linked_id); also the full groups' sizes."""
    if d4_per_segment is not None and d4_per_segment < 0:
        raise ValueError(f"d4_per_segment must be >= 0 or None, got {d4_per_segment}")
    for kind, path in (("wiki_links", links), ("wiki_link_graph", link_graph)):
        if not Path(path).exists():
            raise FileNotFoundError(f"{kind}: Parquet file not found: {path}")
    with _work_database(temp_directory, "php_groups", limits) as (con, work):
        edges_file = work / "edges.parquet"  # the hash that orders D4: Polars', one row at a time
        pl.scan_parquet(str(link_graph)).select(
            "src_id", "dst_id", "reciprocal", "back_segment", h=pl.struct("src_id", "dst_id").hash(seed)
        ).sink_parquet(edges_file)
        sizes = _explicit_groups(con, links, edges_file)
        if d4_per_segment is None:
            candidates = "select n.src_id, n.src_segment, e.dst_id from n_in n join edges e using (src_id)"
        else:  # k D4 rows of a segment lie among its article's first k + n_in edges in hash order
            con.execute(
                "create table ranked as select src_id, dst_id, h, "
                "row_number() over (partition by src_id order by h) as rank from edges"
            )
            candidates = (
                "select src_id, src_segment, dst_id from (select n.src_id, n.src_segment, r.dst_id, r.rank "
                "from n_in n join ranked r using (src_id) where r.rank <= n.n_in + "
                f"{int(d4_per_segment)}) c anti join in_segment i using (src_id, src_segment, dst_id) "
                f"qualify row_number() over (partition by src_id, src_segment order by rank) <= {int(d4_per_segment)}"
            )
        con.execute(
            f"insert into groups select c.src_id, c.src_segment, c.dst_id, 'D4' from ({candidates}) c "
            "anti join in_segment i using (src_id, src_segment, dst_id)"
        )
        columns = ", ".join(_quote(c) for c in PHP_GROUPS)
        _write_parquet(con, f"select {columns} from groups order by article_id, segment_no, linked_id", out)
        rows = int(con.execute("select count(*) from groups").fetchone()[0])
    return PhpGroupsResult(rows, sizes)


def php_group_sizes_out_of_core(
    links: PathLike, link_graph: PathLike, *, temp_directory: PathLike, limits: OutOfCoreLimits = OutOfCoreLimits()
) -> dict[str, int]:
    """Rows of each group D1..D4 of the full PHP_GROUPS table (as `php_group_sizes`), never listed."""
    with _work_database(temp_directory, "php_group_sizes", limits) as (con, _):
        return _explicit_groups(con, links, link_graph)


def _explicit_groups(con: duckdb.DuckDBPyConnection, links: PathLike, edges_file: PathLike) -> dict[str, int]:
    """Tables `in_segment` (distinct links between articles per segment), `edges`, `groups` (D1-D3)
    and `n_in` (distinct linked articles per segment); returns the full groups' sizes."""
    con.execute(
        "create table in_segment as select distinct src_id, src_segment, target_id as dst_id "
        f"from read_parquet({_literal(links)}) where target_id is not null and target_id <> src_id"
    )
    con.execute(f"create table edges as select * from read_parquet({_literal(edges_file)})")
    con.execute(
        "create table groups as select i.src_id as article_id, i.src_segment as segment_no, "
        "i.dst_id as linked_id, case when not e.reciprocal then 'D3' when e.back_segment = 1 then 'D1' "
        "else 'D2' end as \"group\" from in_segment i join edges e using (src_id, dst_id)"
    )
    counts = dict(con.execute('select "group", count(*) from groups group by 1').fetchall())
    con.execute("create table n_in as select src_id, src_segment, count(*) as n_in from in_segment group by all")
    d4 = con.execute(
        "select coalesce(sum(d.degree - n.n_in), 0) from n_in n join "
        "(select src_id, count(*) as degree from edges group by src_id) d using (src_id)"
    ).fetchone()[0]
    return {g: int(counts.get(g, 0)) for g in ("D1", "D2", "D3")} | {"D4": int(d4)}


def scan_php_groups(path: PathLike) -> pl.LazyFrame:
    """The PHP_GROUPS file written by `assign_php_groups_out_of_core`, with the PHP_GROUPS dtypes."""
    return pl.scan_parquet(str(path)).select(list(PHP_GROUPS)).cast(PHP_GROUPS)


def scan_link_graph(path: PathLike) -> pl.LazyFrame:
    """The LINK_GRAPH file written by `build_link_graph_out_of_core`, with the LINK_GRAPH dtypes."""
    return pl.scan_parquet(str(path)).select(list(LINK_GRAPH)).cast(LINK_GRAPH)


def scan_links(path: PathLike) -> pl.LazyFrame:
    """The LINKS file written by `resolve_links_out_of_core` as a lazy frame with the LINKS dtypes."""
    return pl.scan_parquet(str(path)).select(list(LINKS)).cast(LINKS)


@contextmanager
def _work_database(
    temp_directory: PathLike, name: str, limits: OutOfCoreLimits
) -> Iterator[tuple[duckdb.DuckDBPyConnection, Path]]:
    """A DuckDB work database in a fresh folder under `temp_directory`, configured by `limits`
    (its spill files beside it), and that folder; both are gone afterwards, however the step ends."""
    work = temp_name(Path(temp_directory) / name)
    work.mkdir(parents=True)
    try:
        con = duckdb.connect(str(work / "work.duckdb"))
        try:
            _configure(con, work / "spill", limits)
            yield con, work
        finally:
            con.close()
    finally:
        remove(work)


def _write_parquet(con: duckdb.DuckDBPyConnection, query: str, out: PathLike) -> None:
    """The rows of `query` as a zstd Parquet file at `out`, written atomically.

    On one thread: the queries end in a sort of the whole table, and DuckDB's sort holds buffers
    per thread (with two threads, 2.2 M links ran out of a 64MB memory_limit; one thread fits)."""
    threads = con.execute("select current_setting('threads')").fetchone()[0]
    con.execute("set threads = 1")
    try:
        with atomic_path(out) as tmp:
            con.execute(f"copy ({query}) to {_literal(tmp)} (format parquet, compression zstd)")
    finally:
        con.execute(f"set threads = {int(threads)}")


def _configure(con: duckdb.DuckDBPyConnection, spill: Path, limits: OutOfCoreLimits) -> None:
    spill.mkdir(parents=True, exist_ok=True)
    con.execute(f"set memory_limit = {_literal(limits.memory_limit)}")
    con.execute(f"set threads = {int(limits.threads)}")
    con.execute(f"set temp_directory = {_literal(spill)}")
    con.execute("set preserve_insertion_order = false")  # the order comes from the explicit sort


def _columns(con: duckdb.DuckDBPyConnection, paths: Sequence[PathLike]) -> set[str]:
    names: set[str] = set()
    for path in paths:
        names |= {row[0] for row in con.execute(f"describe select * from read_parquet({_literal(path)})").fetchall()}
    return names


def _union(paths: Sequence[PathLike], columns: str, *, numbered: bool = False) -> str:
    """One select over every file (columns missing from a file read as null), optionally with the
    file's number and each row's number in its file."""
    parts = []
    for file_no, path in enumerate(paths):
        extra = f", {file_no} as file_no, file_row_number as row_no" if numbered else ""
        options = ", file_row_number = true" if numbered else ""
        parts.append(f"select {columns}{extra} from read_parquet({_literal(path)}{options})")
    return " union all by name ".join(parts)


def _load(
    con: duckdb.DuckDBPyConnection,
    segments: Sequence[PathLike],
    raw_links: Sequence[PathLike],
    redirects: Sequence[PathLike],
) -> int:
    """Tables `titles` (title, article_id), `redirect_of` (from_title, to_title) and `kept_links`
    (raw links of the winning copies, numbered); returns the number of superseded copies."""
    segment_columns = _columns(con, segments)
    has_partition = "partition" in segment_columns
    partition = "partition" if has_partition else "''"
    revision = "revision_id" if "revision_id" in segment_columns else "null::bigint"
    if segments:
        con.execute(
            f"create table segment_titles as select article_id, title, {partition} as dump, "
            f"{revision} as revision_id from ({_union(segments, '*')})"
        )
    else:
        con.execute("create table segment_titles (article_id varchar, title varchar, dump varchar, revision_id bigint)")
    con.execute(
        "create table per_dump as select article_id, dump, coalesce(max(revision_id), -1) as revision "
        "from segment_titles group by article_id, dump"
    )
    con.execute(
        "create table winners as select p.article_id, max(p.dump) as dump from per_dump p join "
        "(select article_id, max(revision) as revision from per_dump group by article_id) b "
        "using (article_id, revision) group by p.article_id"
    )
    superseded = con.execute("select (select count(*) from per_dump) - (select count(*) from winners)").fetchone()[0]
    con.execute(
        "create table titles as select s.title, min(s.article_id) as article_id from segment_titles s "
        "semi join winners w on s.article_id = w.article_id and s.dump = w.dump group by s.title"
    )
    con.execute("drop table segment_titles; drop table per_dump")
    if redirects:
        con.execute(
            "create table redirect_of as select from_title, min(to_title) as to_title from "
            f"({_union(redirects, 'from_title, to_title')}) r "
            "anti join titles t on r.from_title = t.title group by from_title"
        )
    else:
        con.execute("create table redirect_of (from_title varchar, to_title varchar)")
    link_columns = ", ".join(_quote(c) for c in LINKS if c != "target_id")
    if raw_links:
        numbered = f"select {link_columns}, file_no, row_no"
        if "partition" in _columns(con, raw_links):  # several copies of an article: the winner's links
            con.execute(
                f"create table kept_links as {numbered} from ({_union(raw_links, '*', numbered=True)}) l "
                f"semi join winners w on l.src_id = w.article_id and l.partition = w.dump"
            )
        else:  # links of one dump: all of them
            con.execute(f"create table kept_links as {numbered} from ({_union(raw_links, '*', numbered=True)})")
    else:
        con.execute(
            f"create table kept_links as select {link_columns}, 0 as file_no, 0::bigint as row_no "
            "from (select null::varchar as src_id, null::integer as src_segment, null::varchar as anchor_text, "
            "null::integer as anchor_start, null::integer as anchor_end, null::varchar as target_title) where false"
        )
    con.execute("drop table winners")
    return int(superseded)


def _resolve(con: duckdb.DuckDBPyConnection, max_hops: int) -> None:
    """Table `links`: the kept links with `target_id`, each distinct target followed through redirects."""
    con.execute("create table hop as select distinct target_title, target_title as current from kept_links")
    for _ in range(max_hops):
        con.execute(
            "create table next_hop as select h.target_title, coalesce(r.to_title, h.current) as current "
            "from hop h left join redirect_of r on h.current = r.from_title"
        )
        con.execute("drop table hop; alter table next_hop rename to hop")
    con.execute(
        "create table resolved as select h.target_title, t.article_id as target_id "
        "from hop h left join titles t on h.current = t.title"
    )
    con.execute(
        "create table links as select k.*, r.target_id from kept_links k "
        "left join resolved r on k.target_title = r.target_title"
    )


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(value: object) -> str:
    return "'" + str(value).replace("'", "''") + "'"


def check_php_groups_out_of_core(
    groups: PathLike,
    links: PathLike,
    *,
    temp_directory: PathLike,
    limits: OutOfCoreLimits = OutOfCoreLimits(),
    d4_per_segment: int | None = None,
    sample_articles: int | None = None,
    seed: int = 0,
) -> list[str]:
    """`check_php_groups(groups, links, ...)` over the PHP_GROUPS and LINKS Parquet files, as DuckDB
    queries under `limits`: the same problems, in the same order, with the same counts (the row
    quoted after "e.g." may differ). The link graph is rebuilt from the links (back segments from
    every article); with `sample_articles=n` the rule is proven in full (every D4 row worked out) on
    the n articles of smallest Polars hash of (seed, article_id), the same sample as the in-memory
    check, and the explicit part (D1-D3) everywhere; `d4_per_segment=k`: the table holds at most k
    D4 rows per segment, so each segment in scope must hold min(k, its D4 size) of its own D4."""
    if d4_per_segment is not None and d4_per_segment < 0:
        raise ValueError(f"d4_per_segment must be >= 0 or None, got {d4_per_segment}")
    if sample_articles is not None and sample_articles < 0:
        raise ValueError(f"sample_articles must be >= 0 or None, got {sample_articles}")
    for kind, path in (("php_groups", groups), ("wiki_links", links)):
        if not Path(path).exists():
            raise FileNotFoundError(f"{kind}: Parquet file not found: {path}")
    key = "article_id, segment_no, linked_id"
    problems: list[str] = []
    with _work_database(temp_directory, "check_php_groups", limits) as (con, work):

        def report(what: str, query: str) -> None:
            n = int(con.execute(f"select count(*) from ({query})").fetchone()[0])
            if n:
                cursor = con.execute(f"select * from ({query}) limit 1")
                first = dict(zip([d[0] for d in cursor.description], cursor.fetchone(), strict=True))
                problems.append(f"{n} {what}, e.g. {first}")

        con.execute(f'create view actual as select {key}, "group" from read_parquet({_literal(groups)})')
        con.execute(
            "create table in_segment as select distinct src_id, src_segment, target_id as dst_id "
            f"from read_parquet({_literal(links)}) where target_id is not null and target_id <> src_id"
        )
        con.execute(  # the link graph of every link: reciprocal and Seg(a, d_i) from the reverse edge
            "create table edges as select src_id, dst_id, min(src_segment) as first_segment from in_segment group by all"
        )
        con.execute(
            "create table graph as select e.src_id, e.dst_id, b.first_segment is not null as reciprocal, "
            "b.first_segment as back_segment from edges e left join edges b on e.src_id = b.dst_id and e.dst_id = b.src_id"
        )
        con.execute("drop table edges")
        explicit = (
            "select i.src_id as article_id, i.src_segment as segment_no, i.dst_id as linked_id, "
            "case when not g.reciprocal then 'D3' when g.back_segment = 1 then 'D1' else 'D2' end as \"group\" "
            "from {in_segment} i join {graph} g using (src_id, dst_id)"
        )
        report(
            "duplicate (article_id, segment_no, linked_id) rows",
            f"select a.* from actual a semi join (select {key} from actual group by all having count(*) > 1) d "
            f"using ({key})",
        )
        report(
            f"rows whose group is not one of {GROUPS}",
            f'select * from actual where "group" not in ({", ".join(_literal(g) for g in GROUPS)})',
        )
        if sample_articles is not None:
            articles, keyed = work / "articles.parquet", work / "keyed.parquet"
            con.execute(
                f"copy (select distinct src_id as article_id from read_parquet({_literal(links)})) "
                f"to {_literal(articles)} (format parquet)"
            )
            pl.scan_parquet(articles).with_columns(key=pl.col("article_id").hash(seed)).sink_parquet(keyed)
            con.execute(
                f"create table chosen as select article_id from read_parquet({_literal(keyed)}) "
                f"order by key limit {int(sample_articles)}"
            )
            con.execute(
                "create table scope_in_segment as select * from in_segment i "
                "semi join chosen c on i.src_id = c.article_id"
            )
            con.execute(
                "create table scope_graph as select * from graph g semi join chosen c on g.src_id = c.article_id"
            )
            con.execute("create table scope_actual as select * from actual a semi join chosen using (article_id)")
            scope = {"in_segment": "scope_in_segment", "graph": "scope_graph", "actual": "scope_actual"}
        else:
            scope = {"in_segment": "in_segment", "graph": "graph", "actual": "actual"}
        con.execute(  # the full groups of the articles in scope, D4 listed
            f"create table expected as {explicit.format(**scope)} union all "
            "select s.src_id, s.src_segment, g.dst_id, 'D4' from (select distinct src_id, src_segment from "
            f"{scope['in_segment']}) s join {scope['graph']} g using (src_id) anti join {scope['in_segment']} i "
            "on i.src_id = s.src_id and i.src_segment = s.src_segment and i.dst_id = g.dst_id"
        )
        actual = scope["actual"]
        if d4_per_segment is None:
            report("missing combinations", f"select * from expected anti join {actual} using ({key})")
        else:
            report(
                "missing combinations",
                f"select * from (select * from expected where \"group\" <> 'D4') e anti join {actual} a using ({key})",
            )
            report(
                f"segments whose D4 sample is not min({d4_per_segment}, D4 size) rows",
                "select coalesce(w.article_id, h.article_id) as article_id, "
                "coalesce(w.segment_no, h.segment_no) as segment_no, w.expected, h.held from "
                f"(select article_id, segment_no, least(count(*), {int(d4_per_segment)}) as expected from expected "
                "where \"group\" = 'D4' group by all) w full join "
                f"(select article_id, segment_no, count(*) as held from {actual} where \"group\" = 'D4' group by all) h "
                "on w.article_id = h.article_id and w.segment_no = h.segment_no "
                "where coalesce(w.expected, 0) <> coalesce(h.held, 0)",
            )
        report("unexpected combinations", f"select * from {actual} anti join expected using ({key})")
        report(
            "combinations in the wrong group (group_right is expected)",
            f'select a.*, e."group" as group_right from {actual} a join expected e using ({key}) '
            'where a."group" <> e."group"',
        )
        if sample_articles is not None:  # the explicit part of every article
            con.execute(f"create table explicit as {explicit.format(in_segment='in_segment', graph='graph')}")
            stored = "(select * from actual where \"group\" <> 'D4')"
            report(
                "explicit (D1-D3) combinations missing", f"select * from explicit anti join {stored} s using ({key})"
            )
            report(
                "explicit (D1-D3) rows not in the links or in the wrong group",
                f'select * from {stored} s anti join explicit using ({key}, "group")',
            )
    return problems
