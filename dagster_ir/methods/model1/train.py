"""Train a non-parametric Model 1 end to end: vocabulary -> parallel corpus -> EM -> pruned table."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from dagster_ir.methods.model1.bitext import Bitext, BitextConfig, document_text, iter_bitext, training_pairs
from dagster_ir.methods.model1.em import EMConfig, EMIteration, train_em
from dagster_ir.methods.model1.scoring import ScoringConfig
from dagster_ir.methods.model1.table import PruneConfig, TranslationTable, prune
from dagster_ir.methods.model1.vocabulary import WORDPIECES, Ragged, Vocabulary, build_vocabulary


@dataclass(frozen=True)
class Model1Config:
    """Every setting of the non-parametric Model 1 (see each part's config for its fields)."""

    vocabulary: str = WORDPIECES  # "words" | "wordpieces"
    backbone: str = ""  # the word piece tokenizer ("" = bundled all-MiniLM-L6-v2)
    bitext: BitextConfig = field(default_factory=BitextConfig)
    em: EMConfig = field(default_factory=EMConfig)
    prune: PruneConfig = field(default_factory=PruneConfig)
    scoring: ScoringConfig = field(default_factory=ScoringConfig)
    spool_to_disk: bool = False  # keep the parallel corpus as .npz blocks in a temporary folder


PROFILES: dict[str, Model1Config] = {
    "demo": Model1Config(),
    # bert-base-uncased has the same WordPiece vocabulary as the bundled backbone
    # MGIZA aligns to the empty word and the paper discards those probabilities: EM with NULL
    "paper": Model1Config(backbone="bert-base-uncased", spool_to_disk=True, em=EMConfig(null_word=True)),
}


@dataclass(frozen=True)
class Model1Training:
    """A trained table and how training went."""

    table: TranslationTable
    history: list[EMIteration]
    n_query_doc_pairs: int
    n_bitext_pairs: int
    raw_entries: int  # T entries before pruning
    seconds: float


def collection_vocabulary(
    kind: str,
    corpus: pl.DataFrame | pl.LazyFrame,
    queries: pl.DataFrame,
    *,
    backbone: str = "",
    batch_size: int = 50_000,
) -> Vocabulary:
    """The vocabulary of `kind` over the collection's documents and queries (words are counted)."""

    def texts() -> Iterator[list[str]]:
        docs = corpus.lazy().select(text=document_text())
        total = docs.select(pl.len()).collect().item()
        for start in range(0, total, batch_size):
            yield docs.slice(start, batch_size).collect()["text"].to_list()
        yield queries["text"].to_list()

    return build_vocabulary(kind, texts(), backbone=backbone)


def train_model1(
    queries: pl.DataFrame,
    qrels: pl.DataFrame,
    corpus: pl.DataFrame | pl.LazyFrame,
    query_ids: pl.Series,
    vocabulary: Vocabulary,
    config: Model1Config = Model1Config(),
) -> Model1Training:
    """EM on the parallel corpus of `query_ids` and their relevant documents, then pruning."""
    started = time.perf_counter()
    pairs = training_pairs(queries, qrels, query_ids)
    if pairs.height == 0:
        raise ValueError("train_model1: the training queries have no relevant documents")
    with _spooled(iter_bitext(pairs, queries, corpus, vocabulary, config.bitext), config.spool_to_disk) as blocks:
        n_bitext_pairs = sum(len(block) for block in blocks)
        result = train_em(lambda: blocks, len(vocabulary), config.em)
    table = TranslationTable(vocabulary, prune(result.matrix, config.prune))
    return Model1Training(
        table, result.history, pairs.height, n_bitext_pairs, int(result.matrix.nnz), time.perf_counter() - started
    )


class _SpooledBitext:
    """Bitext blocks kept in memory or as .npz files, to iterate over once per EM iteration."""

    def __init__(self, blocks: Iterable[Bitext], directory: Path | None) -> None:
        self._directory = directory
        self._blocks: list[Bitext] = []
        self._files: list[Path] = []
        for i, block in enumerate(blocks):
            if directory is None:
                self._blocks.append(block)
            else:
                path = directory / f"bitext-{i:06d}.npz"
                np.savez(
                    path,
                    src_ids=block.source.ids,
                    src_offsets=block.source.offsets,
                    tgt_ids=block.target.ids,
                    tgt_offsets=block.target.offsets,
                )
                self._files.append(path)

    def __iter__(self) -> Iterator[Bitext]:
        if self._directory is None:
            yield from self._blocks
            return
        for path in self._files:
            with np.load(path, allow_pickle=False) as arrays:
                yield Bitext(
                    Ragged(arrays["src_ids"], arrays["src_offsets"]), Ragged(arrays["tgt_ids"], arrays["tgt_offsets"])
                )


@contextmanager
def _spooled(blocks: Iterable[Bitext], to_disk: bool) -> Iterator[_SpooledBitext]:
    """A re-iterable parallel corpus; spooled files are removed on exit."""
    if not to_disk:
        yield _SpooledBitext(blocks, None)
        return
    with tempfile.TemporaryDirectory(prefix="model1-bitext-") as folder:
        yield _SpooledBitext(blocks, Path(folder))
