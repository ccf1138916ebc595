"""Lineage over the catalog: which materialization read which, down to the dump file.

Every catalog record lists the tables its step read (`inputs`: asset, partition, content version).
An input is resolved to the record that wrote that content: the newest record of that asset
partition with that content version made no later than the reader. On top of that:

- `lineage_edges` (a view): one row per (reader record, record read), with both assets and partitions;
- `lineage(asset)` / `lineage(asset, partition)` (DuckDB table macros): the recursive walk from the
  newest record of the asset (each partition, or the one named) to every record upstream, each with
  its depth (0 = the asset itself), code version, content version, config, time and the records that
  read it (`select * from lineage('model_report', 'wiki-car')`);
- `report_sources` (a view): for each report (`model_report`, `evaluation_report`) partition and run
  name, the record ids of the run tables that hold that run (the inputs list their run names);
- `report_row_lineage` (a view, once a report's view exists): every report row (collection, run
  name, measure) with those record ids.

`walk` does the same walk in Python and returns the tree for the command line.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb

REPORT_ASSETS = ("model_report", "evaluation_report")
_INPUT_TYPE = '[{"asset": "VARCHAR", "partition": "VARCHAR", "data_version": "VARCHAR", "run_names": "VARCHAR[]"}]'

_EDGES = f"""
create or replace view lineage_edges as
with reads as (
    select m.record_id as child_id, m.asset_key as child_asset, m.partition as child_partition,
           m.materialized_at as child_at,
           unnest(from_json(coalesce(m.inputs, '[]'), '{_INPUT_TYPE}')) as i
    from materializations m
)
select r.child_id, r.child_asset, r.child_partition, p.record_id as parent_id,
       p.asset_key as parent_asset, p.partition as parent_partition
from reads r
join materializations p
  on p.asset_key = r.i.asset
 and p.partition is not distinct from r.i.partition
 and (r.i.data_version is null or p.data_version = r.i.data_version)
 and p.materialized_at <= r.child_at
 and p.record_id <> r.child_id
qualify row_number() over (partition by r.child_id, p.asset_key, p.partition order by p.materialized_at desc) = 1
"""

_WALK = """
with recursive roots as (
    select record_id from materializations
    where asset_key = {asset} and ({partition} is null or partition = {partition})
    qualify row_number() over (partition by partition order by materialized_at desc) = 1
),
walk(depth, record_id, read_by) as (
    select 0, record_id, null::varchar from roots
    union
    select w.depth + 1, e.parent_id, w.record_id
    from walk w join lineage_edges e on e.child_id = w.record_id
    where w.depth < 64
)
select min(w.depth) as depth, m.asset_key as asset, m.partition, m.code_version, m.data_version as content_version,
       m.config, m.materialized_at, m.record_id,
       list(distinct w.read_by order by w.read_by) filter (where w.read_by is not null) as read_by,
       m.path
from walk w join materializations m using (record_id)
group by all
order by depth, asset, partition
"""

_MACRO = (
    "create or replace macro lineage(root_asset) as table ("
    + _WALK.format(asset="root_asset", partition="null::varchar")
    + "), (root_asset, root_partition) as table ("
    + _WALK.format(asset="root_asset", partition="root_partition")
    + ")"
)

_REPORT_SOURCES = f"""
create or replace view report_sources as
with latest as (
    select * from materializations
    where asset_key in ({", ".join(f"'{a}'" for a in REPORT_ASSETS)})
    qualify row_number() over (partition by asset_key, partition order by materialized_at desc) = 1
),
reads as (
    select l.asset_key as report, l.partition as collection, l.record_id as report_record_id,
           unnest(from_json(coalesce(l.inputs, '[]'), '{_INPUT_TYPE}')) as i
    from latest l
),
named as (
    select report, collection, report_record_id, i.asset as asset, i.partition as partition,
           unnest(coalesce(i.run_names, [])) as run_name
    from reads
)
select n.report, n.collection, n.run_name, n.report_record_id,
       list(distinct e.parent_id order by e.parent_id) as record_ids,
       list(distinct n.asset order by n.asset) as assets
from named n
join lineage_edges e
  on e.child_id = n.report_record_id and e.parent_asset = n.asset
 and e.parent_partition is not distinct from n.partition
group by all
"""


def create_lineage_sql(con: duckdb.DuckDBPyConnection) -> None:
    """Create (or replace) the lineage views and macros on a catalog connection."""
    con.execute(_EDGES)
    con.execute(_MACRO)
    con.execute(_REPORT_SOURCES)
    rows = []
    views = {name for (name,) in con.execute("select view_name from duckdb_views() where not internal").fetchall()}
    for report in REPORT_ASSETS:
        if report in views:
            rows.append(
                f"select distinct s.report, s.collection, r.run_name, r.measure, s.record_ids "
                f'from "{report}" r join report_sources s '
                f"on s.report = '{report}' and s.collection is not distinct from r.partition and s.run_name = r.run_name"
            )
    if rows:
        try:
            con.execute("create or replace view report_row_lineage as " + " union all ".join(rows))
        except duckdb.Error:  # a report table without run_name/measure columns: no row view
            pass


def lineage_query(asset: str, partition: str | None) -> tuple[str, list]:
    """The SQL (and parameters) of the lineage walk from `asset` [`partition`]."""
    sql = _WALK.format(asset="$1", partition="$2::varchar")
    return sql, [asset, partition]


@dataclass
class LineageNode:
    """One materialization in the tree: what it is, and the records it read."""

    record_id: str
    asset: str
    partition: str | None
    code_version: str | None
    content_version: str | None
    config: str | None
    materialized_at: str
    path: str | None
    parents: list[LineageNode] = field(default_factory=list)


def walk(con: duckdb.DuckDBPyConnection, asset: str, partition: str | None = None) -> list[LineageNode]:
    """The lineage trees of `asset`'s newest record (of `partition`, or of each partition).

    Raises KeyError naming the asset (and partition) when the catalog has no record of it.
    """
    roots = con.execute(
        "select record_id from materializations where asset_key = $1 and ($2::varchar is null or partition = $2) "
        "qualify row_number() over (partition by partition order by materialized_at desc) = 1 order by partition",
        [asset, partition],
    ).fetchall()
    if not roots:
        where = f" partition {partition!r}" if partition is not None else ""
        known = [a for (a,) in con.execute("select distinct asset_key from materializations order by 1").fetchall()]
        raise KeyError(f"no catalog record of asset {asset!r}{where} (recorded assets: {', '.join(known) or 'none'})")
    records = {
        row[0]: LineageNode(row[0], row[1], row[2], row[3], row[4], row[5], str(row[6]), row[7])
        for row in con.execute(
            "select record_id, asset_key, partition, code_version, data_version, config::varchar, "
            "materialized_at, path from materializations"
        ).fetchall()
    }
    children: dict[str, list[str]] = {}
    for child, parent in con.execute("select child_id, parent_id from lineage_edges").fetchall():
        children.setdefault(child, []).append(parent)
    built: dict[str, LineageNode] = {}

    def build(record_id: str, trail: frozenset[str]) -> LineageNode:
        if record_id in built:
            return built[record_id]
        node = records[record_id]
        parents = sorted(
            set(children.get(record_id, [])) - trail, key=lambda r: (records[r].asset, records[r].partition or "")
        )
        node.parents = [build(p, trail | {record_id}) for p in parents]
        built[record_id] = node
        return node

    return [build(record_id, frozenset()) for (record_id,) in roots]


def render(trees: list[LineageNode], note=None, *, depth: int | None = None, config: bool = False) -> str:
    """The trees as indented text; a record met again is named, not expanded again.

    `depth` stops the walk that many levels below the roots (a cut node says how many records it read);
    `config=True` adds each record's config, its null fields left out. `note(node)` may add a word to
    a leaf's line (the dump file behind `wiki_dump`, say).
    """
    lines: list[str] = []
    shown: set[str] = set()

    def line(node: LineageNode, level: int) -> None:
        what = node.asset + (f" [{node.partition}]" if node.partition else "")
        again = node.record_id in shown
        cut = depth is not None and level >= depth and node.parents and not again
        text = (
            f"{'  ' * level}{what}  code={node.code_version} content={(node.content_version or '-')[:12]} "
            f"at={node.materialized_at[:19]} record={node.record_id[:12]}"
        )
        if again:
            text += " (see above)"
        else:
            shown_config = compact_config(node.config) if config else ""
            text += f" config={shown_config}" if shown_config else ""
            if not node.parents:
                text += f" path={node.path}" if node.path else ""
                extra = note(node) if note is not None else None
                text += f" {extra}" if extra else ""
            elif cut:
                text += f" (reads {len(node.parents)} more; --depth to see them)"
        lines.append(text)
        if again or cut:
            return
        shown.add(node.record_id)
        for parent in node.parents:
            line(parent, level + 1)

    for tree in trees:
        line(tree, 0)
    return "\n".join(lines)


def compact_config(config: str | None) -> str:
    """A record's config as compact JSON without null fields ("" when nothing is left)."""
    import json

    if config in (None, "", "{}", "null"):
        return ""
    try:
        value = json.loads(config)
    except ValueError:
        return config

    def drop_nulls(item):
        if isinstance(item, dict):
            kept = {k: drop_nulls(v) for k, v in item.items() if v is not None}
            return {k: v for k, v in kept.items() if v != {} and v != []}
        if isinstance(item, list):
            return [drop_nulls(v) for v in item]
        return item

    value = drop_nulls(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True) if value else ""
