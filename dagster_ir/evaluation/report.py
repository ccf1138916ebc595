"""Evaluation reports: the paper-style results table, its intervals and tests, and figures.

`build_report` compares every run of a per-query table with a named baseline (see
`significance`) and draws one per-query difference plot per run; a `Report` renders as Markdown,
self-contained HTML (inline CSS, figures as base64 PNG) or plain text for a terminal, and
`write_report` writes all three plus the figures, each file atomically.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from dagster_ir.evaluation.plots import figure_to_png_bytes, per_query_difference_plot
from dagster_ir.evaluation.significance import SignificanceConfig, compare_to_baseline
from dagster_ir.evaluation.tables import (
    SIGNIFICANT,
    Cell,
    Table,
    difference_table,
    interval_table,
    results_table,
    seed_table,
)
from dagster_ir.schemas import PER_QUERY_EVAL, validate
from dagster_ir.storage.atomic import atomic_path, write_text_atomic

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class ReportConfig:
    """How a report is built.

    decimals: digits shown after the point.
    difference_plot_measure: measure of the per-query difference plots (default: the first one);
    difference_plots: draw one per-query difference plot per non-baseline run.
    """

    significance: SignificanceConfig = field(default_factory=SignificanceConfig)
    decimals: int = 4
    difference_plot_measure: str | None = None
    difference_plots: bool = True

    def __post_init__(self) -> None:
        if not 0 <= self.decimals <= 12:
            raise ValueError(f"decimals must be in 0..12, got {self.decimals}")


@dataclass(frozen=True)
class ReportFigure:
    """A rendered figure: a file-safe name, a caption and PNG bytes."""

    name: str
    caption: str
    png: bytes

    @classmethod
    def from_figure(cls, name: str, caption: str, figure: Figure) -> ReportFigure:
        return cls(_file_safe(name), caption, figure_to_png_bytes(figure))


@dataclass(frozen=True)
class ReportFiles:
    """Paths `write_report` wrote."""

    markdown: Path
    html: Path
    text: Path
    figures: tuple[Path, ...]


@dataclass(frozen=True, eq=False)
class Report:
    """Results of several runs against one baseline, ready to render."""

    title: str
    notes: str
    baseline: str
    measures: tuple[str, ...]
    comparison: pl.DataFrame  # schemas.COMPARISON_EVAL rows
    figures: tuple[ReportFigure, ...]
    config: ReportConfig
    spread: pl.DataFrame | None = None  # SEED_SPREAD rows (evaluation.seeds), shown when a run has several seeds

    def seed_table(self) -> Table | None:
        """Mean and spread over seeds, or None when no run was trained under more than one seed."""
        if self.spread is None or self.spread.height == 0 or int(self.spread["seeds"].max()) < 2:
            return None
        runs = self.comparison["run_name"].unique(maintain_order=True).to_list()
        return seed_table(self.spread, runs, self.baseline, list(self.measures), self.config.decimals)

    def all_tables(self) -> tuple[Table, ...]:
        """The tables in the order they are shown: results, intervals, differences, seeds (if any)."""
        seeds = self.seed_table()
        return self.tables() + ((seeds,) if seeds is not None else ())

    def tables(self, best_note: str = "Best value per measure in bold.") -> tuple[Table, Table, Table]:
        """The results table (its caption ending with `best_note`), the interval and difference tables."""
        args = (self.comparison, self.baseline, list(self.measures), self.config.significance, self.config.decimals)
        results = results_table(*args)
        results = replace(results, caption=f"{results.caption} {best_note}")
        return results, interval_table(*args), difference_table(*args)

    def to_markdown(self, figure_dir: str | None = "figures") -> str:
        """Markdown; figures link to `figure_dir`/<name>.png (as `write_report` lays them out), or
        are left out when `figure_dir` is None."""
        parts = [f"# {self.title}"] + ([self.notes] if self.notes else [])
        for number, table in enumerate(self.all_tables(), start=1):
            parts.append(_markdown_table(table, number))
        if figure_dir is not None and self.figures:
            parts.append("## Figures")
            parts += [f"![{f.caption}]({figure_dir}/{f.name}.png)\n\n*{f.caption}*" for f in self.figures]
        return "\n\n".join(parts) + "\n"

    def to_html(self) -> str:
        """One self-contained HTML page: inline CSS, figures embedded as base64 PNG, CIs on hover."""
        return _HTML_PAGE.format(title=html.escape(self.title), body=self.html_body("h1"))

    def html_body(self, heading: str = "h1") -> str:
        """The page's body: heading, notes, tables, figures."""
        body = [f"<{heading}>{html.escape(self.title)}</{heading}>"]
        if self.notes:
            body.append(f"<p class='notes'>{html.escape(self.notes)}</p>")
        body += [_html_table(table, number) for number, table in enumerate(self.all_tables(), start=1)]
        body += [_html_figure(figure) for figure in self.figures]
        return "\n".join(body)

    def to_terminal(self) -> str:
        """Plain text: the results table (* best, † significant) and the difference table."""
        results, _, differences = self.tables(best_note="* marks the best value per measure.")
        parts = [self.title, _text_table(results), results.caption]
        if differences.rows:
            parts += [_text_table(differences), differences.caption]
        seeds = self.seed_table()
        if seeds is not None:
            parts += [_text_table(seeds), seeds.caption]
        if self.notes:
            parts.append(self.notes)
        return "\n\n".join(parts) + "\n"


def build_report(
    per_query: pl.DataFrame,
    baseline: str,
    measures: Sequence[str] | None = None,
    title: str = "Evaluation",
    notes: str = "",
    config: ReportConfig = ReportConfig(),
    extra_figures: Sequence[ReportFigure] = (),
    spread: pl.DataFrame | None = None,
) -> Report:
    """Compare every run of `per_query` (PER_QUERY_EVAL rows) with `baseline` on `measures`.

    `measures` default to those present, in order of appearance. `extra_figures` (e.g. recall
    curves, `ReportFigure.from_figure("recall", ..., recall_curve_plot(...))`) follow the
    per-query difference plots. `spread` (SEED_SPREAD rows, `evaluation.seed_spread`) adds a table
    of the mean and spread over seeds when a run has several; pass seed-averaged `per_query`.
    """
    validate(per_query, PER_QUERY_EVAL, "per-query evaluation")
    comparison = compare_to_baseline(per_query, baseline, list(measures) if measures else None, config.significance)
    chosen = tuple(comparison["measure"].unique(maintain_order=True).to_list())
    figures = _difference_figures(per_query, comparison, baseline, chosen, config) + tuple(extra_figures)
    names = [figure.name for figure in figures]
    if len(set(names)) != len(names):
        raise ValueError(f"figure names must differ (they name files): {names}")
    if spread is not None:
        spread = spread.filter(
            pl.col("run_name").is_in(comparison["run_name"].unique().implode()) & pl.col("measure").is_in(list(chosen))
        )
    return Report(title, notes, baseline, chosen, comparison, figures, config, spread)


@dataclass(frozen=True, eq=False)
class ReportBook:
    """Several reports (sections, each with its own runs and baseline) as one document.

    `appendices` are (title, Markdown text) pairs shown after the sections (e.g. worked examples).
    """

    title: str
    sections: tuple[Report, ...]
    appendices: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, title: str, sections: Sequence[Report], appendices: Sequence[tuple[str, str]] = ()) -> ReportBook:
        """A book whose section figures are renamed `s<section>_<name>`, so file names never clash."""
        renamed = tuple(
            replace(section, figures=tuple(replace(f, name=f"s{i}_{f.name}") for f in section.figures))
            for i, section in enumerate(sections, start=1)
        )
        return cls(title, renamed, tuple((str(t), str(text)) for t, text in appendices))

    @property
    def figures(self) -> tuple[ReportFigure, ...]:
        figures = tuple(f for section in self.sections for f in section.figures)
        names = [f.name for f in figures]
        if len(set(names)) != len(names):
            raise ValueError(f"figure names must differ across sections (they name files): {names}")
        return figures

    def to_markdown(self, figure_dir: str | None = "figures") -> str:
        parts = [f"# {self.title}"]
        parts += ["#" + section.to_markdown(figure_dir).replace("\n## ", "\n### ") for section in self.sections]
        parts += [f"## {title}\n\n{text.strip()}" for title, text in self.appendices]
        return "\n\n".join(parts) + "\n"

    def to_html(self) -> str:
        body = [f"<h1>{html.escape(self.title)}</h1>"] + [s.html_body("h2") for s in self.sections]
        body += [
            f"<h2>{html.escape(title)}</h2>\n<pre>{html.escape(text.strip())}</pre>" for title, text in self.appendices
        ]
        return _HTML_PAGE.format(title=html.escape(self.title), body="\n".join(body))

    def to_terminal(self) -> str:
        rule = "=" * 100
        parts = [f"\n{rule}\n{s.to_terminal()}" for s in self.sections]
        parts += [f"\n{rule}\n{title}\n\n{text.strip()}\n" for title, text in self.appendices]
        return f"{self.title}\n" + "".join(parts)


def write_report(report: Report | ReportBook, out_dir: str | Path) -> ReportFiles:
    """Write report.md, report.html, report.txt and figures/<name>.png under `out_dir`, atomically."""
    out_dir = Path(out_dir)
    figures = []
    for figure in report.figures:
        with atomic_path(out_dir / "figures" / f"{figure.name}.png") as tmp:
            tmp.write_bytes(figure.png)
        figures.append(out_dir / "figures" / f"{figure.name}.png")
    return ReportFiles(
        markdown=write_text_atomic(out_dir / "report.md", report.to_markdown("figures")),
        html=write_text_atomic(out_dir / "report.html", report.to_html()),
        text=write_text_atomic(out_dir / "report.txt", report.to_terminal()),
        figures=tuple(figures),
    )


def _difference_figures(
    per_query: pl.DataFrame, comparison: pl.DataFrame, baseline: str, measures: tuple[str, ...], config: ReportConfig
) -> tuple[ReportFigure, ...]:
    if not config.difference_plots:
        return ()
    measure = config.difference_plot_measure or measures[0]
    if measure not in measures:
        raise ValueError(f"difference_plot_measure {measure!r} is not among the measures {list(measures)}")
    runs = [run for run in comparison["run_name"].unique(maintain_order=True).to_list() if run != baseline]
    return tuple(
        ReportFigure.from_figure(
            f"{i:02d}_difference_{measure}_{run}",
            f"Per-query {measure} of {run} minus {baseline}, sorted.",
            per_query_difference_plot(per_query, run, baseline, measure),
        )
        for i, run in enumerate(runs, start=1)
    )


def _file_safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "figure"


# --- Markdown -----------------------------------------------------------------------------------


def _markdown_table(table: Table, number: int) -> str:
    lines = [
        f"**Table {number}.** {table.caption}",
        "",
        "| " + " | ".join(_md_escape(h) for h in table.header) + " |",
        "|" + "---|" + "---:|" * (len(table.header) - 1),
    ]
    for label, cells in table.rows:
        lines.append("| " + " | ".join([_md_escape(label)] + [_md_cell(c) for c in cells]) + " |")
    return "\n".join(lines)


def _md_cell(cell: Cell) -> str:
    text = f"**{cell.text}**" if cell.best else cell.text
    return text + (SIGNIFICANT if cell.significant else "")


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


# --- HTML ---------------------------------------------------------------------------------------

_HTML_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 72rem; color: #212529; }}
table {{ border-collapse: collapse; margin: 1.5rem 0; }}
caption {{ caption-side: top; text-align: left; padding-bottom: .5rem; }}
th, td {{ padding: .3rem .7rem; border-bottom: 1px solid #dee2e6; }}
thead th {{ border-bottom: 2px solid #212529; }}
td {{ text-align: right; font-variant-numeric: tabular-nums; }}
td.label {{ text-align: left; }}
td[title] {{ cursor: help; }}
sup.sig {{ color: #c92a2a; }}
figure {{ margin: 1.5rem 0; }}
img {{ max-width: 100%; }}
.notes {{ color: #495057; }}
</style>
</head>
<body>
{body}
</body>
</html>
"""


def _html_table(table: Table, number: int) -> str:
    header = "".join(f"<th>{html.escape(h)}</th>" for h in table.header)
    rows = "\n".join(
        f"<tr><td class='label'>{html.escape(label)}</td>{''.join(_html_cell(c) for c in cells)}</tr>"
        for label, cells in table.rows
    )
    return (
        f"<table>\n<caption><b>Table {number}.</b> {html.escape(table.caption)}</caption>\n"
        f"<thead><tr>{header}</tr></thead>\n<tbody>\n{rows}\n</tbody>\n</table>"
    )


def _html_cell(cell: Cell) -> str:
    text = html.escape(cell.text)
    text = f"<strong>{text}</strong>" if cell.best else text
    marker = f"<sup class='sig'>{SIGNIFICANT}</sup>" if cell.significant else ""
    title = f" title='{html.escape(cell.detail, quote=True)}'" if cell.detail else ""
    return f"<td{title}>{text}{marker}</td>"


def _html_figure(figure: ReportFigure) -> str:
    data = base64.b64encode(figure.png).decode("ascii")
    caption = html.escape(figure.caption)
    return (
        f"<figure><img alt='{caption}' src='data:image/png;base64,{data}'><figcaption>{caption}</figcaption></figure>"
    )


# --- Terminal -----------------------------------------------------------------------------------


def _text_table(table: Table) -> str:
    rows = [list(table.header)] + [[label] + [_text_cell(c) for c in cells] for label, cells in table.rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(table.header))]
    lines = [_text_row(rows[0], widths), "  ".join("-" * w for w in widths)]
    lines += [_text_row(row, widths) for row in rows[1:]]
    return "\n".join(lines)


def _text_cell(cell: Cell) -> str:
    return cell.text + ("*" if cell.best else "") + (SIGNIFICANT if cell.significant else "")


def _text_row(row: list[str], widths: list[int]) -> str:
    label, *values = row
    return "  ".join([label.ljust(widths[0])] + [v.rjust(w) for v, w in zip(values, widths[1:])]).rstrip()
