"""IBM Model 1 by expectation maximisation, vectorised over sparse counts.

For a pair (source e_1..e_l, target f_1..f_m) the E-step gives every alignment (i, j) the posterior
t(f_j|e_i) / sum_i' t(f_j|e_i') and adds it to count(f_j, e_i); the M-step sets
t(f|e) = count(f, e) / sum_f' count(f', e).

NULL source word (`EMConfig.null_word`): the paper trains with MGIZA, which gives every source
sentence an empty word e_0 that target words may align to (spurious insertions), then discards the
probabilities t(f|NULL). With the option on, every source sentence gets e_0 (id V, an extra row) so
the E-step divides by t(f|e_0) + sum_i t(f|e_i) and the likelihood by l + 1; the NULL row is dropped
from the result. Off (the `demo` profile), a target word must align to a real source word.

Parameters live in one float64 vector over the co-occurring (source, target) pairs, keyed by
``source * V + target`` and sorted, so a lookup is a `searchsorted`. The bitext is processed in blocks
of at most `EMConfig.block_entries` alignments (memory bounded by the block and the parameters, not
the corpus); no Python loop runs over tokens. t starts uniform, as in GIZA.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from dagster_ir.lazy import lazy_module
from dagster_ir.methods.model1.bitext import Bitext
from dagster_ir.methods.model1.vocabulary import Ragged, ragged_arange

if TYPE_CHECKING:
    import scipy.sparse as sp
else:
    sp = lazy_module("scipy.sparse")


@dataclass(frozen=True)
class EMConfig:
    """iterations: EM iterations (the paper: 5); block_entries: alignments (l * m summed) per block;
    null_word: align target words to an empty source word too, as MGIZA, and drop its row."""

    iterations: int = 5
    block_entries: int = 2_000_000
    null_word: bool = False

    def __post_init__(self) -> None:
        if self.iterations < 1 or self.block_entries < 1:
            raise ValueError(f"EMConfig: iterations and block_entries must be >= 1: {self}")


@dataclass(frozen=True)
class EMIteration:
    """One EM iteration: mean log-likelihood per target token, pairs processed and the rate."""

    iteration: int
    log_likelihood: float  # mean over target tokens of log(sum_i t(f_j|e_i) / l), before the M-step
    pairs: int
    alignments: int  # (source position, target position) combinations, summed over pairs
    seconds: float

    @property
    def pairs_per_second(self) -> float:
        return self.pairs / max(self.seconds, 1e-12)

    @property
    def alignments_per_second(self) -> float:
        return self.alignments / max(self.seconds, 1e-12)


@dataclass(frozen=True)
class EMResult:
    """t(target|source) as a CSR matrix (rows: source ids, columns: target ids) and the history."""

    matrix: sp.csr_matrix
    history: list[EMIteration] = field(default_factory=list)


def train_em(
    bitext: Callable[[], Iterable[Bitext]],
    vocab_size: int,
    config: EMConfig = EMConfig(),
    *,
    on_iteration: Callable[[EMIteration], None] | None = None,
) -> EMResult:
    """Run IBM Model 1 EM; `bitext()` must yield the same blocks each time it is called.

    The result is V x V: with `config.null_word` the NULL word's row is trained and then discarded.
    """
    if config.null_word:
        with_null = train_em(
            lambda: (with_null_source(b, vocab_size) for b in bitext()),
            vocab_size + 1,
            replace(config, null_word=False),
            on_iteration=on_iteration,
        )
        return EMResult(with_null.matrix[:vocab_size, :vocab_size].tocsr(), with_null.history)
    keys = _cooccurring_keys(bitext(), vocab_size, config.block_entries)
    if keys.size == 0:
        raise ValueError("train_em: the parallel corpus has no non-empty pairs")
    sources = keys // vocab_size
    t = np.ones(keys.size)  # any constant: the first E-step gives every alignment 1 / l
    history = []
    for iteration in range(1, config.iterations + 1):
        started = time.perf_counter()
        counts, log_likelihood, n_targets, n_pairs, n_alignments = _expected_counts(
            bitext(), keys, t, vocab_size, config.block_entries
        )
        totals = np.bincount(sources, weights=counts, minlength=vocab_size)
        t = counts / totals[sources]
        record = EMIteration(
            iteration, log_likelihood / max(n_targets, 1), n_pairs, n_alignments, time.perf_counter() - started
        )
        history.append(record)
        if on_iteration is not None:
            on_iteration(record)
    matrix = sp.csr_matrix((t, (sources, keys % vocab_size)), shape=(vocab_size, vocab_size), dtype=np.float64)
    return EMResult(matrix, history)


def with_null_source(bitext: Bitext, null_id: int) -> Bitext:
    """`bitext` with the empty word `null_id` prepended to every source sentence (pairs with an empty
    target keep no NULL: they carry no alignment)."""
    source = bitext.source
    lengths = source.lengths + (bitext.target.lengths > 0)
    ids = np.insert(source.ids, source.offsets[:-1][bitext.target.lengths > 0], null_id).astype(np.int32)
    return Bitext(Ragged.from_lengths(ids, lengths), bitext.target)


@dataclass(frozen=True)
class _Alignments:
    """Every (source position, target position) of a block of pairs."""

    source: np.ndarray  # source token id
    target: np.ndarray  # target token id
    group: np.ndarray  # target occurrence (normalisation group of the E-step)
    source_length: np.ndarray  # l of the pair, per alignment
    n_groups: int
    n_pairs: int


def _blocks(bitexts: Iterable[Bitext], max_entries: int) -> Iterator[_Alignments]:
    """Split each bitext into runs of pairs with at most `max_entries` alignments (or one pair)."""
    for bitext in bitexts:
        bitext = bitext.without_empty()
        entries = bitext.source.lengths * bitext.target.lengths
        bounds = _cut_points(entries, max_entries)
        for start, end in zip(bounds[:-1], bounds[1:], strict=True):
            yield _alignments(bitext, start, end)


def _cut_points(entries: np.ndarray, max_entries: int) -> list[int]:
    """Row boundaries [0, ..., n] such that each run sums to <= max_entries (a bigger row stands alone)."""
    cuts, total = [0], 0
    cumulative = np.cumsum(entries)
    while cuts[-1] < entries.size:
        start = cuts[-1]
        end = int(np.searchsorted(cumulative, total + max_entries, side="right"))
        end = max(end, start + 1)
        cuts.append(end)
        total = int(cumulative[end - 1])
    return cuts


def _alignments(bitext: Bitext, start: int, end: int) -> _Alignments:
    src, tgt = bitext.source, bitext.target
    ls = src.lengths[start:end]
    ms = tgt.lengths[start:end]
    pair = np.repeat(np.arange(start, end), ls * ms)
    local = ragged_arange(ls * ms)
    m = tgt.lengths[pair]
    i, j = local // m, local % m
    target_position = tgt.offsets[pair] + j
    first = tgt.offsets[start]
    return _Alignments(
        source=src.ids[src.offsets[pair] + i].astype(np.int64),
        target=tgt.ids[target_position].astype(np.int64),
        group=target_position - first,
        source_length=src.lengths[pair],
        n_groups=int(tgt.offsets[end] - first),
        n_pairs=end - start,
    )


def _cooccurring_keys(bitexts: Iterable[Bitext], vocab_size: int, max_entries: int) -> np.ndarray:
    """Sorted unique ``source * V + target`` over every alignment of the corpus."""
    keys = np.zeros(0, dtype=np.int64)
    for block in _blocks(bitexts, max_entries):
        keys = np.union1d(keys, np.unique(block.source * vocab_size + block.target))
    return keys


def _expected_counts(
    bitexts: Iterable[Bitext], keys: np.ndarray, t: np.ndarray, vocab_size: int, max_entries: int
) -> tuple[np.ndarray, float, int, int, int]:
    """E-step over the corpus: expected counts per key, log-likelihood, target tokens, pairs, alignments."""
    counts = np.zeros(keys.size)
    log_likelihood, n_targets, n_pairs, n_alignments = 0.0, 0, 0, 0
    for block in _blocks(bitexts, max_entries):
        index = np.searchsorted(keys, block.source * vocab_size + block.target)
        values = t[index]
        denominator = np.bincount(block.group, weights=values, minlength=block.n_groups)
        counts += np.bincount(index, weights=values / denominator[block.group], minlength=keys.size)
        lengths = np.zeros(block.n_groups)
        lengths[block.group] = block.source_length
        log_likelihood += float(np.log(denominator / lengths).sum())
        n_targets += block.n_groups
        n_pairs += block.n_pairs
        n_alignments += index.size
    return counts, log_likelihood, n_targets, n_pairs, n_alignments
