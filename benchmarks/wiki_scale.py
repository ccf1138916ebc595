"""The Wikipedia assets at 1x, 10x and 100x the bundled sample: speed, peak memory, rows per asset.

Each size is a synthetic multistream dump (with its index) of the bundled enwiki sample copied
`size` times: copy c > 0 gets page ids shifted by c * 10^8, titles suffixed " (copy c)", and its
links and redirects rewritten to the renamed titles, so the link graph grows with the dump (c
disjoint copies of the sample's graph). Each size runs in a fresh process (a new data directory
and Dagster instance): `dagster-ir add-dump` (with `--partitions`, the dump is registered as that
many byte-range partitions), then `update` of the `wikipedia` group through `php_groups`,
its check and `wiki_stats`. The parent samples the memory (PSS) of the whole process tree (the run
and any worker processes) every 0.1 s and keeps the peak.

`--memory-limit` sets the DuckDB memory_limit of the run's out-of-core steps (`wiki_links`,
`wiki_link_graph`, `php_groups`, the group sizes of `wiki_stats`), through
$DAGSTER_IR_DUCKDB_MEMORY_LIMIT.

Then the corpus-wide joins alone (`wiki_links` and `wiki_link_graph` over the stored tables of the
size, each in a fresh bare process): the out-of-core DuckDB path under `--join-memory-limit` (one
thread), and the in-memory Polars reference (`latest_articles` + `resolve_links` + `build_link_graph`,
streamed to Parquet) that `wiki_links` used before; peak RSS (VmHWM: ru_maxrss would carry the
parent's peak across exec) and CPU seconds of each.
`--join-copies K` also runs both on the largest size's tables copied K times (ids and titles
renamed per copy, so titles, redirects and links grow K-fold), to show the bounded path flat
beyond the sizes whose dumps are parsed here.

Then `php_examples` alone over the size's stored `php_groups` and `wiki_link_graph` (fresh bare
process each, `--php-profile`, default "demo": max_examples 200 per stage, fill "lower+random"): the
bounded builder over scans (what the asset runs now) against the in-memory reference of before #18
(`tests/dagster_ir/methods/php/php_examples_reference.py` over the collected tables, as the asset
loaded them); peak RSS (VmHWM), CPU seconds, examples (and whether both gave the same table, which they
must when no cap binds). `--php-copies K` also runs both on the largest size's `php_groups` and graph
copied K times (ids renamed per copy).

Then `php_baseline_examples` alone (the four Table 3 generators over the size's stored `wiki_articles`
and `wiki_links`, fresh bare process each): the bounded generators over scans with the asset's default
cap (`--baseline-cap`, 20,000 examples per objective) against the same generators without a cap over
the collected tables (what the asset did before #18: the same tables, tested); peak RSS (VmHWM), CPU
seconds, examples, and whether both gave the same table (they must while the cap does not bind).
`--baseline-copies K` also runs both on the largest size's `wiki_articles` and `wiki_links` copied K
times (ids and titles renamed per copy); over 500,000 segments only the bounded generators run.

Printed per size: XML MB, wall seconds, MB/s of XML, peak memory of the process tree (overall and
while each of the update's runs was the latest to start, from its log), rows of each asset (from
the catalog), the joins' peak memory; then the goals (peak memory of the largest size within 1.5x of the
next, time within 1.3x of linear: the seconds per MB of the last increment against the previous
one) and a projection for the full English dump (`--full-xml-gb`, about 100 GB of XML in 22 GB of
bz2) from the slope between the two largest sizes.

    .venv/bin/python benchmarks/wiki_scale.py [--sizes 1 10 100] [--partitions 1] [--parallel 1]
        [--memory-limit 64MB] [--join-memory-limit 64MB] [--join-copies 4 16] [--no-php] [--php-copies 10]
        [--php-profile demo] [--no-baselines] [--baseline-cap 20000] [--baseline-copies 10 100] [--out DIR] [--keep]
"""

from __future__ import annotations

import argparse
import bz2
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "dagster_ir" / "wiki"))  # the tests' dump writer (no package)

from wiki_dumps import FOOTER, HEADER, page_xml  # noqa: E402

from dagster_ir.storage.dumps import sample_dump_path  # noqa: E402
from dagster_ir.wiki import Page, iter_pages  # noqa: E402

PAGES_PER_STREAM = 100
MB = 1e6
ASSETS = [
    "wiki_articles",
    "wiki_redirects",
    "wiki_raw_links",
    "wiki_links",
    "wiki_link_graph",
    "php_groups",
    "wiki_stats",
]
_LINK = re.compile(r"\[\[\s*([^\[\]|#:]+?)\s*(?=[|#\]])")


# --- synthetic dumps ------------------------------------------------------------------------------


def renamed(title: str, copy: int) -> str:
    return title if copy == 0 else f"{title} (copy {copy})"


def copy_page(page: Page, copy: int) -> Page:
    """`page` as copy `copy`: new id and title, links and redirect pointing at the same copy."""
    if copy == 0:
        return page
    text = _LINK.sub(lambda m: "[[" + renamed(m.group(1), copy), page.text)
    return replace(
        page,
        page_id=str(int(page.page_id) + copy * 10**8),
        title=renamed(page.title, copy),
        redirect=renamed(page.redirect, copy) if page.redirect else None,
        text=text,
    )


def copied_pages(pages: Sequence[Page], copies: int) -> Iterator[Page]:
    for copy in range(copies):
        for page in pages:
            yield copy_page(page, copy)


def write_synthetic_dump(path: Path, copies: int) -> tuple[Path, int]:
    """A multistream dump of the sample `copies` times, and its index; returns (path, XML bytes)."""
    pages = list(iter_pages(sample_dump_path()))
    xml_bytes = 0
    index_lines: list[str] = []
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as out:

        def stream(text: str) -> None:
            nonlocal xml_bytes
            data = text.encode()
            xml_bytes += len(data)
            out.write(bz2.compress(data, 9))

        stream(HEADER)
        batch: list[Page] = []
        for page in copied_pages(pages, copies):
            batch.append(page)
            if len(batch) == PAGES_PER_STREAM:
                index_lines += [f"{out.tell()}:{p.page_id}:{p.title}\n" for p in batch]
                stream("".join(page_xml(p) for p in batch))
                batch = []
        if batch:
            index_lines += [f"{out.tell()}:{p.page_id}:{p.title}\n" for p in batch]
            stream("".join(page_xml(p) for p in batch))
        stream(FOOTER)
    index = path.with_name(path.name.removesuffix(".xml.bz2") + "-index.txt.bz2")
    index.write_bytes(bz2.compress("".join(index_lines).encode()))
    tmp.rename(path)
    return path, xml_bytes


# --- one size in a fresh process ------------------------------------------------------------------

_CHILD = """
import json, sys, time
from pathlib import Path
import dagster as dg
sys.path.insert(0, sys.argv[5])
from assets.cli.commands import add_dump_partitions
from assets.definitions import defs, resources
from assets.cli.updates import update_all
from dagster_ir.storage.catalog import Catalog

dump, root, partitions, parallel = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
started = time.monotonic()
(root / "dagster_home").mkdir(parents=True, exist_ok=True)
with dg.instance_for_test(temp_dir=str(root / "dagster_home")) as instance:
    keys = add_dump_partitions(root, dump, instance, partitions)
    report = update_all(defs, instance, resources=resources(str(root)),
                        log=lambda line: print("STEP", time.monotonic(), line, file=sys.stderr, flush=True),
                        selection=dg.AssetSelection.groups("wikipedia"), parallel=parallel)
seconds = time.monotonic() - started
catalog = Catalog(root)
rows = {}
for asset in ASSETS_LIST:
    rows[asset] = int(catalog.query(f"select count(*) from {asset}").item())
print(json.dumps({"seconds": seconds, "partitions": len(keys), "rows": rows, "ok": report.ok,
                  "failures": [str(f) for f in report.failures]}))
""".replace("ASSETS_LIST", repr(ASSETS))


def _tree_rss_kib(pid: int) -> int:
    """Memory of `pid` and all its descendants, in KiB (0 once gone): the sum of their PSS.

    PSS, not RSS: a process forked by the run (Dagster and libraries fork helpers now and then)
    shares its parent's pages until it execs, and the sum of RSS would count them twice (peaks of
    twice the run's memory for an instant, at random); PSS splits shared pages between the sharers.
    """
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            status = Path(entry.path, "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        children.setdefault(int(fields["PPid"].strip()), []).append(int(entry.name))
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        total += _pss_kib(current)
        todo += children.get(current, [])
    return total


def _pss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def run_size(dump: Path, data: Path, partitions: int, parallel: int, memory_limit: str | None = None) -> dict:
    """Run one size in a fresh process; its JSON result plus the peak RSS of its process tree (MiB)."""
    env = {**os.environ, "DAGSTER_IR_DATA": str(data), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    if memory_limit:  # the out-of-core steps' default memory_limit in this run
        env["DAGSTER_IR_DUCKDB_MEMORY_LIMIT"] = memory_limit
    command = [sys.executable, "-c", _CHILD, str(dump), str(data), str(partitions), str(parallel), str(ROOT)]
    started, before = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    samples: list[tuple[float, int]] = []
    while process.poll() is None:
        samples.append((time.monotonic(), _tree_rss_kib(process.pid)))
        time.sleep(0.1)
    out, err = process.communicate()
    peak = max((kib for _, kib in samples), default=0)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the child and its reaped workers
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if process.returncode != 0:
        raise RuntimeError(f"size run failed ({process.returncode}):\n{err[-3000:]}")
    result = json.loads(out.strip().splitlines()[-1])
    if not result["ok"]:
        raise RuntimeError(f"assets failed: {result['failures']}\n{err[-3000:]}")
    return {**result, "wall": wall, "cpu": cpu, "peak_mib": peak / 1024, "steps": step_peaks(samples, err)}


def step_peaks(samples: list[tuple[float, int]], log: str) -> dict[str, float]:
    """Peak memory (MiB) while each run of the update was the latest to start (start-up first)."""
    # update's run lines: "<time> [n/m] start <assets> [<partition>]" (assets.cli.progress); the others are ignored
    marks = [
        (float(t), text.split(" start ", 1)[1].split(" [")[0])
        for t, text in (line.split(" ", 2)[1:] for line in log.splitlines() if line.startswith("STEP "))
        if " start " in text
    ]
    bounds = [(0.0, "start-up"), *marks, (float("inf"), "")]
    return {
        name: max((kib for t, kib in samples if start <= t < end), default=0) / 1024
        for (start, name), (end, _) in zip(bounds, bounds[1:])
    }


# --- the corpus-wide joins alone, bounded (DuckDB) against in memory (Polars) --------------------

_JOINS = """
import json, shutil, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, sys.argv[4])
import polars as pl
mode, tables, limit = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
files = {n: sorted((tables / n).glob("*/data.parquet")) or [tables / n / "data.parquet"]
         for n in ("wiki_articles", "wiki_raw_links", "wiki_redirects")}
work = Path(tempfile.mkdtemp(dir=tables.parent))
started = time.process_time()
try:
    if mode == "duckdb":
        from dagster_ir.wiki.out_of_core import OutOfCoreLimits, build_link_graph_out_of_core, resolve_links_out_of_core
        limits = OutOfCoreLimits(memory_limit=limit, threads=1)
        result = resolve_links_out_of_core(files["wiki_articles"], files["wiki_raw_links"], files["wiki_redirects"],
                                           work / "links.parquet", temp_directory=work, limits=limits)
        links, edges = result.rows, build_link_graph_out_of_core(result.path, work / "graph.parquet",
                                                                 temp_directory=work, limits=limits)
    else:
        from dagster_ir.wiki import build_link_graph, latest_articles, latest_links, resolve_links
        keep = len(files["wiki_articles"]) > 1
        def scan(name):
            frame = pl.scan_parquet([str(p) for p in files[name]], missing_columns="insert")
            return frame if keep else frame.drop("partition", strict=False)
        latest = latest_articles(scan("wiki_articles"))
        raw = latest_links(scan("wiki_raw_links"), latest).drop("partition", strict=False)
        articles = latest.segments.select("article_id", "title").unique()
        resolve_links(raw, articles, scan("wiki_redirects").drop("partition", strict=False)).sink_parquet(work / "links.parquet")
        build_link_graph(pl.scan_parquet(work / "links.parquet")).sink_parquet(work / "graph.parquet")
        links = pl.scan_parquet(work / "links.parquet").select(pl.len()).collect().item()
        edges = pl.scan_parquet(work / "graph.parquet").select(pl.len()).collect().item()
finally:
    shutil.rmtree(work)
cpu = time.process_time() - started
hwm = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmHWM"))
print(json.dumps({"peak_mib": int(hwm.split()[1]) / 1024, "cpu": cpu,  # VmHWM: this program's own peak
                  "links": links, "edges": edges}))
"""


def run_joins(tables: Path, mode: str, memory_limit: str) -> dict:
    """Peak RSS (MiB), CPU seconds and rows of the wiki_links + wiki_link_graph joins in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _JOINS, mode, str(tables), memory_limit, str(ROOT)],
        capture_output=True,
        text=True,
        env=env,
    )
    if done.returncode != 0:
        raise RuntimeError(f"joins ({mode}) failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def copy_tables(tables: Path, out: Path, copies: int) -> Path:
    """The three input tables of `tables` `copies` times, ids and titles renamed per copy (one file each)."""
    import polars as pl

    renames = {
        "wiki_articles": ("article_id", "title"),
        "wiki_raw_links": ("src_id", "target_title"),
        "wiki_redirects": (None, "from_title", "to_title"),
    }
    for name, columns in renames.items():
        frame = pl.scan_parquet(str(tables / name / "*" / "data.parquet")).drop("partition", strict=False)
        parts = []
        for copy in range(copies):
            suffix = f" (table copy {copy})"
            parts.append(frame.with_columns([pl.col(c) + suffix for c in columns if c]))
        target = out / name / "data.parquet"
        target.parent.mkdir(parents=True, exist_ok=True)
        pl.concat(parts).sink_parquet(target)
    return out


def joins_for(tables: Path, memory_limit: str) -> dict:
    bounded, reference = run_joins(tables, "duckdb", memory_limit), run_joins(tables, "polars", memory_limit)
    if (bounded["links"], bounded["edges"]) != (reference["links"], reference["edges"]):
        raise RuntimeError(f"the two join paths disagree: {bounded} against {reference}")
    return {"duckdb": bounded, "polars": reference}


# --- php_examples alone, bounded (scans, cap first) against the in-memory reference ---------------

_PHP = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[4])
sys.path.insert(0, sys.argv[4] + "/tests/dagster_ir/methods/php")  # the reference builder (no package)
import polars as pl
from dagster_ir.methods import php
mode, tables, profile = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
config = php.PROFILES[profile]
started = time.process_time()
groups = pl.scan_parquet(tables / "php_groups" / "data.parquet")
graph = pl.scan_parquet(tables / "wiki_link_graph" / "data.parquet")
if mode == "bounded":
    frames = [php.build_php_examples(groups, stage, config, link_graph=graph)[0] for stage in php.STAGE_ORDER]
else:
    from php_examples_reference import reference_php_examples
    groups, graph = groups.collect(), graph.collect()  # as the asset loaded them before
    frames = [reference_php_examples(groups, stage, config, link_graph=graph)[0] for stage in php.STAGE_ORDER]
frame = pl.concat(frames)
cpu = time.process_time() - started
hwm = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmHWM"))
rows = pl.scan_parquet(tables / "php_groups" / "data.parquet").select(pl.len()).collect().item()
print(json.dumps({"peak_mib": int(hwm.split()[1]) / 1024, "cpu": cpu, "examples": frame.height,
                  "groups": rows, "hash": int(frame.hash_rows(seed=0).sum())}))
"""


def run_php_examples(tables: Path, mode: str, profile: str) -> dict:
    """Peak RSS (MiB), CPU seconds and examples of php_examples' three stages in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _PHP, mode, str(tables), profile, str(ROOT)], capture_output=True, text=True, env=env
    )
    if done.returncode != 0:
        raise RuntimeError(f"php_examples ({mode}) failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def php_examples_for(tables: Path, profile: str) -> dict:
    bounded, reference = run_php_examples(tables, "bounded", profile), run_php_examples(tables, "reference", profile)
    return {"bounded": bounded, "reference": reference, "same": bounded["hash"] == reference["hash"]}


# --- php_baseline_examples alone, bounded (scans, cap) against uncapped over collected tables -----

_BASELINES = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[4])
import polars as pl
from dagster_ir.methods import php
from dagster_ir.wiki import latest_articles
mode, tables, cap = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
started = time.process_time()
articles = pl.scan_parquet(sorted(str(p) for p in (tables / "wiki_articles").glob("*/data.parquet")))
links = pl.scan_parquet(tables / "wiki_links" / "data.parquet")
config = php.BaselineConfig(max_examples=cap if mode == "bounded" else None)
if mode != "bounded":
    articles, links = articles.collect(), links.collect()  # as the asset loaded them before
segments = latest_articles(articles).segments
frame = php.build_baseline_examples(php.METHODS, segments, links, config)
cpu = time.process_time() - started
hwm = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmHWM"))
counts = dict(frame.group_by("objective").len().iter_rows())
print(json.dumps({"peak_mib": int(hwm.split()[1]) / 1024, "cpu": cpu, "examples": frame.height, "counts": counts,
                  "segments": segments.select(pl.len()).collect().item(), "hash": int(frame.hash_rows(seed=0).sum())}))
"""


def run_baseline_examples(tables: Path, mode: str, cap: int) -> dict:
    """Peak RSS (MiB), CPU seconds and examples of the four Table 3 generators in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _BASELINES, mode, str(tables), str(cap), str(ROOT)],
        capture_output=True,
        text=True,
        env=env,
    )
    if done.returncode != 0:
        raise RuntimeError(f"php_baseline_examples ({mode}) failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


REFERENCE_MAX_SEGMENTS = 500_000  # above it the uncapped generators are not run (about 17 KiB an ICT example)


def baseline_examples_for(tables: Path, cap: int) -> dict:
    bounded = run_baseline_examples(tables, "bounded", cap)
    if bounded["segments"] > REFERENCE_MAX_SEGMENTS:
        return {"bounded": bounded, "reference": None, "same": None}
    reference = run_baseline_examples(tables, "reference", cap)
    return {"bounded": bounded, "reference": reference, "same": bounded["hash"] == reference["hash"]}


def copy_articles_links(tables: Path, out: Path, copies: int) -> Path:
    """`wiki_articles` and `wiki_links` of `tables` `copies` times, article ids and titles renamed per copy."""
    import polars as pl

    index = pl.LazyFrame({"copy": pl.int_range(copies, eager=True).cast(pl.String)})
    renames = {"wiki_articles": ("article_id", "title"), "wiki_links": ("src_id", "target_id", "target_title")}
    for name, columns in renames.items():
        files = sorted(str(f) for f in (tables / name).glob("**/data.parquet"))
        frame = pl.scan_parquet(files).drop("partition", strict=False)
        copied = (
            index.join(frame, how="cross")
            .with_columns([pl.col(c) + " (article copy " + pl.col("copy") + ")" for c in columns])
            .drop("copy")
        )
        target = out / name / ("copied" if name == "wiki_articles" else "") / "data.parquet"
        target.parent.mkdir(parents=True, exist_ok=True)
        copied.select(frame.collect_schema().names()).sink_parquet(target, row_group_size=100_000)
    return out


def copy_groups(tables: Path, out: Path, copies: int) -> Path:
    """`php_groups` and `wiki_link_graph` of `tables` `copies` times, article ids renamed per copy."""
    import polars as pl

    index = pl.LazyFrame({"copy": pl.int_range(copies, eager=True).cast(pl.String)})
    for name, columns in (("php_groups", ("article_id", "linked_id")), ("wiki_link_graph", ("src_id", "dst_id"))):
        frame = pl.scan_parquet(tables / name / "data.parquet")
        copied = (
            index.join(frame, how="cross")
            .with_columns([pl.col(c) + " (group copy " + pl.col("copy") + ")" for c in columns])
            .drop("copy")
        )
        target = out / name / "data.parquet"
        target.parent.mkdir(parents=True, exist_ok=True)
        copied.select(frame.collect_schema().names()).sink_parquet(target, row_group_size=100_000)
    return out


# --- report ---------------------------------------------------------------------------------------


def report(
    results: dict[int, dict],
    full_xml_gb: float,
    extra_joins: Sequence = (),
    memory_limit: str = "",
    run_limit: str | None = None,
    extra_php: Sequence = (),
    extra_baselines: Sequence = (),
) -> list[str]:
    lines = [
        f"{'size':>5} {'XML MB':>8} {'parts':>5} {'wall s':>7} {'CPU s':>7} {'MB/s':>6} {'MB/CPU s':>8} "
        f"{'peak MiB':>9}  rows per asset"
    ]
    for size, r in sorted(results.items()):
        rows = " ".join(f"{name}={n}" for name, n in r["rows"].items())
        lines.append(
            f"{size:>5} {r['xml_mb']:>8.1f} {r['partitions']:>5} {r['wall']:>7.1f} {r['cpu']:>7.1f} "
            f"{r['xml_mb'] / r['wall']:>6.2f} {r['xml_mb'] / r['cpu']:>8.2f} {r['peak_mib']:>9.0f}  {rows}"
        )
    sizes = sorted(results)
    if len(sizes) >= 3:
        a, b, c = (results[s] for s in sizes[-3:])
        # the goal compares the largest size with a tenth of it (100x against 10x), else the next one
        base = sizes[-1] // 10 if sizes[-1] // 10 in results else sizes[-2]
        memory = c["peak_mib"] / results[base]["peak_mib"]
        lines.append(
            f"peak memory {sizes[-1]}x / {base}x: {memory:.2f} (goal <= 1.5): {'met' if memory <= 1.5 else 'NOT met'}"
        )
        for what in ("wall", "cpu"):  # seconds per MB of the last increment against the one before
            first = (b[what] - a[what]) / (b["xml_mb"] - a["xml_mb"])
            last = (c[what] - b[what]) / (c["xml_mb"] - b["xml_mb"])
            lines.append(
                f"{what} seconds per MB, {sizes[-3]}x->{sizes[-2]}x: {first:.3f}, {sizes[-2]}x->{sizes[-1]}x: "
                f"{last:.3f}; ratio {last / first:.2f} (goal <= 1.3): {'met' if last / first <= 1.3 else 'NOT met'}"
            )
    joined = [(label, r["joins"]) for label, r in sorted(results.items()) if "joins" in r] + list(extra_joins)
    if joined:
        lines.append(
            "corpus-wide joins alone (wiki_links + wiki_link_graph), fresh process each, peak RSS MiB / CPU s:"
        )
        for label, j in joined:
            label = f"{label}x" if isinstance(label, int) else label
            lines.append(
                f"  {label:>22}: links={j['duckdb']['links']} edges={j['duckdb']['edges']}  "
                f"DuckDB at {memory_limit}: {j['duckdb']['peak_mib']:.0f} MiB / {j['duckdb']['cpu']:.1f} s  "
                f"Polars in memory: {j['polars']['peak_mib']:.0f} MiB / {j['polars']['cpu']:.1f} s"
            )
        (_, j0), (_, j1) = joined[0], joined[-1]
        growth = j1["duckdb"]["links"] / max(1, j0["duckdb"]["links"])
        lines.append(
            f"  links grow {growth:.0f}x from first to last: DuckDB peak x{j1['duckdb']['peak_mib'] / j0['duckdb']['peak_mib']:.2f}, "
            f"Polars peak x{j1['polars']['peak_mib'] / j0['polars']['peak_mib']:.2f}"
        )
    php_runs = [(f"{label}x", r["php"]) for label, r in sorted(results.items()) if "php" in r] + list(extra_php)
    if php_runs:
        lines.append("php_examples alone (three stages, fresh process each), peak RSS MiB / CPU s / examples:")
        for label, p in php_runs:
            lines.append(
                f"  {label:>22}: php_groups={p['bounded']['groups']}  bounded (scans, cap first): "
                f"{p['bounded']['peak_mib']:.0f} MiB / {p['bounded']['cpu']:.1f} s / {p['bounded']['examples']}  "
                f"in memory (before): {p['reference']['peak_mib']:.0f} MiB / {p['reference']['cpu']:.1f} s / "
                f"{p['reference']['examples']}  same table: {'yes' if p['same'] else 'no (a cap binds)'}"
            )
        (_, p0), (_, p1) = php_runs[0], php_runs[-1]
        growth = p1["bounded"]["groups"] / max(1, p0["bounded"]["groups"])
        lines.append(
            f"  php_groups grow {growth:.0f}x from first to last: bounded peak "
            f"x{p1['bounded']['peak_mib'] / p0['bounded']['peak_mib']:.2f}, "
            f"in-memory peak x{p1['reference']['peak_mib'] / p0['reference']['peak_mib']:.2f}"
        )
    baseline_runs = [(f"{label}x", r["baselines"]) for label, r in sorted(results.items()) if "baselines" in r]
    baseline_runs += list(extra_baselines)
    if baseline_runs:
        lines.append(
            "php_baseline_examples alone (ICT, WLP, PROP, HARP; fresh process each), peak RSS MiB / CPU s / examples:"
        )
        for label, p in baseline_runs:
            ref = p["reference"]
            before = (
                f"{ref['peak_mib']:.0f} MiB / {ref['cpu']:.1f} s / {ref['examples']}  same table: "
                f"{'yes' if p['same'] else 'no (the cap binds)'}"
                if ref
                else f"not run (over {REFERENCE_MAX_SEGMENTS} segments)"
            )
            lines.append(
                f"  {label:>22}: segments={p['bounded']['segments']}  bounded (scans, cap {p['cap']}): "
                f"{p['bounded']['peak_mib']:.0f} MiB / {p['bounded']['cpu']:.1f} s / {p['bounded']['examples']}  "
                f"uncapped, collected (before): {before}"
            )
        for cap in sorted({p["cap"] for _, p in baseline_runs}):
            same_cap = [p for _, p in baseline_runs if p["cap"] == cap]
            p0, p1 = same_cap[0], same_cap[-1]
            growth = p1["bounded"]["segments"] / max(1, p0["bounded"]["segments"])
            line = (
                f"  cap {cap}: segments grow {growth:.0f}x from first to last: bounded peak "
                f"x{p1['bounded']['peak_mib'] / p0['bounded']['peak_mib']:.2f}"
            )
            if p0["reference"] and p1["reference"]:
                line += f", uncapped peak x{p1['reference']['peak_mib'] / p0['reference']['peak_mib']:.2f}"
            lines.append(line)
    if len(sizes) >= 2:
        b, c = results[sizes[-2]], results[sizes[-1]]
        full_mb = full_xml_gb * 1000
        memory_slope = max(0.0, (c["peak_mib"] - b["peak_mib"]) / (c["xml_mb"] - b["xml_mb"]))
        memory = c["peak_mib"] + memory_slope * (full_mb - c["xml_mb"])
        for what, label in (("wall", "wall time, at this load"), ("cpu", "CPU time, one idle core")):
            slope = (c[what] - b[what]) / (c["xml_mb"] - b["xml_mb"])
            hours = (c[what] + slope * (full_mb - c["xml_mb"])) / 3600
            lines.append(
                f"projection, full English dump ({full_xml_gb:.0f} GB of XML), {label}: "
                f"{hours:.1f} h ({slope * 1000:.0f} s per GB)"
            )
        bounded = (
            f"with the out-of-core steps held to memory_limit {run_limit}"
            if run_limit
            else "at the out-of-core steps' default memory_limit (they use memory up to it before they spill)"
        )
        lines.append(
            f"projection, peak memory {bounded}: about {memory / 1024:.1f} GiB, linear in what still "
            f"grows ({memory_slope * 1000:.1f} MiB more per GB of XML between the two largest sizes)"
        )
        if run_limit:
            lines.append(
                f"  at a memory_limit of L instead: at most about {memory / 1024:.1f} GiB + L - {run_limit} "
                f"(DuckDB's buffers grow up to L, no further)"
            )
        if "joins" in c and "joins" in b:
            grow = {
                k: max(0.0, (c["joins"][k]["peak_mib"] - b["joins"][k]["peak_mib"]) / (c["xml_mb"] - b["xml_mb"]))
                for k in ("duckdb", "polars")
            }
            lines.append(
                f"projection, the joins alone at {full_xml_gb:.0f} GB of XML: Polars in memory "
                f"{(c['joins']['polars']['peak_mib'] + grow['polars'] * (full_mb - c['xml_mb'])) / 1024:.1f} GiB "
                f"({grow['polars'] * 1000:.1f} MiB per GB); DuckDB bounded by memory_limit {memory_limit} "
                f"plus its measured floor ({c['joins']['duckdb']['peak_mib']:.0f} MiB at {sizes[-1]}x; "
                f"slope {grow['duckdb'] * 1000:.1f} MiB per GB)"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--partitions", type=int, default=1, help="byte-range partitions per dump")
    parser.add_argument("--parallel", type=int, default=1, help="partitions parsed at once by update")
    parser.add_argument("--full-xml-gb", type=float, default=100.0)
    parser.add_argument(
        "--memory-limit", default=None, help="memory_limit of the run's out-of-core steps (default: theirs, 2GB)"
    )
    parser.add_argument("--join-memory-limit", default="64MB", help="DuckDB memory_limit of the joins-alone runs")
    parser.add_argument(
        "--join-copies",
        type=int,
        nargs="*",
        default=[],
        help="also run the joins alone on the largest size's tables copied K times",
    )
    parser.add_argument("--no-joins", action="store_true", help="skip the joins-alone runs")
    parser.add_argument("--no-php", action="store_true", help="skip the php_examples-alone runs")
    parser.add_argument("--no-baselines", action="store_true", help="skip the php_baseline_examples-alone runs")
    parser.add_argument(
        "--baseline-cap",
        type=int,
        default=20_000,
        help="max_examples per objective of the bounded php_baseline_examples runs",
    )
    parser.add_argument(
        "--baseline-copies",
        type=int,
        nargs="*",
        default=[],
        help="also run php_baseline_examples alone on the largest size's articles and links copied K times",
    )
    parser.add_argument("--php-profile", default="demo", help="PhpConfig profile of the php_examples runs")
    parser.add_argument(
        "--php-copies",
        type=int,
        nargs="*",
        default=[],
        help="also run php_examples alone on the largest size's php_groups copied K times",
    )
    parser.add_argument("--out", type=Path, default=None, help="where dumps and data go (default: a temp dir)")
    parser.add_argument(
        "--keep", action="store_true", help="keep the dumps and data directories (and reuse kept dumps)"
    )
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="wiki_scale_"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; out {out}", flush=True)
    results, extra_joins, extra_php, extra_baselines = {}, [], [], []
    for size in args.sizes:
        dump = out / f"synthetic-x{size}-multistream.xml.bz2"
        started = time.monotonic()
        sidecar = dump.with_name(dump.name + ".xml-bytes")
        if args.keep and dump.exists() and sidecar.exists():  # a dump kept by an earlier --keep run
            xml_bytes = int(sidecar.read_text())
        else:
            _, xml_bytes = write_synthetic_dump(dump, size)
            sidecar.write_text(str(xml_bytes))
        print(f"{size}x: wrote {xml_bytes / MB:.1f} MB of XML in {time.monotonic() - started:.1f} s", flush=True)
        data = out / f"data-x{size}"
        shutil.rmtree(data, ignore_errors=True)
        results[size] = {
            **run_size(dump, data, args.partitions, args.parallel, args.memory_limit),
            "xml_mb": xml_bytes / MB,
        }
        r = results[size]
        print(f"{size}x: {r['wall']:.1f} s, peak {r['peak_mib']:.0f} MiB, load {os.getloadavg()[0]:.1f}", flush=True)
        print(
            f"{size}x: peak MiB while each run was the latest to start: "
            + ", ".join(f"{name} {mib:.0f}" for name, mib in r["steps"].items()),
            flush=True,
        )
        if not args.no_joins:
            r["joins"] = joins_for(data / "tables", args.join_memory_limit)
            print(f"{size}x joins: {json.dumps(r['joins'])}", flush=True)
        if not args.no_php:
            r["php"] = php_examples_for(data / "tables", args.php_profile)
            print(f"{size}x php_examples: {json.dumps(r['php'])}", flush=True)
        if not args.no_baselines:
            r["baselines"] = {**baseline_examples_for(data / "tables", args.baseline_cap), "cap": args.baseline_cap}
            print(f"{size}x php_baseline_examples: {json.dumps(r['baselines'])}", flush=True)
        if size == args.sizes[-1]:
            for copies in args.php_copies:
                copied = copy_groups(data / "tables", out / f"groups-x{size}-copies{copies}" / "tables", copies)
                extra_php.append((f"{size}x groups x{copies}", php_examples_for(copied, args.php_profile)))
                print(f"{size}x groups x{copies} php_examples: {json.dumps(extra_php[-1][1])}", flush=True)
                shutil.rmtree(copied.parent, ignore_errors=True)
            for copies in args.baseline_copies:
                copied = copy_articles_links(
                    data / "tables", out / f"articles-x{size}-copies{copies}" / "tables", copies
                )
                result = {**baseline_examples_for(copied, args.baseline_cap), "cap": args.baseline_cap}
                extra_baselines.append((f"{size}x articles x{copies}", result))
                print(f"{size}x articles x{copies} php_baseline_examples: {json.dumps(result)}", flush=True)
                shutil.rmtree(copied.parent, ignore_errors=True)
            for copies in args.join_copies:
                copied = copy_tables(data / "tables", out / f"tables-x{size}-copies{copies}" / "tables", copies)
                extra_joins.append((f"{size}x tables x{copies}", joins_for(copied, args.join_memory_limit)))
                print(f"{size}x tables x{copies} joins: {json.dumps(extra_joins[-1][1])}", flush=True)
                shutil.rmtree(copied.parent, ignore_errors=True)
        if not args.keep:
            shutil.rmtree(data, ignore_errors=True)
            dump.unlink()
            sidecar.unlink()
            dump.with_name(dump.name.removesuffix(".xml.bz2") + "-index.txt.bz2").unlink()
    print(
        "\n".join(
            report(
                results,
                args.full_xml_gb,
                extra_joins,
                args.join_memory_limit,
                args.memory_limit,
                extra_php,
                extra_baselines,
            )
        )
    )


if __name__ == "__main__":
    main()
