"""DUET (Mitra et al., WWW 2017): a local model of exact matches plus a distributed model.

Local: the binary exact-match matrix of the query's Lq terms and the document's Ld words; one
convolution per query term spanning the whole document (`filters` kernels, as Capreolus reads the
paper's window-1 convolution), then dense `hidden` -> 1 with dropout. Distributed: the paper
represents words by 2000-d character-trigram hashes; here, as in Capreolus, by the (fixed)
word2vec vectors. The query's vectors pass a width-3 convolution (`filters`) and max pooling over
positions, then a dense layer; the document's a width-3 convolution, max pooling with window
`pool` (paper: 100) and stride 1, and a width-1 convolution; the query vector multiplies every
document position (Hadamard), a dense layer over positions and one over filters give the score.
Score = local + distributed. The paper's sizes (300 filters, Ld 1000, Lq 10) are the `paper`
profile's business; tanh activations (the paper's). Padded query terms and document words never
match in the local model; padding enters the distributed model as zero vectors at fixed positions
(the paper pads the same way). Loss: softmax cross-entropy over one positive and the negatives
(paper: 4).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from dagster_ir.methods.baselines.inputs import frozen_embedding


@dataclass(frozen=True)
class DUETConfig:
    query_words: int = 10  # Lq (paper: 10)
    doc_words: int = 1000  # Ld (paper: 1000)
    filters: int = 300  # paper: 300
    hidden: int = 300
    pool: int = 100  # paper: 100
    dropout: float = 0.2


def exact_match(query: torch.Tensor, doc: torch.Tensor) -> torch.Tensor:
    """(B, Lq, Ld) 1.0 where the query term is the document word and both are real."""
    return ((query.unsqueeze(2) == doc.unsqueeze(1)) & (query > 0).unsqueeze(2)).float()


class DUET(nn.Module):
    def __init__(self, vectors, config: DUETConfig = DUETConfig()) -> None:
        super().__init__()
        self.config = config
        c, lq, ld = config.filters, config.query_words, config.doc_words
        if ld - 2 - config.pool + 1 < 1:
            raise ValueError(f"DUET: doc_words {ld} too short for pool {config.pool}")
        self.local_conv = nn.Conv2d(1, c, (1, ld))
        self.local = nn.Sequential(
            nn.Linear(lq * c, config.hidden), nn.Tanh(), nn.Dropout(config.dropout), nn.Linear(config.hidden, 1)
        )
        self.embedding = frozen_embedding(vectors)
        dim = self.embedding.weight.shape[1]
        self.q_conv, self.d_conv = nn.Conv1d(dim, c, 3, padding=1), nn.Conv1d(dim, c, 3)
        self.q_dense, self.d_conv2 = nn.Linear(c, c), nn.Conv1d(c, c, 1)
        positions = ld - 2 - config.pool + 1
        self.by_position = nn.Linear(positions, 1)
        self.dist = nn.Sequential(nn.Tanh(), nn.Dropout(config.dropout), nn.Linear(c, 1))

    def local_score(self, query: torch.Tensor, doc: torch.Tensor) -> torch.Tensor:
        out = torch.tanh(self.local_conv(exact_match(query, doc).unsqueeze(1))).squeeze(-1)  # (B, c, Lq)
        return self.local(out.flatten(1)).squeeze(-1)

    def distributed_score(self, query: torch.Tensor, doc: torch.Tensor) -> torch.Tensor:
        q = torch.tanh(self.q_conv(self.embedding(query).transpose(1, 2)))
        q = q.masked_fill(~(query > 0).unsqueeze(1), -1.0).max(dim=2).values  # padded terms never win
        q = self.q_dense(q)  # (B, c)
        d = torch.tanh(self.d_conv(self.embedding(doc).transpose(1, 2)))
        d = nn.functional.max_pool1d(d, self.config.pool, stride=1)
        d = torch.tanh(self.d_conv2(d))  # (B, c, P)
        return self.dist(self.by_position(q.unsqueeze(2) * d).squeeze(-1)).squeeze(-1)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        query, doc = batch["query"], batch["doc"]
        if query.shape[1] != self.config.query_words or doc.shape[1] != self.config.doc_words:
            raise ValueError(
                f"DUET: batch is {query.shape[1]} x {doc.shape[1]} words, the model "
                f"{self.config.query_words} x {self.config.doc_words}"
            )
        return self.local_score(query, doc) + self.distributed_score(query, doc)
