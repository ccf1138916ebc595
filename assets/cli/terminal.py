"""Tables for the terminal: a Polars frame as aligned text, CSV, JSON or Markdown, every row in full.

`dagster-ir catalog query --format ...` and the demo's closing summary print through here. Text
tables are plain (two spaces between columns, numbers right-aligned, a dashed rule under the
header): no box drawing, no wrapped headers, no cut cells, no elided rows.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

FORMATS = ("table", "csv", "json", "markdown")


def _cell(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list | dict):
        return json.dumps(value, default=str, separators=(",", ":"))
    return str(value).replace("\n", "\\n")


def text_table(header: Sequence[str], rows: Sequence[Sequence], numeric: Sequence[bool] | None = None) -> str:
    """`rows` under `header`, columns padded to their widest cell; numeric columns right-aligned."""
    cells = [[_cell(v) for v in row] for row in rows]
    numeric = (
        list(numeric)
        if numeric is not None
        else [
            all(isinstance(row[i], int | float) or row[i] is None for row in rows) and bool(rows)
            for i in range(len(header))
        ]
    )
    widths = [max([len(h), *(len(row[i]) for row in cells)]) for i, h in enumerate(header)]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if right else v.ljust(w) for v, w, right in zip(values, widths, numeric, strict=True)]
        return "  ".join(parts).rstrip()

    return "\n".join([line(list(header)), line(["-" * w for w in widths]), *(line(row) for row in cells)])


def format_frame(frame, fmt: str = "table") -> str:
    """A Polars frame as `fmt` (one of FORMATS), every row and column, no cell cut."""
    import polars as pl  # polars, DuckDB: not loaded by --help

    if fmt not in FORMATS:
        raise ValueError(f"--format: {fmt!r} is not one of {', '.join(FORMATS)}")
    if fmt == "json":
        return json.dumps(frame.to_dicts(), default=str, ensure_ascii=False, indent=1)
    nested = [name for name, dtype in frame.schema.items() if isinstance(dtype, pl.List | pl.Struct | pl.Array)]
    rows = frame.rows()
    if fmt == "csv":
        flat = (
            frame.with_columns(
                pl.Series(name, [_cell(v) for v in frame[name].to_list()], dtype=pl.String) for name in nested
            )
            if nested
            else frame
        )
        return flat.write_csv().rstrip("\n")
    if fmt == "markdown":
        escape = lambda text: text.replace("|", "\\|")  # noqa: E731
        head = "| " + " | ".join(escape(c) for c in frame.columns) + " |"
        rule = "|" + "|".join("---:" if frame.schema[c].is_numeric() else "---" for c in frame.columns) + "|"
        body = ["| " + " | ".join(escape(_cell(v)) for v in row) + " |" for row in rows]
        return "\n".join([head, rule, *body])
    numeric = [dtype.is_numeric() for dtype in frame.schema.values()]
    return text_table(frame.columns, rows, numeric) + f"\n({len(rows)} row{'s' if len(rows) != 1 else ''})"
