"""The pre-training baselines of the PHP paper's Table 3 (section 4.2) as example generators.

Each generator reads the same Wikipedia tables as PHP (`wiki_articles` segments, `wiki_links`) and
writes BASELINE_EXAMPLES rows: one pseudo query-document example per row, its candidates as parallel
lists `queries` / `docs`, the first candidate the preferred one. `pretrain_baseline` (`baseline_training`)
then trains every method with PHP's backbone, input budget (`max_length`), MLM and TrainConfig, and
the fine-tuning that follows is the same `cross_encoder` asset, so only the pre-training signal differs.

- ICT (Chang et al. 2020, after Lee et al. 2019): a sentence drawn from a segment is the query,
  the segment without it (its context) the document.
- WLP (Chang et al. 2020): a sentence drawn from the lead (first paragraph, our segment 1) of an
  article p is the query, a segment of another article holding a link to p the document; its
  negatives are such linking segments of articles that do not link to p.
- PROP (Ma et al. 2021, "PROP"): two word sets drawn from an article's Dirichlet-smoothed unigram
  language model, their sizes from a Poisson of mean `query_length_mean` (3); the set of higher
  likelihood is preferred as a query for the article (representative words prediction).
- HARP (Ma et al. 2021, "Pre-training for ad-hoc retrieval: hyperlink is also you need") has four
  objectives; we cover two, as we read the HARP paper: RQP (representative query prediction: an
  anchor text of an article is preferred over a word set drawn from the article's language model as
  a query for it) and RDP (representative document prediction: for an anchor text as query, the
  article it links to is preferred over the article holding the anchor). QDM (query disambiguation)
  and ACM (anchor co-occurrence) are not implemented.

Negatives and losses. ICT and WLP contrast the positive with `n_negatives` documents of other
examples (the papers' in-batch negatives: a cross-encoder shares no encodings across a batch, so we
draw them per example, seeded) under LCE; PROP and HARP compare one pair under the pairwise hinge
loss max(0, 1 - s+ + s-) that PROP and HARP use. All four add MLM (`mask_prob` on every non-special
token; no anchor-aware rate, which is PHP's), weighted by `mlm_weight` as PHP's.

Deviations (also in the README): ICT and WLP are trained from the backbone, not from scratch as
the paper trains them (a from-scratch Transformer is not comparable at our budget); PROP and HARP
are trained here on our dump instead of using the released checkpoints; a small stop-word list is
left out of the language models; documents are articles lead first up to the budget, as PHP's are.
Every random choice comes from a generator seeded by (seed, method, key), so a table depends on
content and seed only.

Memory. `segments` and `links` may be scans (the asset passes them so). With `max_examples` (per
objective), each generator first chooses its keys (ICT: segments of two or more sentences; WLP: linked
articles with a lead; PROP: articles; HARP: anchored articles for RQP, anchored (source, target) pairs
for RDP) as the `max_examples` of smallest seeded hash, by streaming queries over the keys alone, then
reads only those keys' texts (and WLP's pool of linking segments, itself at most 8 x `max_examples` of
smallest hash); the language models' background counts are summed over the segments batch by batch.
What stays in memory is then set by `max_examples`, the vocabulary (the background counts) and the
set of article ids (the semi-joins), not by the number of segments or links. Without a cap every
example is built and every text is read, as before; with a cap that does not bind the table is the
same (tested).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from dagster_ir.methods.php.config import seed_of
from dagster_ir.schemas import LINKS, SEGMENTS, empty, validate

METHODS = ("ict", "wlp", "prop", "harp")
HARP_OBJECTIVES = ("rqp", "rdp")
PAIRWISE = ("prop", "harp")  # hinge loss over one pair; the others LCE over 1 + n
BASELINE_EXAMPLES = {
    "method": pl.String,  # "ict" | "wlp" | "prop" | "harp"
    "objective": pl.String,  # the method, or HARP's "rqp" / "rdp"
    "key": pl.String,  # where the example comes from (article/segment, or source->target)
    "queries": pl.List(pl.String),  # one query per candidate
    "docs": pl.List(pl.String),  # one document per candidate, the preferred one first
}
STOP_WORDS = frozenset(
    "a an and are as at be by for from has he in is it its of on or that the to was were will with".split()
)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"\w+")
_TIE_DRAWS = 10  # PROP: pairs of word sets drawn per article before giving up on a preference


@dataclass(frozen=True)
class BaselineConfig:
    """Generator settings; training settings come from PhpConfig (the same budget as PHP)."""

    n_negatives: int = 3  # ICT and WLP: documents of other examples per example
    mu: float = 1000.0  # Dirichlet prior of the document language models (PROP, HARP's RQP)
    query_length_mean: float = 3.0  # Poisson mean of a sampled word set's size (PROP, HARP's RQP)
    harp_objectives: tuple[str, ...] = HARP_OBJECTIVES
    seed: int = 42
    max_examples: int | None = None  # per objective: the examples of smallest seeded hash (None = all)

    def __post_init__(self) -> None:
        if self.n_negatives < 1:
            raise ValueError(f"BaselineConfig.n_negatives must be >= 1, got {self.n_negatives}")
        if self.max_examples is not None and self.max_examples < 1:
            raise ValueError(f"BaselineConfig.max_examples must be >= 1 or None, got {self.max_examples}")
        if self.mu <= 0 or self.query_length_mean <= 0:
            raise ValueError(
                f"BaselineConfig.mu and query_length_mean must be > 0, got {self.mu}, {self.query_length_mean}"
            )
        unknown = set(self.harp_objectives) - set(HARP_OBJECTIVES)
        if unknown or not self.harp_objectives:
            raise ValueError(
                f"BaselineConfig.harp_objectives: choose from {HARP_OBJECTIVES}, got {self.harp_objectives}"
            )


def sentences(text: str) -> list[str]:
    """The sentences of a text: split after . ! ? followed by white space."""
    return [s.strip() for s in _SENTENCE.split(text.strip()) if s.strip()]


def words(text: str) -> list[str]:
    """Lower-cased word tokens without the stop words (the language models' vocabulary)."""
    return [w for w in _WORD.findall(text.lower()) if w not in STOP_WORDS]


def build_baseline_examples(
    method: str | Sequence[str],
    segments: pl.DataFrame | pl.LazyFrame,
    links: pl.DataFrame | pl.LazyFrame,
    config: BaselineConfig,
    exclude_articles: Iterable[str] = (),
) -> pl.DataFrame:
    """BASELINE_EXAMPLES of one method (or several, concatenated in that order) over the dump's segments
    and links, without `exclude_articles`.

    `segments` and `links` may be scans; `config.max_examples` bounds what is read (module docstring).
    Several methods share one pass over the segments for the language models' background counts.
    """
    methods = [method] if isinstance(method, str) else list(method)
    for name in methods:
        if name not in METHODS:
            raise ValueError(f"unknown pre-training baseline {name!r}: choose from {METHODS}")
    segments, links = segments.lazy(), links.lazy()
    validate(segments, SEGMENTS, "segments")
    validate(links, LINKS, "wiki_links")
    excluded = pl.Series(sorted(set(exclude_articles)), dtype=pl.String).implode()
    segments = segments.filter(~pl.col("article_id").is_in(excluded))
    articles = segments.select("article_id").unique()
    links = links.filter(
        pl.col("target_id").is_not_null()
        & (pl.col("target_id") != pl.col("src_id"))
        & ~pl.col("src_id").is_in(excluded)
        & ~pl.col("target_id").is_in(excluded)
    )
    links = links.join(articles.rename({"article_id": "target_id"}), on="target_id", how="semi")
    dump = _Dump(segments, articles, links, config)
    generators = {"ict": _ict, "wlp": _wlp, "prop": _prop, "harp": _harp}
    frames = [pl.DataFrame(generators[name](dump), schema=BASELINE_EXAMPLES, orient="row") for name in methods]
    return pl.concat(frames) if frames else empty(BASELINE_EXAMPLES)


_SEGMENT = ["article_id", "segment_no"]


@dataclass(frozen=True)
class _Dump:
    """The (lazy) segments, article ids and kept links one generator reads, and its settings."""

    segments: pl.LazyFrame
    articles: pl.LazyFrame
    links: pl.LazyFrame
    config: BaselineConfig
    _background: list[Counter] = field(default_factory=list)  # counted once, on first use

    def choose(self, keys: pl.LazyFrame, columns: list[str], name: str, cap: int | None = -1) -> pl.DataFrame:
        """The distinct `columns` rows of `keys`, sorted; with a cap (default `max_examples`), the cap of
        smallest hash of (seed, name, key), by bottom-k queries over the keys alone (doubling k while
        repeated keys leave fewer than cap distinct)."""
        cap = self.config.max_examples if cap == -1 else cap
        keys = keys.select(columns)
        if cap is None:
            return _collect(keys.unique()).sort(columns)
        salt = seed_of(self.config.seed, name, "max_examples") % (1 << 63)
        hashed = keys.with_columns(_h=pl.struct(columns).hash(salt))
        take = cap
        while True:
            head = _collect(hashed.bottom_k(take, by=["_h", *columns])).sort("_h", *columns)
            distinct = head.unique(columns, keep="first", maintain_order=True)
            if distinct.height >= cap or head.height < take:
                return distinct.head(cap).drop("_h").sort(columns)
            take *= 2

    def texts(self, keys: pl.DataFrame) -> pl.DataFrame:
        """The segments (article_id, segment_no, text) of `keys` (article ids, or article ids and segments)."""
        on = [c for c in _SEGMENT if c in keys.columns]
        frame = self.segments.select(*_SEGMENT, "text").join(keys.lazy().select(on).unique(), on=on, how="semi")
        return _collect(frame).unique(_SEGMENT).sort(_SEGMENT)

    def documents(self, ids: pl.DataFrame | pl.Series) -> dict[str, str]:
        """Article texts, lead first (segments in order), as PHP's documents, of the article ids `ids`."""
        ids = ids.to_frame("article_id") if isinstance(ids, pl.Series) else ids.select("article_id")
        return _articles(self.texts(ids))

    def background(self) -> Counter:
        """Word counts of every kept segment, summed batch by batch (the language models' corpus)."""
        if not self._background:
            counts: Counter = Counter()
            for batch in self.segments.select("text").collect_batches(chunk_size=50_000):
                for text in batch["text"]:
                    counts.update(words(text or ""))
            self._background.append(counts)
        return self._background[0]


def _collect(frame: pl.LazyFrame) -> pl.DataFrame:
    return frame.collect(engine="streaming")


def _rng(config: BaselineConfig, *key: object) -> np.random.Generator:
    return np.random.default_rng(seed_of(config.seed, *key))


def _others(pool: list[tuple[str, str]], exclude: set[str], n: int, rng: np.random.Generator) -> list[str]:
    """n texts of the pool (owner article, text) whose owner is not excluded, distinct while possible.

    Draws by rejection (cheap on a large pool), falling back to filtering the pool when few qualify.
    """
    chosen: dict[int, None] = {}
    for i in rng.integers(len(pool), size=20 * n) if pool else []:
        if pool[i][0] not in exclude:
            chosen.setdefault(int(i))
            if len(chosen) == n:
                return [pool[i][1] for i in chosen]
    candidates = [text for owner, text in pool if owner not in exclude]
    if not candidates:
        return []
    if len(candidates) >= n:
        return [candidates[i] for i in rng.choice(len(candidates), size=n, replace=False)]
    order = np.concatenate([rng.permutation(len(candidates)) for _ in range(math.ceil(n / len(candidates)))])
    return [candidates[i] for i in order[:n]]


def _ict(dump: _Dump) -> list[tuple]:
    # two sentences or more: a split point ([.!?], white space, more text) as `sentences` splits
    eligible = dump.segments.filter(pl.col("text").str.contains(r"[.!?]\s+\S"))
    chosen = dump.texts(dump.choose(eligible, _SEGMENT, "ict"))
    config, drawn = dump.config, []
    for article, segment, text in chosen.select("article_id", "segment_no", "text").iter_rows():
        parts = sentences(text)
        if len(parts) < 2:
            continue
        i = int(_rng(config, "ict", article, segment).integers(len(parts)))
        drawn.append((article, segment, parts[i], " ".join(parts[:i] + parts[i + 1 :])))
    pool = [(article, context) for article, _, _, context in drawn]
    rows = []
    for article, segment, query, context in drawn:
        negatives = _others(pool, {article}, config.n_negatives, _rng(config, "ict-negatives", article, segment))
        if negatives:
            rows.append(("ict", "ict", f"{article}/{segment}", [query] * (1 + len(negatives)), [context, *negatives]))
    return rows


def _wlp(dump: _Dump) -> list[tuple]:
    config = dump.config
    linking = dump.links.select("src_id", "src_segment", "target_id").join(
        dump.segments.select(src_id="article_id", src_segment="segment_no"), on=["src_id", "src_segment"], how="semi"
    )
    leads = dump.segments.filter((pl.col("segment_no") == 1) & pl.col("text").str.contains(r"\S"))
    with_lead = linking.join(leads.select(target_id="article_id"), on="target_id", how="semi")
    targets = dump.choose(with_lead, ["target_id"], "wlp")
    sources: dict[str, list[tuple[str, int]]] = {}
    chosen = _collect(linking.join(targets.lazy(), on="target_id", how="semi").unique())
    for src, seg, target in chosen.sort("target_id", "src_id", "src_segment").iter_rows():
        sources.setdefault(target, []).append((src, seg))
    cap = config.max_examples
    pool_keys = dump.choose(
        linking.rename({"src_id": "article_id", "src_segment": "segment_no"}),
        _SEGMENT,
        "wlp-pool",
        None if cap is None else 8 * cap,
    )
    wanted = pl.concat(
        [
            pool_keys,
            chosen.select(article_id="src_id", segment_no="src_segment"),
            targets.select(article_id="target_id", segment_no=pl.lit(1, pl.Int32)),
        ],
        how="vertical_relaxed",
    )
    text_of = {(a, s): t for a, s, t in dump.texts(wanted).iter_rows()}
    pool = [(src, text_of[(src, seg)]) for src, seg in pool_keys.iter_rows()]
    rows = []
    for target, srcs in sorted(sources.items()):
        lead = sentences(text_of.get((target, 1), ""))
        if not lead:
            continue
        rng = _rng(config, "wlp", target)
        query = lead[int(rng.integers(len(lead)))]
        src, seg = srcs[int(rng.integers(len(srcs)))]
        negatives = _others(pool, {target, *(s for s, _ in srcs)}, config.n_negatives, rng)
        if negatives:
            rows.append(
                (
                    "wlp",
                    "wlp",
                    f"{src}/{seg}->{target}",
                    [query] * (1 + len(negatives)),
                    [text_of[(src, seg)], *negatives],
                )
            )
    return rows


class _LanguageModels:
    """Dirichlet-smoothed unigram models of articles: p(w|d) = (tf(w, d) + mu p(w|C)) / (|d| + mu).

    Work per draw or score is in the size of the word set (a document's tokens and the background's
    cumulative distribution are kept), not in the vocabulary's, so a full dump stays affordable. A
    document's tokens and counts are made when it is first asked for and kept until another is (the
    generators ask for one article at a time), so memory holds the texts, not every article's counts.
    """

    def __init__(self, documents: dict[str, str], mu: float, background: Counter | None = None) -> None:
        """`background`: the corpus' word counts (default: those of `documents`, when they are the corpus)."""
        self.documents = documents
        corpus = background
        if corpus is None:
            corpus = Counter()
            for text in documents.values():
                corpus.update(words(text))
        self.vocabulary = sorted(corpus)
        self.total = sum(corpus.values())
        self.corpus = corpus
        self.cumulative = np.cumsum([corpus[w] for w in self.vocabulary]) / max(self.total, 1)
        self.mu = mu
        self._held: tuple[str, list[str], Counter] | None = None

    def _model(self, doc: str) -> tuple[list[str], Counter]:
        if self._held is None or self._held[0] != doc:
            tokens = words(self.documents[doc])
            self._held = (doc, tokens, Counter(tokens))
        return self._held[1], self._held[2]

    def has_words(self, doc: str) -> bool:
        """Whether the document has a word outside the stop words."""
        return bool(self._model(doc)[0])

    def probability(self, doc: str, word: str) -> float:
        tokens, counts = self._model(doc)
        return (counts[word] + self.mu * self.corpus[word] / self.total) / (len(tokens) + self.mu)

    def sample(self, doc: str, rng: np.random.Generator, mean_length: float) -> list[str]:
        """A word set: its size from Poisson(mean_length) (at least 1), distinct words drawn from p(.|d).

        p(.|d) is the mixture of the document's tokens (weight |d| / (|d| + mu)) and the corpus model.
        """
        tokens = self._model(doc)[0]
        size = min(max(1, int(rng.poisson(mean_length))), len(self.vocabulary))
        own = len(tokens) / (len(tokens) + self.mu)
        chosen: dict[str, None] = {}
        for _ in range(100 * size):
            if tokens and rng.random() < own:
                word = tokens[int(rng.integers(len(tokens)))]
            else:
                word = self.vocabulary[
                    min(int(np.searchsorted(self.cumulative, rng.random(), side="right")), len(self.vocabulary) - 1)
                ]
            chosen.setdefault(word)
            if len(chosen) == size:
                break
        return list(chosen)

    def log_likelihood(self, doc: str, query: Iterable[str]) -> float:
        """log p(q|d) of a word list under the article's model (words outside the vocabulary: skipped)."""
        return float(sum(math.log(self.probability(doc, w)) for w in query if w in self.corpus))


def _articles(segments: pl.DataFrame) -> dict[str, str]:
    """Article texts, lead first (segments in order), as PHP's documents."""
    frame = (
        segments.sort("article_id", "segment_no")
        .group_by("article_id", maintain_order=True)
        .agg(pl.col("text").str.join(" "))
    )
    return dict(frame.iter_rows())


def _prop(dump: _Dump) -> list[tuple]:
    config = dump.config
    chosen = dump.choose(dump.segments.filter(pl.col("text").str.contains(r"\w")), ["article_id"], "prop")
    documents = dump.documents(chosen)
    models = _LanguageModels(documents, config.mu, dump.background())
    rows = []
    for article, text in documents.items():
        if not models.has_words(article):
            continue
        rng = _rng(config, "prop", article)
        for _ in range(_TIE_DRAWS):  # two sets of equal likelihood state no preference: draw again
            first, second = (models.sample(article, rng, config.query_length_mean) for _ in range(2))
            a, b = models.log_likelihood(article, first), models.log_likelihood(article, second)
            if a != b:
                better, worse = (first, second) if a > b else (second, first)
                rows.append(("prop", "prop", article, [" ".join(better), " ".join(worse)], [text, text]))
                break
    return rows


def _harp(dump: _Dump) -> list[tuple]:
    config = dump.config
    anchors = (
        dump.links.with_columns(anchor=pl.col("anchor_text").str.strip_chars())
        .filter(pl.col("anchor") != "")
        .select("src_id", "target_id", "anchor")
    )
    rows = []
    if "rqp" in config.harp_objectives:
        targets = dump.choose(anchors, ["target_id"], "harp-rqp")
        documents = dump.documents(targets["target_id"])
        models = _LanguageModels(documents, config.mu, dump.background())
        chosen = _collect(anchors.join(targets.lazy(), on="target_id", how="semi").unique())
        for target, texts in (
            chosen.sort("target_id", "src_id", "anchor")
            .group_by("target_id", maintain_order=True)
            .agg("anchor")
            .iter_rows()
        ):
            rng = _rng(config, "harp-rqp", target)
            distinct = sorted(set(texts))
            anchor = distinct[int(rng.integers(len(distinct)))]
            sampled = " ".join(models.sample(target, rng, config.query_length_mean)) if models.has_words(target) else ""
            if sampled and sampled != anchor.lower():
                rows.append(("harp", "rqp", target, [anchor, sampled], [documents[target]] * 2))
    if "rdp" in config.harp_objectives:
        held = anchors.join(dump.articles.rename({"article_id": "src_id"}), on="src_id", how="semi")
        pairs = dump.choose(held, ["src_id", "target_id"], "harp-rdp")
        chosen = _collect(held.join(pairs.lazy(), on=["src_id", "target_id"], how="semi").unique())
        documents = dump.documents(pl.concat([pairs["src_id"], pairs["target_id"]]).unique())
        for src, target, texts in (
            chosen.sort("src_id", "target_id", "anchor")
            .group_by("src_id", "target_id", maintain_order=True)
            .agg("anchor")
            .iter_rows()
        ):
            anchor = texts[int(_rng(config, "harp-rdp", src, target).integers(len(texts)))]
            rows.append(("harp", "rdp", f"{src}->{target}", [anchor, anchor], [documents[target], documents[src]]))
    return rows
