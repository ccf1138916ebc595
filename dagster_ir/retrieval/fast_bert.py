"""An inference-only forward of a BERT encoder that keeps its large buffers: transformers' arithmetic, faster on a CPU.

`FastBert.for_model(module, bf16=False)` wraps a transformers `BertModel` (the dense encoder) or
`BertForSequenceClassification` (the model inside `dagster_ir.neural.CrossEncoder`; it lives here,
below `neural`, because the dense encoder uses it too) when `supports` says it can, and returns None
otherwise (the caller then runs the model's own forward):

- `hidden_states(input_ids, attention_mask, token_type_ids) -> (B, L, H)`: the last layer's token
  states (the dense encoder's mean pooling reads these);
- `scores(input_ids, attention_mask, token_type_ids) -> (B,)`: the sequence-classification logit
  of a one-output head (the cross-encoder's score).

The operations are the model's own, in its order - embeddings (the model's module), then per layer
Q/K/V projections, `scaled_dot_product_attention` with the padding mask, the output projection,
residual + LayerNorm, the feed-forward with its activation, residual + LayerNorm; the pooler
(dense + tanh over [CLS]) and the classifier for scores - so fp32 results equal transformers' within
rounding (the tests hold them to 1e-5). What is faster:

1. Every projection is one `torch.addmm` into a buffer that lives across layers and batches
   (queries, keys and values in one product), and the activation runs in place. Measured on this 2-core machine, a fresh 50 MB feed-forward
   intermediate per layer (32 x 256 tokens x 1536 floats) cost more in page faults and first
   touches than the matrix product itself: `linear` + `gelu` 250 ms against 108 ms for `addmm(out=)`
   + in-place `gelu_` on the same (8192 x 384) @ (384 x 1536) product.
2. `scores` reads only [CLS] of the last layer, so that layer computes keys and values for every
   token but queries, attention output and feed-forward for the [CLS] row alone (one layer in six
   of MiniLM's work, less its K/V projections).
3. `bf16=True` (opt-in): weights are cast once per wrapper, matrix products and attention run in
   bfloat16 (oneDNN's AMX / AVX-512 BF16 kernels on CPUs that have them), while the residual stream,
   the LayerNorms, the pooler and the head stay in float32. Scores move by about 1e-2 (see the tests).

`gates` (optional, one value in [0, 1] per layer): the gated cross-attention of
`dagster_ir.neural.gated_attention` - each layer's attention is (1 - g) * attention within the
token's segment + g * full attention, the segments passed as `segments` (token types: 0 query,
1 document) to `hidden_states` / `scores`; a product whose weight is 0 is skipped (all gates 0: one
within-segment product per layer). `position_ids` (optional, (B, L)) go to the embeddings as in the
model's forward (None: 0..L-1), e.g. the restarting document positions of "gated-segments".

Not handled (None from `for_model`): other architectures, decoders, relative position embeddings,
activations other than gelu, gelu_pytorch_tanh and relu, and models on a GPU (their own fused kernels
are the faster path there). Weights are read when the wrapper is made: make a new one after training
steps (the scorers make one per call).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from dagster_ir.lazy import inference_mode, lazy_module

if TYPE_CHECKING:
    import torch
    import torch.nn.functional as F
else:
    torch = lazy_module("torch")
    F = lazy_module("torch.nn.functional")


_ACTIVATIONS = {
    "gelu": lambda t: torch.ops.aten.gelu_(t),
    "gelu_pytorch_tanh": lambda t: torch.ops.aten.gelu_(t, approximate="tanh"),
    "relu": lambda t: t.relu_(),
}


def bf16_supported() -> bool:
    """Whether this CPU has native bfloat16 arithmetic (AVX-512 BF16 or AMX) for oneDNN."""
    try:
        return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def _parts(module: torch.nn.Module):
    """(bert, classifier model or None) of a transformers BertModel / BertForSequenceClassification."""
    name = type(module).__name__
    if name == "BertModel":
        return module, None
    if name == "BertForSequenceClassification":
        return module.bert, module
    return None, None


def supports(module: torch.nn.Module) -> bool:
    """Whether `FastBert` can run `module` exactly (see the module docstring for what it cannot)."""
    bert, _ = _parts(module)
    if bert is None:
        return False
    config = bert.config
    return (
        not getattr(config, "is_decoder", False)
        and getattr(config, "position_embedding_type", "absolute") == "absolute"
        and isinstance(config.hidden_act, str)
        and config.hidden_act in _ACTIVATIONS
        and next(bert.parameters()).device.type == "cpu"
        and next(bert.parameters()).dtype == torch.float32
    )


@dataclass(frozen=True)
class _Layer:
    wqkv: torch.Tensor  # (H, 3H): queries, keys and values in one product
    bqkv: torch.Tensor
    wkv: torch.Tensor  # (H, 2H): keys and values (the [CLS]-only last layer)
    bkv: torch.Tensor
    wq: torch.Tensor
    bq: torch.Tensor
    wo: torch.Tensor
    bo: torch.Tensor
    ln1: tuple[torch.Tensor, torch.Tensor, float]
    wi: torch.Tensor
    bi: torch.Tensor
    wf: torch.Tensor
    bf: torch.Tensor
    ln2: tuple[torch.Tensor, torch.Tensor, float]


def _layer_weights(layer: torch.nn.Module, dtype: torch.dtype) -> _Layer:
    def w(*linears):  # one linear: its own tensors (no copy in fp32); several: concatenated outputs
        if len(linears) == 1:
            return linears[0].weight.detach().to(dtype).t(), linears[0].bias.detach().to(dtype)
        weight = torch.cat([linear.weight.detach() for linear in linears]).to(dtype)
        return weight.t(), torch.cat([linear.bias.detach() for linear in linears]).to(dtype)

    def ln(norm):
        return norm.weight.detach(), norm.bias.detach(), norm.eps

    attention = layer.attention
    query, key, value = attention.self.query, attention.self.key, attention.self.value
    (wqkv, bqkv), (wkv, bkv), (wq, bq) = w(query, key, value), w(key, value), w(query)
    (wo, bo), (wi, bi), (wf, bf) = w(attention.output.dense), w(layer.intermediate.dense), w(layer.output.dense)
    return _Layer(
        wqkv, bqkv, wkv, bkv, wq, bq, wo, bo, ln(attention.output.LayerNorm), wi, bi, wf, bf, ln(layer.output.LayerNorm)
    )


class FastBert:
    """Inference forward of one BERT model (see the module docstring); not thread-safe (shared buffers)."""

    def __init__(self, module: torch.nn.Module, *, bf16: bool = False, gates=None) -> None:
        if not supports(module):
            raise ValueError(f"FastBert: {type(module).__name__} is not a supported BERT model on the CPU in fp32")
        self.bert, self.head = _parts(module)
        config = self.bert.config
        self.hidden = config.hidden_size
        self.heads = config.num_attention_heads
        self.head_dim = self.hidden // self.heads
        self.dtype = torch.bfloat16 if bf16 else torch.float32
        self.activation = _ACTIVATIONS[config.hidden_act]
        self.layers = [_layer_weights(layer, self.dtype) for layer in self.bert.encoder.layer]
        self.gates = None if gates is None else tuple(float(g) for g in gates)
        if self.gates is not None and (len(self.gates) != len(self.layers) or not all(0 <= g <= 1 for g in self.gates)):
            raise ValueError(f"FastBert: gates must be {len(self.layers)} values in [0, 1], got {gates!r}")
        self._buffers: dict[str, torch.Tensor] = {}

    @classmethod
    def for_model(cls, module: torch.nn.Module, *, bf16: bool = False, gates=None) -> FastBert | None:
        """A wrapper for `module`, or None when `supports(module)` is false."""
        return cls(module, bf16=bf16, gates=gates) if supports(module) else None

    def _buffer(self, name: str, *shape: int) -> torch.Tensor:
        numel = 1
        for size in shape:
            numel *= size
        buffer = self._buffers.get(name)
        if buffer is None or buffer.numel() < numel:
            buffer = self._buffers[name] = torch.empty(numel, dtype=self.dtype)
        return buffer[:numel].view(shape)

    @inference_mode
    def hidden_states(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        segments: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The last layer's token states, (B, L, hidden), float32."""
        batch, length = input_ids.shape
        return self._encode(input_ids, attention_mask, token_type_ids, segments, position_ids, cls_only=False).view(
            batch, length, -1
        )

    @inference_mode
    def scores(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        segments: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The one-output classification logit of every row, (B,), float32."""
        if self.head is None or self.bert.pooler is None or self.head.config.num_labels != 1:
            raise ValueError("FastBert.scores needs a one-output BertForSequenceClassification with a pooler")
        cls = self._encode(input_ids, attention_mask, token_type_ids, segments, position_ids, cls_only=True)
        pooled = torch.tanh(self.bert.pooler.dense(cls))
        return self.head.classifier(pooled).squeeze(-1)

    def _encode(
        self, input_ids, attention_mask, token_type_ids, segments, position_ids, *, cls_only: bool
    ) -> torch.Tensor:
        batch, length = input_ids.shape
        x = self.bert.embeddings(input_ids=input_ids, token_type_ids=token_type_ids, position_ids=position_ids)
        x = x.reshape(batch * length, -1)
        real = attention_mask.bool()
        mask = None if bool(real.all()) else real[:, None, None, :]
        within = None
        if self.gates is not None:  # gated cross-attention: see dagster_ir.neural.gated_attention
            if segments is None:
                raise ValueError("FastBert: gated attention needs the segments (token types: 0 query, 1 document)")
            within = ((segments[:, :, None] == segments[:, None, :]) & real[:, None, :])[:, None]
        for i, weights in enumerate(self.layers):
            last = i == len(self.layers) - 1
            masks = (mask, within, None if self.gates is None else self.gates[i])
            x = self._layer(x, batch, length, weights, masks, cls_only and last)
        return x

    def _layer(self, x: torch.Tensor, batch: int, length: int, w: _Layer, masks, cls_only: bool) -> torch.Tensor:
        """One encoder layer over x (B*L, H) float32; the [CLS] rows only (B, H) when `cls_only`.
        masks: (full (B,1,1,L) or None, within-segment (B,1,L,L) or None, gate or None): with a gate g the
        attention is (1 - g) * within-segment + g * full (a product skipped when its weight is 0)."""
        tokens, hidden, heads, head_dim = batch * length, self.hidden, self.heads, self.head_dim
        low = self.dtype != torch.float32
        xin = x.to(self.dtype) if low else x
        if cls_only:
            projected = self._buffer("kv", tokens, 2 * hidden)
            torch.addmm(w.bkv, xin, w.wkv, out=projected)
            key_value = projected.view(batch, length, 2, heads, head_dim)
            residual = x.view(batch, length, hidden)[:, 0]
            query = torch.addmm(w.bq, xin.view(batch, length, hidden)[:, 0], w.wq)
            query = query.view(batch, 1, heads, head_dim).transpose(1, 2)
            rows = batch
        else:
            projected = self._buffer("qkv", tokens, 3 * hidden)
            torch.addmm(w.bqkv, xin, w.wqkv, out=projected)
            key_value = projected.view(batch, length, 3, heads, head_dim)[:, :, 1:]
            residual = x
            query = projected.view(batch, length, 3, heads, head_dim)[:, :, 0].transpose(1, 2)
            rows = tokens
        key = key_value[:, :, 0].transpose(1, 2)
        value = key_value[:, :, 1].transpose(1, 2)
        mask, within, g = masks
        if g is None or g == 1.0:
            context = F.scaled_dot_product_attention(query, key, value, attn_mask=mask)
        else:
            within = within[:, :, :1] if cls_only else within
            context = F.scaled_dot_product_attention(query, key, value, attn_mask=within)
            if g > 0.0:
                full = F.scaled_dot_product_attention(query, key, value, attn_mask=mask)
                context = (1.0 - g) * context + g * full
        context = context.transpose(1, 2).reshape(rows, hidden)
        attended = self._buffer("attended", rows, hidden)
        torch.addmm(w.bo, context, w.wo, out=attended)
        h = F.layer_norm((attended.float() if low else attended).add_(residual), (hidden,), *w.ln1[:2], eps=w.ln1[2])
        inner = self._buffer("inner", rows, w.wi.shape[1])
        torch.addmm(w.bi, h.to(self.dtype) if low else h, w.wi, out=inner)
        self.activation(inner)
        out = self._buffer("out", rows, hidden)
        torch.addmm(w.bf, inner, w.wf, out=out)
        return F.layer_norm((out.float() if low else out).add_(h), (hidden,), *w.ln2[:2], eps=w.ln2[2])
