"""CEDR-KNRM (MacAvaney et al., SIGIR 2019): KNRM over BERT's contextual similarity matrices, plus [CLS].

Each document passage (as `bert_passages.PassageEncoder` cuts them; CEDR also splits long
documents into chunks and joins them) is encoded as `[CLS] query [SEP] passage [SEP]`. At every
layer of the backbone (the embeddings and each transformer layer: CEDR's "simmat layers 0..12")
the cosine matrix of the query tokens and the passage tokens is taken; the matrices of a
document's passages are joined along the document axis and kernel-pooled as KNRM does (CEDR:
mu = -0.9..0.9 step 0.2 and 1.0, sigma 0.1 and 1e-3 for exact match: the 11 KNRM kernels), one
feature vector per layer. The [CLS] vectors of the last layer are averaged over the real
passages (CEDR's `cls: avg`) and concatenated with the kernel features; one linear layer gives the
score (CEDR's combination). [CLS], [SEP] and padding take part in no matrix. Loss: softmax
cross-entropy over the positive and the negatives (CEDR trains pairwise, one negative, the same
loss for n = 1).

The start. CEDR initialises its backbone from a vanilla BERT ranker already fine-tuned on the
collection, whose [CLS] carries relevance. Here the BERT baselines start from one point, the
cross-encoder's (`reranker.build_bert_model`: on the bundled bi-encoder, the cosine of the two
segments' mean states), so the combining layer takes one more input, the cross-encoder's own score
of each passage, maxed over the document's passages, and starts weighting it 1 and the [CLS] and
kernel features 0: untrained, CEDR-KNRM scores what BERT-MaxP scores, and training moves the
kernels in from there. Measured on Cranfield (BM25's top 20, seed 0's five validation folds,
nDCG@10, untrained): this start .331 .304 .353 .366 .357 (mean .342, BERT-MaxP's to four
decimals), the passages' mean instead of their max .344 .301 .360 .364 .328 (mean .340). Before,
the combining layer started random over [CLS] and kernels, and fold 0's validation after one epoch
read .094, below a random order of the same candidates (about .19). From this start the demo
profile's four epochs on fold 0 read .335 .339 .339 .341 on validation (the last kept).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from dagster_ir.methods.baselines.bert_passages import aggregate_passages
from dagster_ir.methods.baselines.knrm import MUS, SIGMAS, KernelPool
from dagster_ir.neural.cross_encoder import CrossEncoder


@dataclass(frozen=True)
class CEDRConfig:
    mus: tuple[float, ...] = MUS
    sigmas: tuple[float, ...] = SIGMAS


class CEDRKNRM(nn.Module):
    def __init__(self, cross_encoder: CrossEncoder, config: CEDRConfig = CEDRConfig()) -> None:
        super().__init__()
        self.config = config
        self.bert = cross_encoder.model.base_model  # the bare encoder; the cross-encoder's head is not used
        self.cross_encoder = cross_encoder  # kept for its tokenizer and encode_pair
        hidden, layers = self.bert.config.hidden_size, self.bert.config.num_hidden_layers + 1
        self.pool = KernelPool(config.mus, config.sigmas)
        # inputs: the cross-encoder's score (the max over passages), the averaged [CLS], the kernel features
        self.combine = nn.Linear(1 + hidden + layers * len(config.mus), 1)
        with torch.no_grad():  # the start: the cross-encoder's score, every other input weighted 0
            self.combine.weight.zero_()
            self.combine.weight[0, 0] = 1.0
            self.combine.bias.zero_()

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        b, p, length = batch["input_ids"].shape
        real = batch["passage_mask"]
        flat = {
            k: batch[k].reshape(b * p, length)[real.reshape(-1)]
            for k in ("input_ids", "attention_mask", "token_type_ids")
        }
        types = flat["token_type_ids"]
        if not getattr(self.bert.config, "type_vocab_size", 0) > 1:
            flat.pop("token_type_ids")
        states, start = self.passage_states(flat, types)
        segment = batch["segment"]
        # Query tokens sit at positions 1..n of every passage ([CLS] first): the matrices need those
        # rows only, since a row without a query token adds nothing to the kernel features.
        rows = 1 + int((segment[:, 0] == 1).sum(dim=1).max())
        query_mask = (segment[:, 0, :rows] == 1).float()  # (B, rows): every passage holds the same query tokens
        doc_mask = ((segment == 2) & real.unsqueeze(-1)).float().reshape(b, p * length)
        mask = query_mask.unsqueeze(2) * doc_mask.unsqueeze(1)
        features = []
        # The cosines and kernels in float32 whatever the backbone's autocast: the exact-match kernel
        # (sigma 1e-3) is narrower than bfloat16's resolution near 1.
        with torch.autocast(states[0].device.type, enabled=False):
            for layer in states:
                full = layer.new_zeros(b * p, length, layer.shape[-1], dtype=torch.float32)
                full[real.reshape(-1)] = layer.float()
                unit = nn.functional.normalize(full.reshape(b, p, length, -1), dim=-1)
                # query tokens of each passage against that passage's tokens, passages side by side
                sim = torch.einsum("bpqh,bpdh->bqpd", unit[:, :, :rows], unit).reshape(b, rows, p * length)
                features.append(self.pool(sim * mask, mask))
            cls = states[-1].new_zeros(b * p, states[-1].shape[-1], dtype=torch.float32)
            cls[real.reshape(-1)] = states[-1][:, 0].float()
            cls = (cls.reshape(b, p, -1) * real.unsqueeze(-1)).sum(1) / real.sum(1, keepdim=True).clamp(min=1)
            passage_start = start.new_zeros(b * p, dtype=torch.float32)
            passage_start[real.reshape(-1)] = start.float()
            start = aggregate_passages(passage_start.reshape(b, p), real, "max")
            return self.combine(torch.cat([start.unsqueeze(1), cls, *features], dim=1)).squeeze(-1)

    def passage_states(
        self, flat: dict[str, torch.Tensor], types: torch.Tensor
    ) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        """(every layer's token states, the cross-encoder's score) of the real passages, from one forward."""
        if self.cross_encoder.head == "cosine":
            states = self.bert(**flat, output_hidden_states=True).hidden_states
            return states, self.cross_encoder.score_states(states[-1], flat["attention_mask"], types)
        out = self.cross_encoder.model(**flat, output_hidden_states=True)
        return out.hidden_states, out.logits.squeeze(-1)
