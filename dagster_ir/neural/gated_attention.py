"""Gated cross-attention: a joint `[CLS] q [SEP] d [SEP]` pass that starts as two separate ones.

In every layer l the self-attention output (the context, before the output projection) is

    (1 - g_l) * A_within + g_l * A_full

where A_full is the layer's usual attention over every real token, A_within the same attention with
each token restricted to its own segment (query segment: token type 0, i.e. [CLS] q [SEP]; document
segment: type 1, d [SEP]; padding masked in both), and g_l a learned scalar per layer. Queries,
keys and values are computed once per layer; only the two attention products differ. With every
g_l = 0 the query and the document never see each other: each segment's states are those of the
segment encoded alone (the bi-encoder's, within the positions and token types of the joint input),
so a sentence-transformers bi-encoder under the cosine head scores as that bi-encoder; with
every g_l = 1 the pass is the plain cross-encoder's.

Its measurements (Cranfield fold 0, `benchmarks/gated_cross_attention.py`) are in the documentation's
PHP page ("Gated cross-attention without segment positions", "Where the cross-encoders start").

Parameterisation: g_l = clamp(GATE_RATE * p_l, 0, 1) with a straight-through gradient (the value is
clamped, the gradient is that of GATE_RATE * p_l everywhere), p_l starting at 0. So the gradient at
the start is not zero, a gate pushed below 0 can come back, and an AdamW step of lr moves a gate by
up to GATE_RATE * lr (lr 2e-4: 0.02), so that a fine-tuning of a hundred steps can open a gate fully
where an unscaled gate would move by 0.02 at most.

The segments come from the `token_type_ids` and `attention_mask` given to the encoder's forward
(`BertModel`, or the classification model that calls it): a forward pre-hook on the encoder keeps
them for its layers during that pass, so every caller of the encoder (the cross-encoder, CEDR's
layer-wise states, PHP's MLM states) gets the gated pass without passing anything new. Calling a
gated layer outside an encoder forward is an error. The attention runs through
`torch.nn.functional.scaled_dot_product_attention` with boolean masks (transformers' "sdpa"
arithmetic; "eager" differs within float rounding).

API: `install_gates(model, gates, *, restart_positions=False) -> GateContext` replaces the
`attention.self` module of every layer of a transformers BERT encoder (`BertModel` or a model whose
`base_model` is one) with a `GatedSelfAttention` that keeps its query/key/value modules under the
same names (the state dict, hence `save_pretrained`, is unchanged: the gates are not in it). `gates`
is a 1-D parameter (one entry per layer) owned by the caller (`CrossEncoder` keeps it and saves it
in cross_encoder.json).
`gate_values(gates) -> tuple[float, ...]`: the clamped g_l (what the fast CPU scorer reads).
`segment_masks(token_type_ids, attention_mask) -> (full, within)`: the boolean masks, (B, 1, 1, L)
and (B, 1, L, L).
`segment_position_ids(token_type_ids) -> (B, L)`: position ids that restart at 0 at the document's
first token (see below).

Restarting the document's positions (`install_gates(..., restart_positions=True)`, the cross-encoder's
`cross_attention="gated-segments"`): the same gated layers, and the encoder's forward pre-hook also
fills `position_ids` when the caller gave none (the cross-encoder, the classification model's call
of its encoder, CEDR's and PHP's calls all give none): the query segment keeps positions 0, 1, ...
and the document segment restarts at 0 at its first token (the first token of type 1; padding after
it counts on, masked anyway). With every g_l = 0 each segment is then exactly that segment encoded
alone from position 0 - the query `[CLS] q [SEP]` as a bi-encoder encodes it, the document `d [SEP]`
under token type 1 - so the closed start is the bi-encoder but for the document's missing `[CLS]`
and its token type. The price: open gates are no longer the plain cross-encoder (its document sits
after the query): the query and the document attend to each other at overlapping positions, an input
the backbone never saw."""

from __future__ import annotations

import torch
import torch.nn.functional as F

GATE_RATE = 100.0  # g = clamp(GATE_RATE * p, 0, 1): see the module docstring


def gate(parameter: torch.Tensor) -> torch.Tensor:
    """clamp(GATE_RATE * p, 0, 1) in value, GATE_RATE * p in gradient (straight-through)."""
    raw = GATE_RATE * parameter
    return raw + (raw.clamp(0.0, 1.0) - raw).detach()


def gate_values(parameter: torch.Tensor) -> tuple[float, ...]:
    """The gates' values g_l as floats."""
    return tuple(float(v) for v in (GATE_RATE * parameter.detach().float()).clamp(0.0, 1.0))


def segment_position_ids(token_type_ids: torch.Tensor) -> torch.Tensor:
    """Position ids (B, L) that count from 0 in the query segment and restart at 0 at each row's first
    token of type 1 (the document's first token); a row without one keeps 0..L-1."""
    length = token_type_ids.shape[-1]
    positions = torch.arange(length, device=token_type_ids.device).expand_as(token_type_ids)
    is_doc = token_type_ids == 1
    start = torch.where(is_doc.any(-1), is_doc.int().argmax(-1), length)  # first type-1 index (argmax: first max)
    return torch.where(positions >= start[:, None], positions - start[:, None], positions)


def segment_masks(
    token_type_ids: torch.Tensor, attention_mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(full (B, 1, 1, L), within (B, 1, L, L)) boolean attention masks: True where a query position may
    attend to a key position. full: every real key; within: the real keys of the query position's segment."""
    real = torch.ones_like(token_type_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    same = token_type_ids[:, :, None] == token_type_ids[:, None, :]
    return real[:, None, None, :], (same & real[:, None, :])[:, None]


class GateContext:
    """The gates and, during one encoder forward, that pass's segment masks (read by every layer)."""

    def __init__(self, gates: torch.nn.Parameter, restart_positions: bool = False) -> None:
        self.gates = gates
        self.restart_positions = restart_positions
        self.masks: tuple[torch.Tensor, torch.Tensor] | None = None

    def before(self, module, args, kwargs):
        """Forward pre-hook of the encoder: keep this pass's masks (BertModel's argument order) and, with
        `restart_positions`, fill position_ids the caller left out (returns the new arguments)."""

        def argument(name: str, position: int):
            return kwargs[name] if name in kwargs else (args[position] if len(args) > position else None)

        types, mask = argument("token_type_ids", 2), argument("attention_mask", 1)
        if types is None:
            raise ValueError("gated cross-attention needs token_type_ids (0: query segment, 1: document segment)")
        self.masks = segment_masks(types, mask)
        if self.restart_positions and argument("position_ids", 3) is None:
            if len(args) > 3:  # given positionally as None
                args = (*args[:3], segment_position_ids(types), *args[4:])
            else:
                kwargs = {**kwargs, "position_ids": segment_position_ids(types)}
            return args, kwargs
        return None

    def after(self, module, args, output) -> None:
        """Forward hook of the encoder: forget the pass's masks."""
        self.masks = None

    def layer_masks(self, batch: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.masks is None or self.masks[1].shape[0] != batch or self.masks[1].shape[-1] != length:
            raise RuntimeError(
                "GatedSelfAttention: called outside a forward of its encoder (no segments for "
                f"this batch of {batch} x {length} tokens)"
            )
        return self.masks


class GatedSelfAttention(torch.nn.Module):
    """A BERT self-attention whose output mixes within-segment and full attention (see the module docstring)."""

    def __init__(self, inner: torch.nn.Module, context: GateContext, index: int) -> None:
        super().__init__()
        self.query, self.key, self.value, self.dropout = inner.query, inner.key, inner.value, inner.dropout
        self.num_attention_heads = inner.num_attention_heads
        self.attention_head_size = inner.attention_head_size
        self.scaling = inner.scaling
        self.index = index
        self.context = context  # a plain object: not a submodule, not in the state dict

    def forward(self, hidden_states: torch.Tensor, attention_mask=None, cache=None, **kwargs):
        if cache is not None or kwargs.get("encoder_hidden_states") is not None:
            raise ValueError("GatedSelfAttention: an encoder's self-attention only (no cache, no cross-attention)")
        batch, length, _ = hidden_states.shape
        full, within = self.context.layer_masks(batch, length)
        shape = (batch, length, self.num_attention_heads, self.attention_head_size)
        query = self.query(hidden_states).view(shape).transpose(1, 2)
        key = self.key(hidden_states).view(shape).transpose(1, 2)
        value = self.value(hidden_states).view(shape).transpose(1, 2)
        dropout = self.dropout.p if self.training else 0.0
        a_within = F.scaled_dot_product_attention(
            query, key, value, attn_mask=within, dropout_p=dropout, scale=self.scaling
        )
        a_full = F.scaled_dot_product_attention(
            query, key, value, attn_mask=full, dropout_p=dropout, scale=self.scaling
        )
        g = gate(self.context.gates[self.index])
        mixed = (1 - g) * a_within + g * a_full
        return mixed.transpose(1, 2).reshape(batch, length, -1), None


def install_gates(model: torch.nn.Module, gates: torch.nn.Parameter, *, restart_positions: bool = False) -> GateContext:
    """Replace every layer's self-attention of `model`'s BERT encoder by a `GatedSelfAttention`
    reading `gates` (one entry per layer); returns the shared context (see the module docstring).
    `restart_positions`: the encoder's forward also restarts the document's position ids at 0."""
    encoder = getattr(model, "base_model", model)
    config = encoder.config
    layers = getattr(getattr(encoder, "encoder", None), "layer", None)
    if (
        layers is None
        or getattr(config, "is_decoder", False)
        or not all(type(layer.attention.self).__name__ == "BertSelfAttention" for layer in layers)
    ):
        raise ValueError(
            f"gated cross-attention: {type(model).__name__} is not a BERT-style encoder "
            "(encoder.layer[i].attention.self a BertSelfAttention)"
        )
    if gates.shape != (len(layers),):
        raise ValueError(f"gated cross-attention: {len(layers)} layers, {tuple(gates.shape)} gates")
    if getattr(config, "type_vocab_size", 0) < 2:
        raise ValueError(
            "gated cross-attention needs token types (type_vocab_size >= 2) to tell the query from the document"
        )
    if restart_positions and getattr(config, "position_embedding_type", "absolute") != "absolute":
        raise ValueError(
            "gated cross-attention: restarting the document's positions needs absolute position "
            f"embeddings, not {config.position_embedding_type!r}"
        )
    context = GateContext(gates, restart_positions)
    for index, layer in enumerate(layers):
        layer.attention.self = GatedSelfAttention(layer.attention.self, context, index)
    encoder.register_forward_pre_hook(context.before, with_kwargs=True)
    encoder.register_forward_hook(context.after)
    return context
