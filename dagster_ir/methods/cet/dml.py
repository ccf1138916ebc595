"""DML, dynamic multi-granularity learning (Zhang and Yang, CIKM 2021): the reference baseline of CET's Table 1.

The CET paper trains BERT_DML "with all parameters as in Zhang and Yang 2021, except that only one
negative is sampled for each positive" and says no more. We could read only the DML paper's
abstract (CIKM 2021, pp. 3642-3646; no public code was found), so the formulas below are our
reading of its two parts, not a transcription:

* **Dynamic weights**: "by introducing a Gaussian distribution into traditional loss functions, the
  weights of different documents change dynamically according to the prediction probability, to
  avoid the impact of unlabelled positive documents". Our reading: a negative d_j's loss term is
  weighted by a Gaussian of the model's current probability that d_j is relevant,

      g(p) = exp(-(p - mu)^2 / (2 sigma^2)),   mu = 0,

  which is 1 for a negative the model already rejects (p ~ 0) and falls as the model comes to
  believe the negative relevant (a likely unlabelled positive), so false negatives pull less. The
  weight is computed from the current forward pass and detached (it changes the loss's weighting,
  not its gradient's direction) - as CET's own weights are.
* **Multiple granularities**: "both document-granularity and instance-granularity are considered,
  to balance relative relations and absolute scores". Our reading, with one negative per positive:
  the document (relative) term is the pairwise softmax loss -log sigma(s_i - s_j), with d_j's
  probability p_doc = sigma(s_j - s_i) (its share of the pair's softmax); the instance (absolute)
  term is the pointwise binary cross-entropy -log sigma(s_i) - log(1 - sigma(s_j)), with d_j's
  probability p_ins = sigma(s_j). Each term's negative part carries its own Gaussian weight:

      L = g(p_doc) * -log sigma(s_i - s_j)  +  lambda * ( -log sigma(s_i) - g(p_ins) * log(1 - sigma(s_j)) )

  summed over a query's pairs and averaged over the batch's queries, like every loss of the lab.

`DmlConfig` holds sigma (0.5) and lambda (1.0); the DML paper's exact values were not available to
us, so these are our choice, stated here and in the README's deviations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class DmlConfig:
    """DML's Gaussian width sigma (on the probability scale, centre 0) and instance-term weight lambda."""

    sigma: float = 0.5
    instance_weight: float = 1.0

    def __post_init__(self) -> None:
        if not self.sigma > 0 or not math.isfinite(self.sigma):
            raise ValueError(f"DmlConfig.sigma must be finite and > 0, got {self.sigma}")
        if not self.instance_weight >= 0 or not math.isfinite(self.instance_weight):
            raise ValueError(f"DmlConfig.instance_weight must be finite and >= 0, got {self.instance_weight}")


def gaussian_weight(probability: torch.Tensor, sigma: float) -> torch.Tensor:
    """exp(-p^2 / (2 sigma^2)), detached: 1 for a confidently rejected negative, smaller as p grows."""
    p = probability.detach().float()
    return torch.exp(-(p**2) / (2 * sigma**2))


@dataclass(frozen=True)
class DmlLosses:
    """The loss, its two granularities and the (detached) weights."""

    loss: torch.Tensor
    document: torch.Tensor
    instance: torch.Tensor
    w_document: torch.Tensor
    w_instance: torch.Tensor


def dml_losses(
    pos: torch.Tensor, neg: torch.Tensor, query_index: torch.Tensor, n_queries: int, config: DmlConfig = DmlConfig()
) -> DmlLosses:
    """DML's loss over (positive, negative) score pairs; see the module docstring."""
    pos, neg = pos.float(), neg.float()
    w_document = gaussian_weight(torch.sigmoid(neg - pos), config.sigma)
    w_instance = gaussian_weight(torch.sigmoid(neg), config.sigma)
    document = w_document * F.softplus(neg - pos)  # -log sigma(s_i - s_j)
    instance = F.softplus(-pos) + w_instance * F.softplus(neg)  # -log sigma(s_i) - w log(1 - sigma(s_j))
    per_pair = document + config.instance_weight * instance

    def mean(values: torch.Tensor) -> torch.Tensor:
        sums = torch.zeros(n_queries, dtype=values.dtype, device=values.device).index_add(0, query_index, values)
        return sums.mean()

    return DmlLosses(mean(per_pair), mean(document), mean(instance), w_document, w_instance)
