"""GHRM: graph-based hierarchical relevance matching (Yu et al., WWW 2021), batched over graphs.

A query-document pair is a graph of the document's unique words whose node features are the
cosine similarities with the M query terms (`inputs`). The model runs T blocks over it:

* GNN (eqs 4-8): a = Ã W_a H; z = σ(W_z a + U_z H + b_z); r = σ(W_r a + U_r H + b_r);
  H~ = tanh(W_h a + U_h (r ⊙ H) + b_h); Ĥ = H~ ⊙ z + H ⊙ (1 - z). The state keeps one column per
  query term (a ∈ R^M, as in the paper), so the readout can take top values per term.
* RSAP (eqs 9-13): node scores P = tanh(GNN(Ĥ W_p)) with a one-dimensional GNN of the same form;
  each graph keeps its top ⌈m·rate⌉ real nodes, the adjacency is restricted to them (not
  renormalised) and the kept features are multiplied by their scores. The paper does not say how P
  is squashed; tanh follows SAGPool, which it builds on, and the authors' code. (Their code uses
  ReLU where eq. 7 has tanh; we follow the paper.)
* Readout (eq 14): the top k values of every query-term column over the real nodes (zeros where a
  graph has fewer than k nodes).

signal_0 is the readout of S itself; signals 0..T are concatenated per query term (a k(T+1) vector)
and rel(q, d) = Σ_j g_j f(SIGNAL_j) with f a weight-shared MLP (hidden layers 64 and 32 with ReLU, as
the authors' code; the paper gives no sizes) and g = softmax(c · idf) over the real query terms, c
trained (eqs 15-17). Training uses the pairwise hinge loss (eq 18).

Every graph of a batch is padded to the largest (masks in `GraphBatch`); the forward pass has no
Python loop over graphs or nodes, and padded nodes or query terms are never selected by pooling or
readout. Ablations are configuration: GHRM-nopool (`pooling=False`: no RSAP, every node kept with
equal weight, the graph fixed) and GHRM-soft (`rate=1.0`: every node kept, scaled by its score).
"""

from __future__ import annotations

import torch
from torch import nn

from dagster_ir.methods.ghrm.config import (  # noqa: F401 (the configs' old home)
    PROFILES,
    VARIANTS,
    GHRMConfig,
    ModelConfig,
    TrainingConfig,
    profile,
    variant_config,
)
from dagster_ir.methods.ghrm.inputs import GraphBatch

# --- model --------------------------------------------------------------------------------------


class GatedGraphLayer(nn.Module):
    """The GRU-like GNN update of eqs 4-8 on `dim`-dimensional node states.

    W_z, W_r, W_h (with the biases b_z, b_r, b_h) are stacked into one linear map of the message, and
    U_z, U_r into one of the state, as in common GRU implementations.
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.w_a = nn.Linear(dim, dim, bias=False)
        self.w_zrh = nn.Linear(dim, 3 * dim)
        self.u_zr = nn.Linear(dim, 2 * dim, bias=False)
        self.u_h = nn.Linear(dim, dim, bias=False)

    def forward(self, h: torch.Tensor, adjacency: torch.Tensor) -> torch.Tensor:
        """New states (B, n, dim) from states `h` (B, n, dim) and the normalised adjacency (B, n, n)."""
        a = torch.bmm(adjacency, self.w_a(h))
        from_a_z, from_a_r, from_a_h = self.w_zrh(a).chunk(3, dim=-1)
        from_h_z, from_h_r = self.u_zr(h).chunk(2, dim=-1)
        z = torch.sigmoid(from_a_z + from_h_z)
        r = torch.sigmoid(from_a_r + from_h_r)
        candidate = torch.tanh(from_a_h + self.u_h(r * h))
        return candidate * z + h * (1.0 - z)


def kmax_readout(h: torch.Tensor, node_mask: torch.Tensor, k: int) -> torch.Tensor:
    """Top `k` values of each column of `h` (B, n, M) over real nodes, descending: (B, k, M).

    Where a graph has fewer than k real nodes the missing values are 0; padded nodes never count.
    """
    masked = h.masked_fill(~node_mask.unsqueeze(-1), float("-inf"))
    if masked.shape[1] < k:
        filler = masked.new_full((masked.shape[0], k - masked.shape[1], masked.shape[2]), float("-inf"))
        masked = torch.cat([masked, filler], dim=1)
    values = masked.topk(k, dim=1).values
    return torch.where(torch.isfinite(values), values, torch.zeros_like(values))


def kept_counts(node_mask: torch.Tensor, rate: float) -> torch.Tensor:
    """⌈m · rate⌉ per graph, m its number of real nodes (B,)."""
    real = node_mask.sum(dim=1).to(torch.float64)
    return torch.ceil(real * rate - 1e-9).clamp(min=0).to(torch.long)


def select_nodes(scores: torch.Tensor, node_mask: torch.Tensor, rate: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices (B, m') of each graph's top ⌈m·rate⌉ real nodes by score and their mask (B, m').

    m' is the largest kept count of the batch; a graph keeping fewer has masked trailing slots.
    Ties are broken by node position.
    """
    keep = kept_counts(node_mask, rate)
    width = max(1, int(keep.max()))
    order = scores.masked_fill(~node_mask, float("-inf")).argsort(dim=1, descending=True, stable=True)
    index = order[:, :width]
    slots = torch.arange(width, device=scores.device).unsqueeze(0)
    return index, (slots < keep.unsqueeze(1)) & node_mask.gather(1, index)


class RelevanceSignalAttentionPooling(nn.Module):
    """RSAP (eqs 9-13): score nodes with a GNN, keep the top share, scale kept features by their scores."""

    def __init__(self, query_words: int, rate: float) -> None:
        super().__init__()
        self.rate = rate
        self.w_p = nn.Linear(query_words, 1, bias=False)
        self.gnn = GatedGraphLayer(1)

    def forward(
        self, h: torch.Tensor, adjacency: torch.Tensor, node_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(features, adjacency, node mask) of the pooled graphs."""
        scores = torch.tanh(self.gnn(self.w_p(h), adjacency)).squeeze(-1)
        index, kept = select_nodes(scores, node_mask, self.rate)
        weight = scores.gather(1, index) * kept
        pooled = h.gather(1, index.unsqueeze(-1).expand(-1, -1, h.shape[2])) * weight.unsqueeze(-1)
        rows = adjacency.gather(1, index.unsqueeze(-1).expand(-1, -1, adjacency.shape[2]))
        restricted = rows.gather(2, index.unsqueeze(1).expand(-1, index.shape[1], -1))
        pair_mask = kept.unsqueeze(2) & kept.unsqueeze(1)
        return pooled, restricted * pair_mask, kept


class GHRM(nn.Module):
    """rel(q, d) for a `GraphBatch`; see the module docstring."""

    def __init__(self, config: ModelConfig, query_words: int) -> None:
        super().__init__()
        self.config = config
        self.query_words = query_words
        self.gnns = nn.ModuleList(GatedGraphLayer(query_words) for _ in range(config.blocks))
        self.pools = nn.ModuleList(
            RelevanceSignalAttentionPooling(query_words, config.rate)
            for _ in range(config.blocks if config.pooling else 0)
        )
        widths = [config.top_k * (config.blocks + 1), *config.mlp_hidden]
        layers: list[nn.Module] = []
        for width_in, width_out in zip(widths, widths[1:]):
            layers += [nn.Linear(width_in, width_out), nn.ReLU()]
        self.mlp = nn.Sequential(*layers, nn.Linear(widths[-1], 1))
        self.idf_scale = nn.Parameter(torch.ones(()))  # c of eq 16

    def signals(self, batch: GraphBatch) -> torch.Tensor:
        """SIGNAL (B, k(T+1), M): the readouts of S and of every block, stacked per query term."""
        if batch.similarity.shape[2] != self.query_words:
            raise ValueError(f"GHRM: batch has {batch.similarity.shape[2]} query terms, model {self.query_words}")
        term_mask = batch.query_mask.unsqueeze(1).to(batch.similarity.dtype)
        h, adjacency, node_mask = batch.similarity, batch.adjacency, batch.node_mask
        readouts = [kmax_readout(h, node_mask, self.config.top_k)]
        for block, gnn in enumerate(self.gnns):
            h = gnn(h, adjacency) * node_mask.unsqueeze(-1) * term_mask
            if self.config.pooling:
                h, adjacency, node_mask = self.pools[block](h, adjacency, node_mask)
            readouts.append(kmax_readout(h, node_mask, self.config.top_k))
        return torch.cat(readouts, dim=1)

    def forward(self, batch: GraphBatch) -> torch.Tensor:
        """Relevance scores (B,)."""
        per_term = self.mlp(self.signals(batch).transpose(1, 2)).squeeze(-1)  # (B, M)
        logits = (self.idf_scale * batch.query_idf).masked_fill(~batch.query_mask, torch.finfo(per_term.dtype).min)
        gates = torch.softmax(logits, dim=1) * batch.query_mask
        return (gates * per_term).sum(dim=1)


def hinge_loss(positive: torch.Tensor, negative: torch.Tensor, margin: float = 1.0) -> torch.Tensor:
    """Mean of max(0, margin - rel(q, d+) + rel(q, d-)) (eq 18)."""
    return torch.clamp(margin - positive + negative, min=0.0).mean()


def parameter_count(model: nn.Module) -> int:
    """Trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
