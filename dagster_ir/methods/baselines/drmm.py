"""DRMM (Guo et al., CIKM 2016): matching histograms, a feed-forward matching network, IDF term gating.

For each query term q_i the cosine similarities with the document's words are counted in a
histogram of `bins` bins (paper: 30; Capreolus: 29 plus the exact-match bin, as here): 29 equal
bins over [-1, 1) and one bin for exact matches (similarity 1). The counts are log-scaled
(LCH, the paper's best: log(1 + count), so an empty bin is 0; the paper writes log(count)). The
matching network maps a histogram through 30 -> 5 -> 1 with tanh (paper section 4.2: one hidden
layer of 5 nodes), and the term gating network weighs the query terms by softmax_i(w * idf_i)
over the real query terms (DRMM_LCH×IDF). Padded document words are never counted; padded query
terms get gate 0. Word2vec vectors stay fixed (the paper's are pre-trained and fixed; the histogram
has no gradient towards them anyway). Training: pairwise hinge loss, margin 1 (the paper's).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from dagster_ir.methods.baselines.inputs import cosine_matrix, frozen_embedding, pair_mask

EXACT = 1.0 - 1e-5  # a similarity at or above this is an exact match


@dataclass(frozen=True)
class DRMMConfig:
    bins: int = 30  # 29 over [-1, 1) + 1 exact-match bin (Guo et al.: 30 bins)
    hidden: int = 5  # Guo et al.: 30 -> 5 -> 1


def matching_histogram(similarity: torch.Tensor, mask: torch.Tensor, bins: int) -> torch.Tensor:
    """LCH (B, Lq, bins): log(1 + count) of real document words per similarity bin, the last bin exact matches."""
    width = 2.0 / (bins - 1)
    index = ((similarity + 1.0) / width).floor().clamp(0, bins - 2).long()
    index = torch.where(similarity >= EXACT, torch.full_like(index, bins - 1), index)
    counts = torch.zeros(*similarity.shape[:2], bins, dtype=similarity.dtype, device=similarity.device)
    counts.scatter_add_(2, index, mask)
    return torch.log1p(counts)


def idf_gates(query_idf: torch.Tensor, query_mask: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """softmax_i(weight * idf_i) over real query terms; 0 on padding (B, Lq)."""
    logits = (weight * query_idf).masked_fill(~query_mask, torch.finfo(query_idf.dtype).min)
    return torch.softmax(logits, dim=1) * query_mask


class DRMM(nn.Module):
    def __init__(self, vectors, config: DRMMConfig = DRMMConfig()) -> None:
        super().__init__()
        self.config = config
        self.embedding = frozen_embedding(vectors)
        self.matching = nn.Sequential(
            nn.Linear(config.bins, config.hidden), nn.Tanh(), nn.Linear(config.hidden, 1), nn.Tanh()
        )
        self.gate = nn.Parameter(torch.ones(()))

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        query, doc = batch["query"], batch["doc"]
        with torch.no_grad():
            histogram = matching_histogram(
                cosine_matrix(query, doc, self.embedding), pair_mask(query, doc), self.config.bins
            )
        per_term = self.matching(histogram).squeeze(-1)
        return (idf_gates(batch["query_idf"], query > 0, self.gate) * per_term).sum(dim=1)
