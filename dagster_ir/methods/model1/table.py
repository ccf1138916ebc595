"""Translation tables T(target|source): pruning, self-translation, Parquet and GIZA-style text.

A `TranslationTable` is a sparse matrix over one vocabulary, rows = source tokens d, columns =
target tokens q, entry = T(q|d). On disk it is the MODEL1_TABLE frame (src_token, tgt_token, prob),
so a table does not depend on how ids were numbered when it was trained.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from dagster_ir.lazy import lazy_module
from dagster_ir.methods.model1.vocabulary import Vocabulary
from dagster_ir.schemas import MODEL1_TABLE, validate
from dagster_ir.storage.atomic import atomic_path

if TYPE_CHECKING:
    import scipy.sparse as sp
else:
    sp = lazy_module("scipy.sparse")


@dataclass(frozen=True)
class PruneConfig:
    """What survives EM (the paper's tricks; exponents lost in our copy of the text are our defaults).

    min_prob: drop T(q|d) below this (the paper: "about 10^-?"; default 1e-3).
    max_translations: keep at most this many targets per source token, most probable first
        (the paper: "at most 10^? ..."; default 100, which with min_prob=1e-3 keeps nearly all mass).
    self_prob: T(t|t) for every source token t, the rest of the row rescaled to 1 - self_prob; a row
        with nothing else left gets T(t|t) = 1. None: no self-translation, rows renormalised to 1.
        The paper gives no value; 0.2 was best of {0.05, 0.2, 0.5} on wiki-car dev (fused with BM25).
    """

    min_prob: float = 1e-3
    max_translations: int = 100
    self_prob: float | None = 0.2

    def __post_init__(self) -> None:
        if not 0 <= self.min_prob < 1 or self.max_translations < 1:
            raise ValueError(f"PruneConfig: need 0 <= min_prob < 1 and max_translations >= 1: {self}")
        if self.self_prob is not None and not 0 < self.self_prob <= 1:
            raise ValueError(f"PruneConfig: self_prob must be in (0, 1] or None, got {self.self_prob}")


@dataclass(frozen=True)
class TranslationTable:
    """T(q|d) over `vocabulary`: ``matrix[d, q]``; a CSR matrix of float32."""

    vocabulary: Vocabulary
    matrix: sp.csr_matrix

    def __post_init__(self) -> None:
        n = len(self.vocabulary)
        if self.matrix.shape != (n, n):
            raise ValueError(f"TranslationTable: matrix is {self.matrix.shape}, vocabulary has {n} tokens")

    @cached_property
    def by_target(self) -> sp.csc_matrix:
        """The same matrix in CSC form: fast column (query token) slices for scoring."""
        return self.matrix.tocsc()

    @property
    def nnz(self) -> int:
        return int(self.matrix.nnz)

    def to_frame(self) -> pl.DataFrame:
        """MODEL1_TABLE rows, by source token id and then by probability, largest first."""
        coo = self.matrix.tocoo()
        order = np.lexsort((-coo.data, coo.row))
        tokens = pl.Series(self.vocabulary.tokens, dtype=pl.String)
        return pl.DataFrame(
            {
                "src_token": tokens.gather(coo.row[order]),
                "tgt_token": tokens.gather(coo.col[order]),
                "prob": coo.data[order].astype(np.float32),
            },
            schema=MODEL1_TABLE,
        )

    @classmethod
    def from_frame(cls, frame: pl.DataFrame, vocabulary: Vocabulary) -> TranslationTable:
        """A table over `vocabulary` from MODEL1_TABLE rows; a token outside it is an error."""
        validate(frame, MODEL1_TABLE, "Model 1 table")
        ids = vocabulary.token_frame
        rows = frame.join(ids.rename({"token": "src_token", "id": "src"}), on="src_token", how="left")
        rows = rows.join(ids.rename({"token": "tgt_token", "id": "tgt"}), on="tgt_token", how="left")
        unknown = rows.filter(pl.col("src").is_null() | pl.col("tgt").is_null())
        if unknown.height:
            row = unknown.row(0, named=True)
            raise ValueError(
                f"Model 1 table: token pair ({row['src_token']!r}, {row['tgt_token']!r}) is not "
                f"in the {vocabulary.kind} vocabulary ({unknown.height} such rows)"
            )
        n = len(vocabulary)
        matrix = sp.csr_matrix(
            (rows["prob"].to_numpy(), (rows["src"].to_numpy(), rows["tgt"].to_numpy())),
            shape=(n, n),
            dtype=np.float32,
        )
        return cls(vocabulary, matrix)


def prune(matrix: sp.spmatrix, config: PruneConfig) -> sp.csr_matrix:
    """Threshold, cap per source token, then set self-translation and rescale rows to sum to 1."""
    coo = sp.coo_matrix(matrix)
    present = np.unique(coo.row)  # source tokens EM saw
    rows, cols, vals = coo.row.astype(np.int64), coo.col.astype(np.int64), coo.data.astype(np.float64)
    keep = vals >= config.min_prob
    rows, cols, vals = rows[keep], cols[keep], vals[keep]
    keep = _rank_in_row(rows, vals) < config.max_translations
    rows, cols, vals = rows[keep], cols[keep], vals[keep]
    if config.self_prob is None:
        sums = np.bincount(rows, weights=vals, minlength=matrix.shape[0])
        vals = vals / sums[rows]
    else:
        rows, cols, vals = _with_self_translation(rows, cols, vals, present, config.self_prob, matrix.shape[0])
    return sp.csr_matrix((vals.astype(np.float32), (rows, cols)), shape=matrix.shape)


def with_self_prob(table: TranslationTable, self_prob: float) -> TranslationTable:
    """`table` with T(t|t) = self_prob in every row that has other entries (rescaled to 1 - self_prob);
    a row holding only its self translation keeps T(t|t) = 1. On a table `prune` made with any
    self_prob this equals pruning the EM table with `self_prob` (pruning never looks at it)."""
    coo = sp.coo_matrix(table.matrix)
    rows, cols, vals = coo.row.astype(np.int64), coo.col.astype(np.int64), coo.data.astype(np.float64)
    rows, cols, vals = _with_self_translation(rows, cols, vals, np.unique(rows), self_prob, table.matrix.shape[0])
    return TranslationTable(
        table.vocabulary, sp.csr_matrix((vals.astype(np.float32), (rows, cols)), shape=table.matrix.shape)
    )


def _rank_in_row(rows: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """0 for the largest value of each row, 1 for the next, ... (ties by position)."""
    order = np.lexsort((-vals, rows))
    sorted_rows = rows[order]
    first = np.searchsorted(sorted_rows, sorted_rows, side="left")
    ranks = np.empty(rows.size, dtype=np.int64)
    ranks[order] = np.arange(rows.size) - first
    return ranks


def _with_self_translation(
    rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, present: np.ndarray, self_prob: float, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    others = rows != cols
    rows, cols, vals = rows[others], cols[others], vals[others]
    other_mass = np.bincount(rows, weights=vals, minlength=n)
    vals = vals * (1.0 - self_prob) / other_mass[rows]
    self_vals = np.where(other_mass[present] > 0, self_prob, 1.0)
    if self_prob == 1.0:  # nothing else may keep mass
        rows, cols, vals = rows[:0], cols[:0], vals[:0]
    return (np.concatenate([rows, present]), np.concatenate([cols, present]), np.concatenate([vals, self_vals]))


def row_sums(frame: pl.DataFrame) -> pl.DataFrame:
    """(src_token, total, n) per source token of a MODEL1_TABLE frame: what the asset check reads."""
    validate(frame, MODEL1_TABLE, "Model 1 table")
    return frame.group_by("src_token").agg(total=pl.col("prob").cast(pl.Float64).sum(), n=pl.len())


# --- files --------------------------------------------------------------------------------------


def write_parquet(table: TranslationTable, path: str | os.PathLike[str]) -> Path:
    """Write the MODEL1_TABLE frame to `path` atomically."""
    with atomic_path(path) as tmp:
        table.to_frame().write_parquet(tmp, compression="zstd")
    return Path(path)


def write_giza(table: TranslationTable, path: str | os.PathLike[str]) -> Path:
    """A GIZA-style text table: one ``src_token tgt_token prob`` line per entry, atomically.

    The column order is MODEL1_TABLE's (source first), as in GIZA's ``*.actual.t1`` files.
    """
    with atomic_path(path) as tmp:
        table.to_frame().write_csv(tmp, separator=" ", include_header=False, quote_style="never")
    return Path(path)


def read_giza(path: str | os.PathLike[str]) -> pl.DataFrame:
    """Read a GIZA-style text table back as a MODEL1_TABLE frame; a bad file is named in the error."""
    try:
        frame = pl.read_csv(
            path,
            separator=" ",
            has_header=False,
            quote_char=None,
            new_columns=list(MODEL1_TABLE),
            schema_overrides=MODEL1_TABLE,
        )
    except (pl.exceptions.ComputeError, pl.exceptions.NoDataError) as error:
        raise ValueError(f"{path}: not a GIZA-style table (src_token tgt_token prob): {error}") from error
    if frame.width != 3 or frame.null_count().sum_horizontal().item():
        raise ValueError(f"{path}: every line needs exactly 3 fields: src_token tgt_token prob")
    return frame.cast(MODEL1_TABLE)
