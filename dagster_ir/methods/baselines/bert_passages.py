"""BERT-FirstP and BERT-MaxP (Dai and Callan, SIGIR 2019): a cross-encoder over a document's passages.

A document (title and text, split on white space) is cut into passages of `passage_words` words
with a stride of `stride` words (paper: 150 and 75), at most `max_passages` of them; each is
encoded as `[CLS] query [SEP] passage [SEP]` (the cross-encoder's `encode_pair`, cut to its
max_length). FirstP scores the first passage only, MaxP the best passage (max over the real
passages; padded passage slots never win). Training follows the paper: every passage of a
relevant document counts as relevant, so a training pair scores one passage of the positive
(MaxP: drawn uniformly, FirstP: the first) against one of each negative, with softmax
cross-entropy (the shared LCE loss). The backbone is the cross-encoder's (demo: the bundled
MiniLM; paper: bert-base-uncased).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from dagster_ir.neural.cross_encoder import CrossEncoder


@dataclass(frozen=True)
class PassageConfig:
    passage_words: int = 150  # Dai and Callan: 150-word passages
    stride: int = 75  # ... with a stride of 75 words
    max_passages: int = 16
    aggregation: str = "max"  # "max" (MaxP) or "first" (FirstP)

    def __post_init__(self) -> None:
        if self.passage_words < 1 or self.stride < 1 or self.max_passages < 1:
            raise ValueError("PassageConfig: passage_words, stride and max_passages must be >= 1")
        if self.aggregation not in ("max", "first"):
            raise ValueError(f"PassageConfig.aggregation must be 'max' or 'first', got {self.aggregation!r}")


def split_passages(text: str, passage_words: int, stride: int, max_passages: int) -> list[str]:
    """Windows of `passage_words` words every `stride` words (the last one reaching the end), at most `max_passages`."""
    words = text.split()
    if len(words) <= passage_words:
        return [" ".join(words)]
    starts = list(range(0, len(words) - passage_words + 1, stride))
    if starts[-1] + passage_words < len(words):
        starts.append(starts[-1] + stride)
    return [" ".join(words[s : s + passage_words]) for s in starts[:max_passages]]


class PassageEncoder:
    """(query_id, doc_id) pairs -> input_ids/attention_mask/token_type_ids (B, P, L), segment, passage_mask.

    `segment` is 1 on query tokens, 2 on passage tokens, 0 on [CLS], [SEP] and padding (CEDR reads it).
    """

    def __init__(self, cross_encoder: CrossEncoder, config: PassageConfig) -> None:
        self.cross_encoder, self.config = cross_encoder, config
        self.queries: dict[str, list[int]] = {}
        self.docs: dict[str, list[list[int]]] = {}
        self.sample_passage = False  # training draws one passage per document (MaxP) instead of all
        self.rng = np.random.default_rng(0)

    def add_texts(self, queries: Mapping[str, str], docs: Mapping[str, str]) -> None:
        tokenize, c = self.cross_encoder.tokenize, self.config
        limit = 1 if c.aggregation == "first" else c.max_passages
        for query_id, ids in zip(queries, tokenize(list(queries.values()))):
            self.queries[query_id] = ids
        for doc_id, text in docs.items():
            self.docs[doc_id] = tokenize(split_passages(text, c.passage_words, c.stride, limit))

    def batch(self, pairs: Sequence[tuple[str, str]]) -> dict[str, torch.Tensor]:
        encoded = []
        for query_id, doc_id in pairs:
            if query_id not in self.queries or doc_id not in self.docs:
                raise KeyError(f"PassageEncoder: {query_id!r} or {doc_id!r} was not added (add_texts)")
            passages = self.docs[doc_id]
            if self.sample_passage and len(passages) > 1:
                passages = [passages[int(self.rng.integers(len(passages)))]]
            encoded.append([self.cross_encoder.encode_pair(self.queries[query_id], p) for p in passages])
        width = max(len(p) for row in encoded for p in row)
        count = max(len(row) for row in encoded)
        shape = (len(pairs), count, width)
        ids = torch.full(shape, self.cross_encoder.tokenizer.pad_token_id, dtype=torch.long)
        types, mask, segment = (
            torch.zeros(shape, dtype=torch.long),
            torch.zeros(shape, dtype=torch.long),
            torch.zeros(shape, dtype=torch.long),
        )
        passage_mask = torch.zeros(shape[:2], dtype=torch.bool)
        for b, row in enumerate(encoded):
            for p, pair in enumerate(row):
                n = len(pair)
                ids[b, p, :n] = torch.tensor(pair.input_ids)
                types[b, p, :n] = torch.tensor(pair.token_type_ids)
                mask[b, p, :n] = 1
                query_length = pair.token_type_ids.index(1) - 2 if 1 in pair.token_type_ids else n - 2
                segment[b, p, 1 : 1 + query_length] = 1
                segment[b, p, 2 + query_length : n - 1] = 2
                passage_mask[b, p] = True
        return {
            "input_ids": ids,
            "attention_mask": mask,
            "token_type_ids": types,
            "segment": segment,
            "passage_mask": passage_mask,
        }


def aggregate_passages(scores: torch.Tensor, passage_mask: torch.Tensor, aggregation: str) -> torch.Tensor:
    """(B,) from passage scores (B, P): the first passage's, or the max over real passages."""
    if aggregation == "first":
        return scores[:, 0]
    return scores.masked_fill(~passage_mask, torch.finfo(scores.dtype).min).max(dim=1).values


class BertPassages(nn.Module):
    """FirstP / MaxP over a `CrossEncoder` (its backbone and score head)."""

    def __init__(self, cross_encoder: CrossEncoder, config: PassageConfig) -> None:
        super().__init__()
        self.config = config
        self.cross_encoder = cross_encoder

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        b, p, length = batch["input_ids"].shape
        flat = {k: batch[k].reshape(b * p, length) for k in ("input_ids", "attention_mask", "token_type_ids")}
        real = batch["passage_mask"].reshape(-1)
        scores = torch.zeros(b * p, device=flat["input_ids"].device)
        scores = scores.masked_scatter(real, self.cross_encoder(**{k: v[real] for k, v in flat.items()}).float())
        return aggregate_passages(scores.reshape(b, p), batch["passage_mask"], self.config.aggregation)
