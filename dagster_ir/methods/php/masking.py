"""PHP inputs and anchor-aware masking (section 3.3).

Inputs: `[CLS] s [SEP] d_i [SEP]` (equation 1), d_i being the linked article's text, lead first
(its segments in order, joined by spaces); s keeps at most `max_query_length` tokens and d_i what
is left of `max_length` (512 in the paper profile), as fine-tuning and reranking cut a document
(`CrossEncoder.encode_pair`). Only the segments that can reach the budget are tokenised: a segment
is read while the words before it are fewer than the budget (each word is at least one token).
Masking (`mask_tokens`): the tokens of the anchor text a_i inside s (the anchors of s that link to
d_i, found through the fast tokenizer's offset mapping) are selected with `anchor_mask_prob`
(0.5), all other tokens with `mask_prob` (0.15), special tokens never; a selected token becomes
[MASK] (80%), a random token (10%) or stays (10%). The masks of an example come from a generator
seeded by (seed, epoch, example), so they do not depend on batching, process count or resuming.
With `mlm_weight` 0 (the no-MLM ablation) nothing is masked: the pairs are the plain inputs, so the
ablation's ranking loss sees the same text as a fine-tuned model does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from dagster_ir.methods.php.config import IGNORE, PhpConfig
from dagster_ir.neural.cross_encoder import CrossEncoder, Pair
from dagster_ir.schemas import LINKS, PHP_EXAMPLES, SEGMENTS, validate


def mask_tokens(
    input_ids: np.ndarray,
    special: np.ndarray,
    anchor: np.ndarray,
    rng: np.random.Generator,
    *,
    anchor_prob: float,
    other_prob: float,
    mask_id: int,
    vocab_size: int,
) -> tuple[np.ndarray, np.ndarray]:
    """(masked ids, labels): BERT masking with a higher selection rate on anchor tokens.

    Tokens are selected with `anchor_prob` where `anchor`, else `other_prob`, never where
    `special`; a selected token becomes `mask_id` (80%), a random id below `vocab_size` (10%), or
    stays (10%). Labels hold the original id of selected tokens and IGNORE elsewhere.
    """
    rate = np.where(anchor, anchor_prob, other_prob)
    selected = (rng.random(len(input_ids)) < rate) & ~special
    action = rng.random(len(input_ids))
    masked = input_ids.copy()
    masked[selected & (action < 0.8)] = mask_id
    randomised = selected & (action >= 0.8) & (action < 0.9)
    masked[randomised] = rng.integers(0, vocab_size, size=int(randomised.sum()))
    labels = np.where(selected, input_ids, IGNORE)
    return masked, labels


def anchor_token_flags(offsets: Sequence[tuple[int, int]], spans: Iterable[tuple[int, int]]) -> np.ndarray:
    """For each token (char offsets [start, end)), whether it overlaps one of the char `spans`."""
    starts = np.array([o[0] for o in offsets], dtype=np.int64)
    ends = np.array([o[1] for o in offsets], dtype=np.int64)
    flags = np.zeros(len(offsets), dtype=bool)
    for start, end in spans:
        flags |= (starts < end) & (ends > start)
    return flags


@dataclass
class _Query:
    ids: np.ndarray  # int32 token ids (arrays, not lists: a ninth of the memory)
    anchors: dict[str, np.ndarray] = field(default_factory=dict)  # linked article -> anchor flags over ids


class PhpInputs:
    """Tokenised queries (segments with anchor flags) and documents (articles, lead first) of a stage's examples."""

    def __init__(
        self,
        examples: pl.DataFrame,
        segments: pl.DataFrame | pl.LazyFrame,
        links: pl.DataFrame | pl.LazyFrame,
        model: CrossEncoder,
        config: PhpConfig,
    ) -> None:
        validate(examples, PHP_EXAMPLES, "php_examples")
        validate(segments, SEGMENTS, "segments")
        validate(links, LINKS, "wiki_links")
        self.model = model
        self.config = config
        self.examples = [
            (a, s, [p, *n])
            for a, s, p, n in examples.select("article_id", "segment_no", "pos_id", "neg_ids").iter_rows()
        ]
        self.queries = self._tokenize_queries(examples, segments, links)
        self.docs = self._tokenize_documents(examples, segments)
        tokenizer = model.tokenizer
        self.mask_id, self.vocab_size = tokenizer.mask_token_id, len(tokenizer)

    def __len__(self) -> int:
        return len(self.examples)

    def _tokenize_queries(self, examples, segments, links) -> dict[tuple[str, int], _Query]:
        keys = examples.select("article_id", "segment_no").unique()
        texts = (
            segments.lazy()
            .join(keys.lazy(), on=["article_id", "segment_no"], how="semi")
            .select("article_id", "segment_no", "text")
            .collect()
        )
        _require(keys, texts, ["article_id", "segment_no"], "segments of the examples")
        encoded = self.model.tokenizer(texts["text"].to_list(), add_special_tokens=False, return_offsets_mapping=True)
        spans = (
            links.lazy()
            .join(keys.lazy(), left_on=["src_id", "src_segment"], right_on=["article_id", "segment_no"], how="semi")
            .filter(pl.col("target_id").is_not_null())
            .group_by("src_id", "src_segment", "target_id")
            .agg(pl.struct("anchor_start", "anchor_end"))
            .collect()
        )
        by_segment: dict[tuple[str, int], dict[str, list[tuple[int, int]]]] = {}
        for src, seg, target, pairs in spans.iter_rows():
            by_segment.setdefault((src, seg), {})[target] = [(p["anchor_start"], p["anchor_end"]) for p in pairs]
        limit = self.model.max_query_length
        queries = {}
        for (article, segment), ids, offsets in zip(
            texts.select("article_id", "segment_no").iter_rows(),
            encoded["input_ids"],
            encoded["offset_mapping"],
            strict=True,
        ):
            targets = by_segment.get((article, segment), {})
            anchors = {t: anchor_token_flags(offsets, s)[:limit] for t, s in targets.items()}
            queries[(article, segment)] = _Query(np.asarray(ids[:limit], dtype=np.int32), anchors)
        return queries

    def _tokenize_documents(self, examples, segments) -> dict[str, np.ndarray]:
        """Token ids of each linked article: its segments in order (lead first) up to the budget."""
        ids = pl.concat([examples["pos_id"], examples["neg_ids"].explode()]).unique().to_frame("article_id")
        room = self.model.max_length - 3
        texts = (
            segments.lazy()
            .join(ids.lazy(), on="article_id", how="semi")
            .unique(["article_id", "segment_no"])
            .sort("article_id", "segment_no")
            .filter((pl.col("n_words").cum_sum() - pl.col("n_words")).over("article_id") < room)
            .group_by("article_id")
            .agg(text=pl.col("text").str.join(" "))
            .collect()
        )
        _require(ids, texts, ["article_id"], "linked articles (their segments)")
        tokens = [np.asarray(t[:room], dtype=np.int32) for t in self.model.tokenize(texts["text"].to_list())]
        return dict(zip(texts["article_id"], tokens, strict=True))

    def example(self, index: int, rng: np.random.Generator) -> tuple[list[Pair], list[np.ndarray]]:
        """The 1 + n masked pairs of example `index` (positive first) and their MLM labels."""
        article, segment, docs = self.examples[index]
        query = self.queries[(article, segment)]
        pairs, labels = [], []
        for doc in docs:
            pair = self.model.encode_pair(query.ids.tolist(), self.docs[doc].tolist())
            ids = np.asarray(pair.input_ids)
            special = np.zeros(len(ids), dtype=bool)
            special[[0, len(query.ids) + 1, len(ids) - 1]] = True
            if self.config.mlm_weight == 0:  # no MLM: the inputs stay as they are (nothing to predict)
                pairs.append(pair)
                labels.append(np.full(len(ids), IGNORE, dtype=np.int64))
                continue
            anchor = np.zeros(len(ids), dtype=bool)
            if doc in query.anchors:
                anchor[1 : 1 + len(query.ids)] = query.anchors[doc]
            masked, label = mask_tokens(
                ids,
                special,
                anchor,
                rng,
                anchor_prob=self.config.anchor_mask_prob,
                other_prob=self.config.mask_prob,
                mask_id=self.mask_id,
                vocab_size=self.vocab_size,
            )
            pairs.append(Pair(masked.tolist(), pair.token_type_ids))
            labels.append(label)
        return pairs, labels


def _require(wanted: pl.DataFrame, found: pl.DataFrame, keys: list[str], what: str) -> None:
    missing = wanted.join(found, on=keys, how="anti")
    if missing.height:
        raise ValueError(f"PHP: {missing.height} {what} not found in wiki_articles, e.g. {missing.head(3).rows()}")
