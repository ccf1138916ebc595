"""MatchPyramid (Pang et al., AAAI 2016; on ad-hoc retrieval: Pang et al., Neu-IR 2016).

The query-document matching matrix (cosine of word2vec vectors; the ad-hoc study compares
indicator, dot, cosine and Gaussian interactions) is read as an image: one 2-D convolution
(`kernel` x `kernel`, `filters` kernels, ReLU), dynamic max pooling to a fixed `pool` grid (the
ad-hoc study's pooling size 3 x 10), and an MLP (hidden `hidden`, ReLU) to the score. Cells of
padded query terms or document words are zeroed after the convolution (ReLU's floor), so padding
adds no signal; pooling runs over the fixed padded grid (`WordEncoder`'s lengths) rather than each
pair's real lengths as the authors' dynamic pooling does. Not in the papers, chosen small for the
demo: 3 x 3 kernels, 8 filters, hidden 32 (MatchZoo's defaults are of that size). Pairwise hinge
loss, margin 1 (the ad-hoc study's).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from dagster_ir.methods.baselines.inputs import cosine_matrix, frozen_embedding, pair_mask


@dataclass(frozen=True)
class MatchPyramidConfig:
    kernel: int = 3
    filters: int = 8
    pool: tuple[int, int] = (3, 10)  # Pang et al. 2016 (ad-hoc study): 3 x 10
    hidden: int = 32


class MatchPyramid(nn.Module):
    def __init__(self, vectors, config: MatchPyramidConfig = MatchPyramidConfig()) -> None:
        super().__init__()
        self.config = config
        self.embedding = frozen_embedding(vectors)
        self.conv = nn.Conv2d(1, config.filters, config.kernel, padding="same")
        self.pool = nn.AdaptiveMaxPool2d(config.pool)
        self.mlp = nn.Sequential(
            nn.Linear(config.filters * config.pool[0] * config.pool[1], config.hidden),
            nn.ReLU(),
            nn.Linear(config.hidden, 1),
        )

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        query, doc = batch["query"], batch["doc"]
        mask = pair_mask(query, doc)
        image = cosine_matrix(query, doc, self.embedding).unsqueeze(1)
        features = torch.relu(self.conv(image)) * mask.unsqueeze(1)
        return self.mlp(self.pool(features).flatten(1)).squeeze(-1)
