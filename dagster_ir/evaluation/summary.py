"""A report's results tables as plain data, and back as text or Markdown.

`book_summary` keeps, for every section of a `ReportBook`, its title, notes and the tables a
paper prints: the results table (rows = runs, as in the paper's table; columns = our measures;
`*` best, `†` significant against the section's baseline) and, when a run has several seeds, the
table of the mean and spread over seeds. `write_summary` stores it as JSON beside the report
(`tables.json`), so a reader such as `dagster-ir reproduce` prints the sections without knowing
which methods exist: a new section of the report shows up there by itself. `read_summary` checks
the file and names it and the field on a bad one; `format_summary` renders it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from dagster_ir.evaluation.report import ReportBook
from dagster_ir.evaluation.tables import SIGNIFICANT, Table
from dagster_ir.storage.atomic import write_text_atomic

SUMMARY_FILE = "tables.json"


class SummaryFormatError(ValueError):
    """A summary file is malformed; the message names the file and the field."""


def table_summary(table: Table) -> dict:
    """{caption, header, rows: [[label, cell text with `*` for best and `†` for significant], ...]}."""
    return {
        "caption": table.caption,
        "header": list(table.header),
        "rows": [
            [label, [c.text + ("*" if c.best else "") + (SIGNIFICANT if c.significant else "") for c in cells]]
            for label, cells in table.rows
        ],
    }


def book_summary(book: ReportBook) -> dict:
    """Every section's title, notes, results table and (with several seeds) seed table."""
    sections = []
    for section in book.sections:
        results = section.tables(best_note="* marks the best value per measure.")[0]
        seeds = section.seed_table()
        tables = [table_summary(results)] + ([table_summary(seeds)] if seeds is not None else [])
        sections.append({"title": section.title, "notes": section.notes, "tables": tables})
    return {"title": book.title, "sections": sections}


def write_summary(book: ReportBook, out_dir: str | os.PathLike[str]) -> Path:
    """Write `book_summary(book)` to `out_dir`/tables.json, atomically."""
    return write_text_atomic(Path(out_dir) / SUMMARY_FILE, json.dumps(book_summary(book), indent=1) + "\n")


def read_summary(path: str | os.PathLike[str]) -> dict:
    """A summary written by `write_summary`, its shape checked."""
    path = Path(path)
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise SummaryFormatError(f"{path}: not valid JSON ({error.msg} at line {error.lineno})") from None
    _check(
        isinstance(summary, dict) and isinstance(summary.get("sections"), list),
        path,
        "sections",
        "expected a list of sections",
    )
    for i, section in enumerate(summary["sections"]):
        where = f"sections[{i}]"
        _check(
            isinstance(section, dict) and isinstance(section.get("title"), str),
            path,
            f"{where}.title",
            "expected a string",
        )
        _check(isinstance(section.get("tables"), list), path, f"{where}.tables", "expected a list of tables")
        for j, table in enumerate(section["tables"]):
            at = f"{where}.tables[{j}]"
            _check(
                isinstance(table, dict) and isinstance(table.get("header"), list),
                path,
                f"{at}.header",
                "expected a list of column names",
            )
            width = len(table["header"])
            for k, row in enumerate(table.get("rows", [])):
                ok = isinstance(row, list) and len(row) == 2 and isinstance(row[1], list) and len(row[1]) == width - 1
                _check(ok, path, f"{at}.rows[{k}]", f"expected [label, {width - 1} cells]")
    return summary


def _check(ok: bool, path: Path, field: str, message: str) -> None:
    if not ok:
        raise SummaryFormatError(f"{path}: {field}: {message}")


def format_summary(summary: dict, *, markdown: bool = False, level: int = 3) -> str:
    """The sections one after another: title, tables (each with its caption), notes.

    In Markdown a section's title is a heading of `level` (3: `###`).
    """
    parts = []
    for section in summary["sections"]:
        parts.append(
            f"{'#' * level} {section['title']}" if markdown else f"{section['title']}\n{'-' * len(section['title'])}"
        )
        for table in section["tables"]:
            parts.append(_markdown(table) if markdown else _text(table))
            if table.get("caption"):
                parts.append(table["caption"])
        if section.get("notes"):
            parts.append(section["notes"])
    return "\n\n".join(parts) + "\n"


def _lines(table: dict) -> list[list[str]]:
    return [list(table["header"])] + [[label, *cells] for label, cells in table.get("rows", [])]


def _text(table: dict) -> str:
    rows = _lines(table)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    out = []
    for n, row in enumerate(rows):
        out.append("  ".join([row[0].ljust(widths[0])] + [v.rjust(w) for v, w in zip(row[1:], widths[1:])]).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def _markdown(table: dict) -> str:
    rows = [[cell.replace("|", "\\|") for cell in row] for row in _lines(table)]
    out = ["| " + " | ".join(rows[0]) + " |", "|" + "|".join(["---"] + ["---:"] * (len(rows[0]) - 1)) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows[1:]]
    return "\n".join(out)
