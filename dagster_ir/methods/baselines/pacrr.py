"""PACRR (Hui et al., EMNLP 2017) and Co-PACRR (Hui et al., WSDM 2018): position-aware n-gram matching.

PACRR. The cosine matrix of the query's first Lq terms and the document's first Ld words; for
each n-gram size n = 2..`max_ngram` (paper: l_g = 3) a 2-D convolution n x n with `filters`
kernels (paper: n_f = 32) and ReLU, max-pooled over the filters; size 1 is the matrix itself.
Along the document each query term keeps its `kmax` strongest signals per size (paper: n_s = 2),
and its normalised IDF (softmax over the real query terms) is appended. The per-term signals
are combined over the query by two dense layers of `combine` units with ReLU (Capreolus'
`combine: 32`; the 2017 paper combines with an LSTM or dense layers, Co-PACRR with dense layers).
Padded document positions are zeroed before k-max pooling and padded query terms' signals are
zero, so padding adds no evidence. Loss: softmax cross-entropy over one positive and the
negatives (both papers).

Co-PACRR adds (Hui et al. 2018, section 3): a context vector per document position, the mean of
the real word vectors within `context_window` / 2 words either side of it (paper: w_c = 4), whose cosine
with the mean query vector (querysim) follows every k-max value taken at that position; cascade
k-max pooling, each query term's top `kmax` also over the first 25%, 50% and 75% of the document
(paper: c = [25%, 50%, 75%, 100%]); and, while training, the query terms' signals shuffled before
the combination (so the dense layers cannot learn term positions). Disambiguation by a
query-term context (the paper's "qcontext" variant) is left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from dagster_ir.methods.baselines.inputs import cosine_matrix, frozen_embedding, pair_mask


@dataclass(frozen=True)
class PACRRConfig:
    query_words: int = 4  # Lq: the combination layers read a fixed number of terms
    max_ngram: int = 3  # l_g
    filters: int = 32  # n_f
    kmax: int = 2  # n_s
    combine: int = 32
    context_window: int = 0  # Co-PACRR: w_c (4); 0 = PACRR
    cascade: tuple[float, ...] = (1.0,)  # Co-PACRR: (0.25, 0.5, 0.75, 1.0)
    shuffle: bool = False  # Co-PACRR: shuffle query terms while training


COPACRR = dict(context_window=4, cascade=(0.25, 0.5, 0.75, 1.0), shuffle=True)


def kmax_positions(signal: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The top `k` values along the last dim (zero-padded when shorter) and their positions."""
    if signal.shape[-1] < k:
        signal = nn.functional.pad(signal, (0, k - signal.shape[-1]))
    values, index = signal.topk(k, dim=-1)
    return values, index


def context_similarity(query: torch.Tensor, doc: torch.Tensor, embedding: nn.Embedding, window: int) -> torch.Tensor:
    """querysim (B, Ld): cos(mean query vector, mean of the real word vectors within `window` of each position)."""
    q = embedding(query).sum(dim=1) / (query > 0).sum(dim=1, keepdim=True).clamp(min=1)
    d = embedding(doc).transpose(1, 2)  # (B, dim, Ld)
    real = (doc > 0).float().unsqueeze(1)
    width = 2 * (window // 2) + 1
    summed = nn.functional.avg_pool1d(d, width, stride=1, padding=width // 2, count_include_pad=True) * width
    counts = nn.functional.avg_pool1d(real, width, stride=1, padding=width // 2, count_include_pad=True) * width
    context = (summed / counts.clamp(min=1)).transpose(1, 2)
    cos = torch.nn.functional.cosine_similarity(context, q.unsqueeze(1), dim=-1)
    return cos * real.squeeze(1)


class PACRR(nn.Module):
    def __init__(self, vectors, config: PACRRConfig = PACRRConfig()) -> None:
        super().__init__()
        self.config = config
        self.embedding = frozen_embedding(vectors)
        self.convs = nn.ModuleList(nn.Conv2d(1, config.filters, n) for n in range(2, config.max_ngram + 1))
        per_value = 2 if config.context_window else 1
        per_term = config.max_ngram * config.kmax * len(config.cascade) * per_value + 1
        self.combine = nn.Sequential(
            nn.Linear(config.query_words * per_term, config.combine),
            nn.ReLU(),
            nn.Linear(config.combine, config.combine),
            nn.ReLU(),
            nn.Linear(config.combine, 1),
        )

    def signals(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Per query term: k-max signals per n-gram size and cascade level (with querysim), then IDF (B, Lq, F)."""
        query, doc = batch["query"], batch["doc"]
        if query.shape[1] != self.config.query_words:
            raise ValueError(f"PACRR: batch has {query.shape[1]} query terms, the model {self.config.query_words}")
        mask = pair_mask(query, doc)
        similarity = cosine_matrix(query, doc, self.embedding) * mask
        maps = [similarity]
        for n, conv in enumerate(self.convs, start=2):
            padded = nn.functional.pad(similarity.unsqueeze(1), (0, n - 1, 0, n - 1))
            maps.append(torch.relu(conv(padded)).max(dim=1).values * mask)
        querysim = (
            context_similarity(query, doc, self.embedding, self.config.context_window)
            if self.config.context_window
            else None
        )
        length = doc.shape[1]
        features = []
        for level in self.config.cascade:
            end = max(1, math.ceil(level * length))
            for signal in maps:
                values, index = kmax_positions(signal[:, :, :end], self.config.kmax)
                features.append(values)
                if querysim is not None:
                    features.append(
                        querysim.unsqueeze(1).expand(-1, query.shape[1], -1).gather(2, index.clamp(max=end - 1))
                    )
        real = query > 0
        logits = batch["query_idf"].masked_fill(~real, torch.finfo(similarity.dtype).min)
        idf = (torch.softmax(logits, dim=1) * real).unsqueeze(-1)
        return torch.cat([*features, idf], dim=-1) * real.unsqueeze(-1)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        signals = self.signals(batch)
        if self.config.shuffle and self.training:
            signals = signals[:, torch.randperm(signals.shape[1], device=signals.device)]
        return self.combine(signals.flatten(1)).squeeze(-1)


def copacrr(vectors, config: PACRRConfig = PACRRConfig()) -> PACRR:
    """Co-PACRR: PACRR with context, cascade and shuffling (`COPACRR`)."""
    from dataclasses import replace

    return PACRR(vectors, replace(config, **COPACRR))
