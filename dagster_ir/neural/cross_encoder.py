"""Cross-encoder: a BERT-style backbone with a score head, trained with LCE.

Two score heads (`head`):
- "cls": the model's own classification head over [CLS] (for BERT the pooler, dense + tanh, then
  a linear layer): the classic monoBERT cross-encoder. New, it is random.
- "cosine": `scale * cos(mean of the query segment's last-layer states, mean of the document
  segment's)` over the one joint pass `[CLS] q [SEP] d [SEP]` (query segment: token type 0, i.e.
  [CLS] q [SEP]; document segment: type 1, d [SEP]); `scale` is learned (starts at 20). Over a
  sentence-transformers bi-encoder (mean pooling, cosine) this cross-encoder ranks like the
  bi-encoder before any training: the query and the document still attend to each other, so the
  scores differ, but the backbone's similarity is kept instead of a random head over a [CLS] the
  model never trained. Under full attention the joint pass ranks below the bi-encoder, since every
  query token also attends to the document (and back); `neural.distill` warm-starts this head on
  the bi-encoder's scores (Margin-MSE).
Cross-attention (`cross_attention`):
- "full" (the default under the "cls" head): the backbone's own attention; the model is the plain
  transformers one.
- "gated": every layer's attention is `(1 - g_l) * attention within the token's own segment +
  g_l * full attention`, g_l a learned per-layer gate starting at 0 (`neural.gated_attention`):
  untrained, the query and the document are encoded without seeing each other (each in the
  positions and token type of the joint input), and fine-tuning opens the gates where training
  pulls. The gates live in the cross-encoder (parameter `gates`), not in the transformers model:
  `save` writes them to cross_encoder.json, and a plain Hugging Face load of the folder ignores
  them (it gives the full-attention model). Needs token types (BERT-style backbones); the "cls"
  head then runs the model's full forward (no [CLS]-only last layer). Its start ranks below full
  attention's on validation (the document's positions after the query cost most), so "full" stays
  the default under the "cls" head.
- "gated-segments": "gated" with the document segment's position ids restarting at 0 at its first
  token (the query keeps 0, 1, ...): closed gates encode each segment exactly as it is encoded alone
  from position 0, so the untrained model is the bi-encoder but for the document's `[CLS]` and token
  type; open gates are then not the plain cross-encoder (the document does not sit after the query).
  Every forward of the encoder gets these positions when its caller gives none (`position_ids`).
  Its start beats full attention's on every Cranfield validation fold, so it is the default under the
  "cosine" head (a mean-pooling bi-encoder backbone such as the bundled one), and `bert`, `php`, the
  PHP stages and baselines and the BERT baselines all start from it; the "cls" head
  (bert-base-uncased, the paper profile) keeps "full".
The measurements behind these choices are in the documentation's PHP page ("Where the
cross-encoders start").
Default (`head=None`): a saved folder's own head; a backbone whose sentence-transformers pooling
config (`1_Pooling/config.json`) says mean pooling gets "cosine" (the bundled all-MiniLM-L6-v2);
any other backbone (bert-base-uncased, the tiny test models) gets "cls".

API
---
`CrossEncoder` (a `torch.nn.Module`)
  - `CrossEncoder.from_pretrained(name_or_path="", *, max_length=512, max_query_length=None, seed=0,
    head=None, cross_attention=None, **config_overrides)`: a backbone ("" = the bundled
    all-MiniLM-L6-v2; the score head is new: "cls" initialised with `seed`, "cosine" as above;
    cross_attention None: `DEFAULT_CROSS_ATTENTION` of the head) or a folder written by `save`
    (head, cross-attention, gates and settings included; neither head nor cross_attention can change).
    max_query_length None: min(64, max_length // 2). `config_overrides` go to the model config
    (e.g. `hidden_dropout_prob=0.0`).
  - `forward(input_ids, attention_mask, token_type_ids=None) -> scores` of shape (N,) (the cosine head
    needs token_type_ids: they tell the query from the document).
  - `score(input_ids, attention_mask, token_type_ids=None, *, with_states=False) -> (scores, states)`:
    also the last layer's token states when asked (PHP's MLM head reads them).
  - `score_states(states, attention_mask, token_type_ids)`: the cosine head over given last-layer
    states (the fast CPU scorer computes the states itself).
  - `tokenize(texts) -> list[list[int]]`: WordPiece ids without special tokens (tokenise once, pair many).
  - `encode_pair(query_ids, doc_ids) -> Pair`: `[CLS] q [SEP] d [SEP]`; the query keeps at most
    `max_query_length` tokens and the document is cut to fit `max_length` (FirstP: its first part).
  - `collate(pairs, device) -> dict` of tensors padded to the longest pair (dynamic padding).
  - `gate_values() -> tuple[float, ...] | None`: the gates g_l of gated cross-attention, else None.
  - `position_ids(token_type_ids) -> Tensor | None`: the position ids the encoder uses (None: 0..L-1;
    "gated-segments": the document's restart at 0).
  - `save(folder) -> Path`: written atomically (`write_into(directory)` writes the same files into
    an existing folder, for callers that add files of their own inside one atomic write).
`cls_only_logits(model, input_ids, attention_mask, token_type_ids)`: a BERT classifier's logits with
    the last layer computed for [CLS] alone (what `score` runs for the "cls" head when
    `cls_only_supported(model)`): its forward's result within rounding, a sixth less work on MiniLM.
`length_buckets(lengths, overhead=64) -> list[list[int]]`: indices grouped by similar length so that
    padding each group to its longest wastes least (plus `overhead` tokens a group).
`bucketed_scores(model, cross_encoder, pairs) -> scores (N,)` in the pairs' order, one forward pass
    per length group (training uses it: the same scores as one padded pass, less padded arithmetic).
`lce_loss(scores)`: scores (B, 1 + n) with the positive in column 0 ->
    mean over B of -log softmax(scores)[0] (Localized Contrastive Estimation).

Folder layout (`save`): a Hugging Face `AutoModelForSequenceClassification` folder with
`num_labels=1` (`model.safetensors`, `config.json`) plus the tokenizer files and `cross_encoder.json`
(max_length, max_query_length, head, head_scale; with gated cross-attention also cross_attention,
gates - the raw parameters - and gate_values, the g_l they give). With head "cls" the score head is the model's own
classification head - for BERT the pooler (dense + tanh over the [CLS] vector) followed by a linear
layer, i.e. an MLP over [CLS]; plain transformers loads it:
`AutoModelForSequenceClassification.from_pretrained(folder)` gives the whole scorer and
`AutoModel.from_pretrained(folder)` the backbone alone; sentence-transformers' `CrossEncoder(folder)`
loads it too. With head "cosine" the folder's classification head is unused (kept, frozen, so
transformers still loads the folder) and the score is computed from the backbone as above.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from dagster_ir.neural.backbone import DEFAULT_BACKBONE, backbone_path
from dagster_ir.neural.gated_attention import gate_values, install_gates, segment_position_ids
from dagster_ir.storage.atomic import atomic_path

SETTINGS_FILE = "cross_encoder.json"
HEADS = ("cls", "cosine")
CROSS_ATTENTION = ("full", "gated", "gated-segments")
GATED = ("gated", "gated-segments")  # the cross-attentions with gates
# cross_attention of a new model, by head (a saved folder keeps its own)
DEFAULT_CROSS_ATTENTION = {"cls": "full", "cosine": "gated-segments"}
COSINE_SCALE = 20.0  # the cosine head's starting scale (sentence-transformers' contrastive losses use 20)


@dataclass(frozen=True)
class Pair:
    """One encoded (query, document) input: token ids and segment (token type) ids."""

    input_ids: list[int]
    token_type_ids: list[int]

    def __len__(self) -> int:
        return len(self.input_ids)


def lce_loss(scores: torch.Tensor) -> torch.Tensor:
    """Localized Contrastive Estimation: mean over rows of -log softmax(row)[0] (positive first)."""
    if scores.ndim != 2 or scores.shape[1] < 2:
        raise ValueError(f"lce_loss: scores must be (batch, 1 + n_negatives) with n >= 1, got {tuple(scores.shape)}")
    target = torch.zeros(scores.shape[0], dtype=torch.long, device=scores.device)
    return F.cross_entropy(scores.float(), target)


def default_head(path: str) -> str:
    """ "cosine" for a sentence-transformers folder with mean pooling, else "cls" (see the module docstring)."""
    pooling = Path(path) / "1_Pooling" / "config.json"
    if not pooling.is_file():
        return "cls"
    try:
        settings = json.loads(pooling.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{pooling}: not valid JSON ({error})") from error
    return "cosine" if settings.get("pooling_mode_mean_tokens") else "cls"


def segment_cosine(states: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
    """cos(mean of the type-0 token states, mean of the type-1 token states) per row, in float32."""
    real = attention_mask.bool()
    states = states.float()
    query = (real & (token_type_ids == 0)).unsqueeze(-1).float()
    doc = (real & (token_type_ids == 1)).unsqueeze(-1).float()
    q = (states * query).sum(1) / query.sum(1).clamp(min=1.0)
    d = (states * doc).sum(1) / doc.sum(1).clamp(min=1.0)
    return F.cosine_similarity(q, d, dim=-1, eps=1e-8)


class CrossEncoder(torch.nn.Module):
    """Scores (query, document) pairs with a sequence-classification model that has one output."""

    def __init__(
        self,
        model,
        tokenizer,
        *,
        max_length: int = 512,
        max_query_length: int | None = None,
        head: str = "cls",
        head_scale: float = COSINE_SCALE,
        cross_attention: str = "full",
        gates: Sequence[float] | None = None,
    ) -> None:
        super().__init__()
        if head not in HEADS:
            raise ValueError(f"CrossEncoder: head must be one of {HEADS}, got {head!r}")
        if cross_attention not in CROSS_ATTENTION:
            raise ValueError(f"CrossEncoder: cross_attention must be one of {CROSS_ATTENTION}, got {cross_attention!r}")
        if max_query_length is None:
            max_query_length = min(64, max_length // 2)
        if model.config.num_labels != 1:
            raise ValueError(f"CrossEncoder: the model must have one output label, has {model.config.num_labels}")
        if max_length < max_query_length + 4:
            raise ValueError(
                f"CrossEncoder: max_length {max_length} leaves no room for a document "
                f"after a query of up to {max_query_length} tokens"
            )
        self.model = model
        self.tokenizer = tokenizer
        self.max_length = min(max_length, model.config.max_position_embeddings)
        self.max_query_length = max_query_length
        self.uses_token_types = getattr(model.config, "type_vocab_size", 0) > 1
        self.head = head
        # the cosine head's learned scale; a parameter under either head, so every folder loads alike
        self.head_scale = torch.nn.Parameter(torch.tensor(float(head_scale)), requires_grad=head == "cosine")
        if head == "cosine":  # the classification head takes no part: frozen, so no optimizer or DDP sees it
            for name, parameter in model.named_parameters():
                if not name.startswith(f"{model.base_model_prefix}.") or ".pooler." in name:
                    parameter.requires_grad_(False)
        self.cross_attention = cross_attention
        if cross_attention in GATED:  # the raw gate parameters p_l (see neural.gated_attention), 0: closed
            layers = model.config.num_hidden_layers
            start = torch.zeros(layers) if gates is None else torch.tensor([float(g) for g in gates])
            if start.shape != (layers,):
                raise ValueError(f"CrossEncoder: {layers} layers, {len(start)} gates")
            self.gates = torch.nn.Parameter(start)
            install_gates(model, self.gates, restart_positions=cross_attention == "gated-segments")
        elif gates is not None:
            raise ValueError(f"CrossEncoder: gates are for cross_attention in {GATED}")

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str = DEFAULT_BACKBONE,
        *,
        max_length: int | None = None,
        max_query_length: int | None = None,
        seed: int = 0,
        head: str | None = None,
        cross_attention: str | None = None,
        **config_overrides,
    ) -> CrossEncoder:
        """A backbone (new score head seeded by `seed`) or a saved cross-encoder folder.

        `max_length`/`max_query_length` default to the saved folder's settings, else 512 and
        min(64, max_length // 2); `head` to the saved folder's, else `default_head` (a saved folder
        cannot change its head).
        """
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        path = backbone_path(name_or_path)
        saved = _read_settings(path)
        if saved and head is not None and head != saved.get("head", "cls"):
            raise ValueError(
                f"{path}: a cross-encoder with head {saved.get('head', 'cls')!r}; it cannot load as {head!r}"
            )
        chosen = saved.get("head", "cls") if saved else (head or default_head(path))
        saved_attention = saved.get("cross_attention", "full")
        if saved and cross_attention is not None and cross_attention != saved_attention:
            raise ValueError(
                f"{path}: a cross-encoder with cross_attention {saved_attention!r}; "
                f"it cannot load as {cross_attention!r}"
            )
        attention = saved_attention if saved else (cross_attention or DEFAULT_CROSS_ATTENTION[chosen])
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = AutoModelForSequenceClassification.from_pretrained(
                path, num_labels=1, use_safetensors=True, **config_overrides
            )
        return cls(
            model,
            AutoTokenizer.from_pretrained(path),
            max_length=max_length or saved.get("max_length", 512),
            max_query_length=max_query_length or saved.get("max_query_length"),
            head=chosen,
            head_scale=saved.get("head_scale", COSINE_SCALE),
            cross_attention=attention,
            gates=saved.get("gates") if attention in GATED else None,
        )

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Relevance scores, one per row."""
        return self.score(input_ids, attention_mask, token_type_ids)[0]

    def score(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        *,
        with_states: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(scores (N,), the last layer's token states (N, L, H) when `with_states`, else None)."""
        types = token_type_ids if self.uses_token_types else None
        if self.head == "cls" and not with_states and self.cross_attention == "full" and cls_only_supported(self.model):
            return cls_only_logits(self.model, input_ids, attention_mask, types), None
        if self.head == "cls":
            out = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                token_type_ids=types,
                output_hidden_states=with_states,
            )
            return out.logits.squeeze(-1), out.hidden_states[-1] if with_states else None
        if token_type_ids is None:
            raise ValueError("CrossEncoder: the cosine head needs token_type_ids (0: query segment, 1: document)")
        states = self.model.base_model(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=types
        ).last_hidden_state
        return self.score_states(states, attention_mask, token_type_ids), states if with_states else None

    def score_states(
        self, states: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> torch.Tensor:
        """The cosine head over last-layer token states (B, L, H)."""
        if self.head != "cosine":
            raise ValueError("CrossEncoder.score_states: only the cosine head scores from token states")
        return self.head_scale * segment_cosine(states, attention_mask, token_type_ids)

    def gate_values(self) -> tuple[float, ...] | None:
        """The per-layer gates g_l of gated cross-attention (0: within segments, 1: full), else None."""
        return gate_values(self.gates) if self.cross_attention in GATED else None

    def position_ids(self, token_type_ids: torch.Tensor) -> torch.Tensor | None:
        """The position ids the encoder's forward uses when given none: None (0..L-1 per row) but under
        "gated-segments", whose document segment restarts at 0 (`neural.gated_attention`)."""
        return segment_position_ids(token_type_ids) if self.cross_attention == "gated-segments" else None

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text, without special tokens and untruncated."""
        if not texts:
            return []
        return self.tokenizer(list(texts), add_special_tokens=False, truncation=False, verbose=False)["input_ids"]

    def encode_pair(self, query_ids: Sequence[int], doc_ids: Sequence[int]) -> Pair:
        """`[CLS] q [SEP] d [SEP]`, the query cut to max_query_length and the document to what is left."""
        query = list(query_ids[: self.max_query_length])
        room = self.max_length - len(query) - 3
        doc = list(doc_ids[:room])
        cls_id, sep_id = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id
        ids = [cls_id, *query, sep_id, *doc, sep_id]
        types = [0] * (len(query) + 2) + [1] * (len(doc) + 1)
        return Pair(ids, types)

    def collate(self, pairs: Sequence[Pair], device: torch.device | str | None = None) -> dict[str, torch.Tensor]:
        """Pad `pairs` to the longest one: input_ids, attention_mask, token_type_ids."""
        return pad_pairs(pairs, self.tokenizer.pad_token_id, device or self.device)

    def save(self, folder: str | os.PathLike[str]) -> Path:
        """Write the model, tokenizer and settings as a Hugging Face folder, atomically."""
        folder = Path(folder)
        with atomic_path(folder, directory=True) as tmp:
            self.write_into(tmp)
        return folder

    def write_into(self, directory: str | os.PathLike[str]) -> None:
        """Write the folder's files into an existing `directory` (not atomic; `save` is)."""
        directory = Path(directory)
        self.model.save_pretrained(directory, safe_serialization=True)
        self.tokenizer.save_pretrained(directory)
        settings = {
            "max_length": self.max_length,
            "max_query_length": self.max_query_length,
            "head": self.head,
            "head_scale": float(self.head_scale.detach()),
        }
        if self.cross_attention in GATED:  # the raw parameters (exact as JSON floats) and their values
            settings |= {
                "cross_attention": self.cross_attention,
                "gates": [float(p) for p in self.gates.detach().cpu()],
                "gate_values": list(self.gate_values()),
            }
        (directory / SETTINGS_FILE).write_text(json.dumps(settings, indent=1), encoding="utf-8")


def pad_pairs(pairs: Sequence[Pair], pad_id: int, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """Tensors for `pairs`, right-padded with `pad_id` to the longest pair."""
    if not pairs:
        raise ValueError("pad_pairs: no pairs")
    width = max(len(p) for p in pairs)
    ids = torch.full((len(pairs), width), pad_id, dtype=torch.long)
    types = torch.zeros((len(pairs), width), dtype=torch.long)
    mask = torch.zeros((len(pairs), width), dtype=torch.long)
    for row, pair in enumerate(pairs):
        n = len(pair)
        ids[row, :n] = torch.tensor(pair.input_ids)
        types[row, :n] = torch.tensor(pair.token_type_ids)
        mask[row, :n] = 1
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device), "token_type_ids": types.to(device)}


def cls_only_supported(model) -> bool:
    """Whether `cls_only_logits` computes `model`'s logits: a BERT sequence classifier (encoder only)."""
    config = model.config
    return (
        type(model).__name__ == "BertForSequenceClassification"
        and not config.is_decoder
        and not getattr(config, "add_cross_attention", False)
        and model.bert.pooler is not None
    )


def cls_only_logits(
    model, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None
) -> torch.Tensor:
    """`model(...).logits[:, 0]` of a `BertForSequenceClassification`, with the last layer computed
    for [CLS] alone: the head reads only [CLS]'s last state, so that layer needs keys and values of
    every token but queries, attention output and feed-forward of the [CLS] row only (one layer in
    six of MiniLM's work, less its K/V projections, in the forward and the backward pass). The
    model's own modules, in its order (dropout included): equal to its forward within float rounding."""
    from transformers.masking_utils import create_bidirectional_mask

    bert = model.bert
    states = bert.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)
    mask = create_bidirectional_mask(config=bert.config, inputs_embeds=states, attention_mask=attention_mask)
    *layers, last = bert.encoder.layer
    for layer in layers:
        out = layer(states, mask)
        states = out[0] if isinstance(out, tuple) else out
    attention = last.attention.self
    rows, length, _ = states.shape
    heads, size = attention.num_attention_heads, attention.attention_head_size
    cls = states[:, :1]
    query = attention.query(cls).view(rows, 1, heads, size).transpose(1, 2)
    key = attention.key(states).view(rows, length, heads, size).transpose(1, 2)
    value = attention.value(states).view(rows, length, heads, size).transpose(1, 2)
    context = F.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attention_mask.bool()[:, None, None, :],
        dropout_p=attention.dropout.p if attention.training else 0.0,
        scale=attention.scaling,
    )
    attended = last.attention.output(context.transpose(1, 2).reshape(rows, 1, heads * size), cls)
    cls_state = last.output(last.intermediate(attended), attended)
    return model.classifier(model.dropout(bert.pooler(cls_state))).squeeze(-1)


# What one more forward pass costs, in padded tokens: its fixed work (the modules' calls, smaller
# matrix products) is a few tokens' arithmetic on MiniLM; 64 keeps a pass for a clear saving only.
BUCKET_OVERHEAD_TOKENS = 64


def length_buckets(lengths: Sequence[int], overhead: int = BUCKET_OVERHEAD_TOKENS) -> list[list[int]]:
    """Indices of `lengths` grouped into runs of similar length, shortest first: the grouping that
    minimises the padded tokens (each group padded to its longest) plus `overhead` per group.
    Every index is in exactly one group."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    sizes = [lengths[i] for i in order]
    n = len(sizes)
    # best[j]: the cost of grouping the j shortest; a group order[i:j] costs (j - i) * sizes[j - 1]
    best, cut = [0.0] + [float("inf")] * n, [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j):
            cost = best[i] + (j - i) * sizes[j - 1] + overhead
            if cost < best[j]:
                best[j], cut[j] = cost, i
    groups, j = [], n
    while j > 0:
        groups.append(order[cut[j] : j])
        j = cut[j]
    return groups[::-1]


def bucketed_scores(
    model: torch.nn.Module, cross_encoder: CrossEncoder, pairs: Sequence[Pair], overhead: int = BUCKET_OVERHEAD_TOKENS
) -> torch.Tensor:
    """Scores of `pairs` (N,), in their order, from one forward pass of `model` per group of
    `length_buckets`: each group is padded to its own longest pair, not to the longest of all. Each
    pair's score is the one a single padded pass gives, within float rounding (padding is masked);
    only the padded arithmetic is saved. `model` is `cross_encoder` or a wrapper whose forward is
    its forward (call it once per backward under DDP: pass one group, overhead=inf, there)."""
    groups = length_buckets([len(p) for p in pairs], overhead)
    if len(groups) == 1:
        return model(**cross_encoder.collate(pairs))
    scores = torch.cat([model(**cross_encoder.collate([pairs[i] for i in group])) for group in groups])
    where = torch.empty(len(pairs), dtype=torch.long)
    where[torch.tensor([i for group in groups for i in group])] = torch.arange(len(pairs))
    return scores[where.to(scores.device)]


def is_saved(name_or_path: str) -> bool:
    """Whether `name_or_path` is a folder written by `CrossEncoder.save` (not a bare backbone)."""
    return bool(name_or_path) and (Path(name_or_path) / SETTINGS_FILE).is_file()


def _read_settings(path: str) -> dict:
    file = Path(path) / SETTINGS_FILE
    if not file.is_file():
        return {}
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{file}: not valid JSON ({error})") from error
