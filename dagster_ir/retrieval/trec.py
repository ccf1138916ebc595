"""Strict reading and writing of TREC run and qrels files as Polars frames (RUN and QRELS schemas).

File formats (fields separated by spaces or tabs, one record per line, `\\n` line endings):
    run    `qid Q0 docid rank score tag`   (6 columns; the 2nd is ignored)
    qrels  `qid iter docid rel`            (4 columns; the 2nd is ignored)

Reading is strict: every problem raises `TrecFormatError` whose message starts `<file>:<line>:`
(1-based). Problems: an empty file, a UTF-8 byte order mark, CRLF line endings, a wrong column count,
a score that is not a finite number, a rank or relevance that is not an integer ("1.0" is refused),
and a duplicate (query, doc) pair. With `repair=True` three of them are repaired instead and counted
in a `ReadReport`: the BOM is stripped, a trailing `\\r` is stripped from each line, and a later
duplicate (query, doc) row is dropped (the first one is kept). `read_run_with_report` and
`read_qrels_with_report` return the report; `read_run` and `read_qrels` return the frame only.
Parsing is vectorised in Polars over the whole file (about 1 s and a few times the file size in
memory per million run lines); runs and qrels are small next to a corpus.

Ranks follow trec_eval: trec_eval ignores the rank column and orders a query's documents by score
descending, breaking ties by docno *descending* in byte order (checked against pytrec_eval, which
embeds trec_eval: with equal scores "b" ranks above "a", "9" above "10", "a" above "Z").
`rank_run` assigns ranks that way and `write_run` always writes them, so the file states the order
every evaluator will use. Writers are atomic and round-trip exactly: scores are written with the
shortest decimal text that parses back to the same float, so `read_run(write_run(x)) == x` for a
ranked run `x = rank_run(x)`, and `read_qrels(write_qrels(q)) == q` for qrels sorted by
(query_id, doc_id). `write_runs` writes a frame of several runs (and seeds) as one file each.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from dagster_ir.schemas import QRELS, RUN, validate
from dagster_ir.storage.atomic import atomic_path

RUN_COLUMNS = ("query_id", "q0", "doc_id", "rank", "score", "run_name")
QRELS_COLUMNS = ("query_id", "iteration", "doc_id", "relevance")
_TOKEN = r"[^ \t]+"  # trec_eval splits fields on blanks and tabs
_BAD_TOKEN = r"[ \t\n\r\x0b\x0c]"
_INT32 = (-(2**31), 2**31 - 1)
_SHOWN_CHARS = 120

PathLike = str | os.PathLike[str]


class TrecFormatError(ValueError):
    """A TREC run or qrels file (or a frame about to be written as one) is malformed."""


@dataclass(frozen=True)
class ReadReport:
    """What `repair=True` changed while reading one file (all zero/False for a clean file)."""

    bom_stripped: bool = False
    crlf_lines: int = 0  # lines whose trailing "\r" was stripped
    duplicates_dropped: int = 0  # later (query, doc) rows dropped, the first kept

    @property
    def repaired(self) -> bool:
        """True when anything was changed."""
        return self.bom_stripped or self.crlf_lines > 0 or self.duplicates_dropped > 0


# --- reading ----------------------------------------------------------------------------------


def read_run(path: PathLike, *, run_name: str | None = None, repair: bool = False) -> pl.DataFrame:
    """Read a TREC run file into a RUN frame in file order (see the module docstring for the rules).

    `run_name` replaces the file's tag column when given.
    """
    return read_run_with_report(path, run_name=run_name, repair=repair)[0]


def read_run_with_report(
    path: PathLike, *, run_name: str | None = None, repair: bool = False
) -> tuple[pl.DataFrame, ReadReport]:
    """Like `read_run`, also returning what `repair=True` changed."""
    return parse_run_text(_read_text(path), source=str(path), run_name=run_name, repair=repair)


def read_qrels(path: PathLike, *, repair: bool = False) -> pl.DataFrame:
    """Read a TREC qrels file into a QRELS frame in file order (see the module docstring)."""
    return read_qrels_with_report(path, repair=repair)[0]


def read_qrels_with_report(path: PathLike, *, repair: bool = False) -> tuple[pl.DataFrame, ReadReport]:
    """Like `read_qrels`, also returning what `repair=True` changed."""
    return parse_qrels_text(_read_text(path), source=str(path), repair=repair)


def parse_run_text(
    text: str, *, source: str = "<text>", run_name: str | None = None, repair: bool = False
) -> tuple[pl.DataFrame, ReadReport]:
    """Parse the text of a run file; `source` names it in error messages."""
    lines, bom, crlf = _split_lines(text, source, repair)
    raw = _columns(lines, RUN_COLUMNS, "qid Q0 docid rank score tag", source)
    score = _parse_score(raw, source)
    rank = _parse_int(raw, "rank", source)
    tag = pl.lit(run_name, dtype=pl.String) if run_name is not None else pl.col("run_name")
    frame = raw.select("query_id", "doc_id", score.alias("score"), rank.alias("rank"), tag.alias("run_name"))
    frame, dropped = _drop_duplicates(frame, source, repair)
    return frame, ReadReport(bom, crlf, dropped)


def parse_qrels_text(text: str, *, source: str = "<text>", repair: bool = False) -> tuple[pl.DataFrame, ReadReport]:
    """Parse the text of a qrels file; `source` names it in error messages."""
    lines, bom, crlf = _split_lines(text, source, repair)
    raw = _columns(lines, QRELS_COLUMNS, "qid iter docid rel", source)
    relevance = _parse_int(raw, "relevance", source)
    frame = raw.select("query_id", "doc_id", relevance.alias("relevance"))
    frame, dropped = _drop_duplicates(frame, source, repair)
    return frame, ReadReport(bom, crlf, dropped)


def _fail(source: str, line: int, message: str) -> TrecFormatError:
    return TrecFormatError(f"{source}:{line}: {message}")


def _read_text(path: PathLike) -> str:
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise _fail(str(path), line, f"not valid UTF-8 ({error.reason})") from None


def _split_lines(text: str, source: str, repair: bool) -> tuple[pl.Series, bool, int]:
    """The file's lines (without terminators), whether a BOM was stripped, how many CRs were stripped."""
    bom = text.startswith("\ufeff")
    if bom:
        if not repair:
            raise _fail(source, 1, "starts with a UTF-8 byte order mark (read with repair=True to strip it)")
        text = text[1:]
    if not text:
        raise _fail(source, 1, "empty file")
    lines = pl.Series("line", text.removesuffix("\n").split("\n"), dtype=pl.String)
    crlf = lines.str.ends_with("\r")
    n_crlf = int(crlf.sum())
    if n_crlf and not repair:
        line = _first_true(crlf)
        raise _fail(source, line, "CRLF line ending (read with repair=True to strip the carriage returns)")
    if n_crlf:
        lines = lines.str.strip_suffix("\r")
    stray = lines.str.contains("\r", literal=True)
    if stray.any():
        raise _fail(source, _first_true(stray), "carriage return inside a line")
    return lines, bom, n_crlf


def _first_true(mask: pl.Series) -> int:
    """The 1-based line number of the first True in `mask`."""
    return int(mask.arg_true()[0]) + 1


def _columns(lines: pl.Series, names: tuple[str, ...], layout: str, source: str) -> pl.DataFrame:
    """Split each line into `len(names)` string columns, failing on the first wrong count."""
    tokens = lines.str.extract_all(_TOKEN)
    counts = tokens.list.len()
    wrong = counts != len(names)
    if wrong.any():
        index = int(wrong.arg_true()[0])
        shown = lines[index][:_SHOWN_CHARS]
        raise _fail(source, index + 1, f"expected {len(names)} columns `{layout}`, found {counts[index]}: {shown!r}")
    return pl.DataFrame({name: tokens.list.get(i) for i, name in enumerate(names)})


def _parse_score(raw: pl.DataFrame, source: str) -> pl.Series:
    score = raw["score"].cast(pl.Float64, strict=False)
    bad = score.is_null() | ~score.fill_null(0.0).is_finite()
    if bad.any():
        index = int(bad.arg_true()[0])
        raise _fail(source, index + 1, f"score {raw['score'][index]!r} is not a finite number")
    return score


def _parse_int(raw: pl.DataFrame, column: str, source: str) -> pl.Series:
    values = raw[column].cast(pl.Int64, strict=False)
    bad = values.is_null() | (values.fill_null(0) < _INT32[0]) | (values.fill_null(0) > _INT32[1])
    if bad.any():
        index = int(bad.arg_true()[0])
        raise _fail(source, index + 1, f"{column} {raw[column][index]!r} is not a 32-bit integer")
    return values.cast(pl.Int32)


def _drop_duplicates(frame: pl.DataFrame, source: str, repair: bool) -> tuple[pl.DataFrame, int]:
    """Fail on (or with `repair`, drop) every (query, doc) row after the first of its pair."""
    first = frame.select(pl.struct("query_id", "doc_id").is_first_distinct()).to_series()
    n_dropped = len(first) - int(first.sum())
    if n_dropped == 0:
        return frame, 0
    if repair:
        return frame.filter(first), n_dropped
    index = int((~first).arg_true()[0])
    query, doc = frame["query_id"][index], frame["doc_id"][index]
    same = (frame["query_id"] == query) & (frame["doc_id"] == doc)
    raise _fail(source, index + 1, f"duplicate (query, doc) ({query!r}, {doc!r}); first at line {_first_true(same)}")


# --- checks -----------------------------------------------------------------------------------


def check_run_against_qrels(
    run: pl.DataFrame, qrels: pl.DataFrame, path: PathLike, *, repair: bool = False
) -> tuple[pl.DataFrame, int]:
    """Fail when `run` has queries that `qrels` does not judge; with `repair`, drop them instead.

    Returns the run (without the unjudged queries) and the number of queries dropped. The error
    names `path` (the run file), the missing queries and the line of the first row of the first
    one; lines count rows of `run`, which are file lines for a frame from `read_run` unrepaired.
    """
    judged = qrels["query_id"].unique().implode()
    unjudged = ~run["query_id"].is_in(judged)
    if not unjudged.any():
        return run, 0
    missing = run.filter(unjudged)["query_id"].unique(maintain_order=True)
    if repair:
        return run.filter(~unjudged), len(missing)
    shown = missing.head(20).to_list()
    more = f" and {len(missing) - len(shown)} more" if len(missing) > len(shown) else ""
    raise _fail(str(path), _first_true(unjudged), f"{len(missing)} run queries not in the qrels: {shown}{more}")


# --- ranking and writing ------------------------------------------------------------------------


def rank_run(frame: pl.DataFrame) -> pl.DataFrame:
    """Assign 1-based ranks as trec_eval orders documents: score descending, then doc_id descending.

    Returns the frame sorted by query_id then rank, with `rank` (Int32) replaced or added.
    """
    _require_finite_scores(frame, "rank_run")
    ordered = frame.sort(["query_id", "score", "doc_id"], descending=[False, True, True])
    rank = (pl.int_range(pl.len()).over("query_id") + 1).cast(pl.Int32)
    columns = frame.columns if "rank" in frame.columns else [*frame.columns, "rank"]
    return ordered.with_columns(rank.alias("rank")).select(columns)


def write_run(frame: pl.DataFrame, path: PathLike) -> Path:
    """Write a RUN frame as a TREC run file, atomically; ranks are reassigned by `rank_run`.

    Lines are sorted by query_id then rank. Returns the path written.
    """
    validate(frame, RUN, "run")
    _require_tokens(frame, ["query_id", "doc_id", "run_name"], path)
    _require_unique_pairs(frame, path)
    _require_finite_scores(frame, str(path))
    ranked = rank_run(frame)
    line = pl.concat_str(
        [
            pl.col("query_id"),
            pl.lit("Q0"),
            pl.col("doc_id"),
            pl.col("rank").cast(pl.String),
            pl.col("score").cast(pl.String),  # shortest text that parses back to the same float
            pl.col("run_name"),
        ],
        separator=" ",
    )
    return _write_lines(ranked.select(line.alias("line")), path)


def run_file_name(run_name: str, seed: int | None = None) -> str:
    """`<run_name>.run`, or `<run_name>.seed-<seed>.run` for one seed of a trained run; characters other
    than letters, digits and `._+-` become `_` (the file's tag column keeps the name itself)."""
    safe = re.sub(r"[^A-Za-z0-9._+-]+", "_", run_name).strip(".") or "run"
    return f"{safe}.run" if seed is None else f"{safe}.seed-{seed}.run"


def write_runs(frame: pl.DataFrame, folder: PathLike) -> list[Path]:
    """One TREC run file per run name of `frame` (RUN columns, and a `seed` column: one file per seed
    of a trained run, named by `run_file_name`), each atomically, into `folder`; other `.run` files
    there are removed, so the folder holds these runs and no older ones. Two names that would share
    a file are refused before anything is written. Returns the paths, in the frame's run order."""
    folder = Path(folder)
    if "seed" not in frame.columns:
        frame = frame.with_columns(seed=pl.lit(None, dtype=pl.Int64))
    runs = frame.partition_by("run_name", "seed", as_dict=True, maintain_order=True)  # one pass, not one per run
    names: dict[str, tuple] = {}
    for run_name, seed in runs:
        name = run_file_name(run_name, seed)
        if name in names:
            raise ValueError(
                f"write_runs: runs {names[name]} and {(run_name, seed)} would both be written to {folder / name}"
            )
        names[name] = (run_name, seed)
    folder.mkdir(parents=True, exist_ok=True)
    written = [write_run(runs[key].select(list(RUN)), folder / name) for name, key in names.items()]
    for old in folder.glob("*.run"):
        if old.name not in names:
            old.unlink()
    return written


def write_qrels(frame: pl.DataFrame, path: PathLike) -> Path:
    """Write a QRELS frame as a TREC qrels file (`qid 0 docid rel`), sorted by query_id, doc_id."""
    validate(frame, QRELS, "qrels")
    _require_tokens(frame, ["query_id", "doc_id"], path)
    _require_unique_pairs(frame, path)
    line = pl.concat_str(
        [pl.col("query_id"), pl.lit("0"), pl.col("doc_id"), pl.col("relevance").cast(pl.String)],
        separator=" ",
    )
    return _write_lines(frame.sort("query_id", "doc_id").select(line.alias("line")), path)


def _write_lines(lines: pl.DataFrame, path: PathLike) -> Path:
    if lines.height == 0:
        raise TrecFormatError(f"{path}: refusing to write an empty TREC file (it could not be read back)")
    with atomic_path(path) as tmp:
        lines.write_csv(tmp, include_header=False, quote_style="never", line_terminator="\n")
    return Path(path)


def _require_finite_scores(frame: pl.DataFrame, where: str) -> None:
    bad = ~frame["score"].is_finite() | frame["score"].is_null()
    if bad.any():
        row = frame.row(int(bad.arg_true()[0]), named=True)
        raise TrecFormatError(
            f"{where}: score {row['score']} of ({row['query_id']!r}, {row['doc_id']!r}) is not finite"
        )


def _require_tokens(frame: pl.DataFrame, columns: list[str], path: PathLike) -> None:
    """Every value in `columns` must be a non-empty string without blanks or line breaks."""
    for column in columns:
        values = frame[column]
        bad = values.is_null() | (values.str.len_bytes() == 0) | values.str.contains(_BAD_TOKEN)
        if bad.any():
            index = int(bad.arg_true()[0])
            raise TrecFormatError(f"{path}: row {index}: {column} {values[index]!r} is empty or contains whitespace")


def _require_unique_pairs(frame: pl.DataFrame, path: PathLike) -> None:
    dup = frame.select(pl.struct("query_id", "doc_id").is_duplicated()).to_series()
    if dup.any():
        index = int(dup.arg_true()[0])
        pair = (frame["query_id"][index], frame["doc_id"][index])
        raise TrecFormatError(f"{path}: row {index}: duplicate (query, doc) {pair!r}")
