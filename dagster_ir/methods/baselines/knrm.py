"""KNRM (Xiong et al., SIGIR 2017) and Conv-KNRM (Dai et al., WSDM 2018): kernel pooling.

Kernel pooling (Xiong et al., eqs 3-5): for a translation matrix M (cosines of query terms and
document words), K_k(M_i) = sum_j exp(-(M_ij - mu_k)^2 / (2 sigma_k^2)) over the real document
words, and phi_k = sum_i log(max(K_k(M_i), 1e-10)) over the real query terms (the clamp as in
the authors' code and Capreolus), scaled by 0.01 as the authors' released code does (`log_scale`), which keeps
the initial scores small. Eleven kernels: mu = 1.0 with sigma 1e-3 (exact match) and
mu = -0.9, -0.7, ..., 0.9 with sigma 0.1 (paper section 4). The score is w . phi + b: the
paper's eq 6 wraps it in tanh, which the log(1e-10) floor of absent kernels saturates at the start
of training (Capreolus' default, `scoretanh: False`, leaves it out too; `score_tanh` puts it back).
KNRM trains its embeddings end to end, we keep the word2vec vectors fixed (Capreolus'
default, `finetune: False`) because the demo collections are far too small to learn them.

Conv-KNRM (Dai et al., section 3): a convolution over the (fixed) word vectors for each n-gram
size h = 1, 2, 3 with 128 filters and ReLU gives n-gram vectors; every pair of sizes (cross-match,
9 matrices) gets a cosine matrix over the real n-grams and kernel pooling; the 9 x 11 features
feed w . phi + b (tanh optional, as for KNRM). An n-gram is real when all its words are. Training for both: pairwise
hinge loss, margin 1 (both papers).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from dagster_ir.methods.baselines.inputs import cosine_matrix, frozen_embedding, pair_mask

MUS = (1.0, 0.9, 0.7, 0.5, 0.3, 0.1, -0.1, -0.3, -0.5, -0.7, -0.9)  # Xiong et al.: 11 kernels
SIGMAS = (1e-3,) + (0.1,) * 10


@dataclass(frozen=True)
class KNRMConfig:
    mus: tuple[float, ...] = MUS
    sigmas: tuple[float, ...] = SIGMAS
    score_tanh: bool = False


@dataclass(frozen=True)
class ConvKNRMConfig:
    mus: tuple[float, ...] = MUS
    sigmas: tuple[float, ...] = SIGMAS
    max_ngram: int = 3  # Dai et al.: uni-, bi- and trigrams
    filters: int = 128  # Dai et al.: 128
    score_tanh: bool = False


def kernel_pooling(
    similarity: torch.Tensor, mask: torch.Tensor, mus: torch.Tensor, sigmas: torch.Tensor
) -> torch.Tensor:
    """phi (B, K): per kernel, the sum over real query terms of log soft-TF over real document words.

    `mask` (B, Lq, Ld) is 1 where both sides are real; a query row with no real word adds nothing.
    """
    values = torch.exp(-((similarity.unsqueeze(-1) - mus) ** 2) / (2 * sigmas**2)) * mask.unsqueeze(-1)
    soft_tf = values.sum(dim=2)  # (B, Lq, K)
    real_term = (mask.sum(dim=2) > 0).unsqueeze(-1).to(similarity.dtype)
    return (torch.log(soft_tf.clamp(min=1e-10)) * real_term).sum(dim=1)


class KernelPool(nn.Module):
    def __init__(self, mus, sigmas, log_scale: float = 0.01) -> None:
        super().__init__()
        self.log_scale = log_scale
        if len(mus) != len(sigmas):
            raise ValueError(f"kernel pooling: {len(mus)} mus for {len(sigmas)} sigmas")
        self.register_buffer("mus", torch.tensor(mus, dtype=torch.float32))
        self.register_buffer("sigmas", torch.tensor(sigmas, dtype=torch.float32))

    def forward(self, similarity: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return kernel_pooling(similarity, mask, self.mus, self.sigmas) * self.log_scale


class KNRM(nn.Module):
    def __init__(self, vectors, config: KNRMConfig = KNRMConfig()) -> None:
        super().__init__()
        self.config = config
        self.embedding = frozen_embedding(vectors)
        self.pool = KernelPool(config.mus, config.sigmas)
        self.dense = nn.Linear(len(config.mus), 1)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        query, doc = batch["query"], batch["doc"]
        phi = self.pool(cosine_matrix(query, doc, self.embedding), pair_mask(query, doc))
        return _score(self.dense(phi), self.config.score_tanh)


class ConvKNRM(nn.Module):
    def __init__(self, vectors, config: ConvKNRMConfig = ConvKNRMConfig()) -> None:
        super().__init__()
        self.config = config
        self.embedding = frozen_embedding(vectors)
        dim = self.embedding.weight.shape[1]
        self.convs = nn.ModuleList(nn.Conv1d(dim, config.filters, h) for h in range(1, config.max_ngram + 1))
        self.pool = KernelPool(config.mus, config.sigmas)
        self.dense = nn.Linear(len(config.mus) * config.max_ngram**2, 1)

    def ngrams(self, ids: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Unit n-gram vectors (B, L, F) per size (right-padded to L) and their masks (B, L) of real n-grams."""
        embedded = self.embedding(ids).transpose(1, 2)  # (B, dim, L)
        real = (ids > 0).float()
        vectors, masks = [], []
        for h, conv in enumerate(self.convs, start=1):
            out = torch.relu(conv(nn.functional.pad(embedded, (0, h - 1)))).transpose(1, 2)  # (B, L, F)
            whole = nn.functional.pad(real, (0, h - 1)).unfold(1, h, 1).prod(dim=-1)  # all h words real
            vectors.append(nn.functional.normalize(out, dim=-1) * whole.unsqueeze(-1))
            masks.append(whole)
        return vectors, masks

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        q_vectors, q_masks = self.ngrams(batch["query"])
        d_vectors, d_masks = self.ngrams(batch["doc"])
        features = []
        for qv, qm in zip(q_vectors, q_masks):
            for dv, dm in zip(d_vectors, d_masks):
                features.append(self.pool(torch.bmm(qv, dv.transpose(1, 2)), qm.unsqueeze(2) * dm.unsqueeze(1)))
        return _score(self.dense(torch.cat(features, dim=1)), self.config.score_tanh)


def _score(value: torch.Tensor, tanh: bool) -> torch.Tensor:
    return (torch.tanh(value) if tanh else value).squeeze(-1)
