"""The classic neural ranking baselines of the papers' tables, as rerankers on one shared protocol.

Used by the `baselines` asset group (`neural_baselines`). One module per model: `drmm` (DRMM),
`knrm` (KNRM and Conv-KNRM: kernel pooling), `matchpyramid`, `pacrr` (PACRR and Co-PACRR), `duet`,
`bert_passages` (BERT-FirstP / MaxP) and `cedr` (CEDR-KNRM); `inputs` turns texts into the
interaction models' padded word-id batches over the `word2vec` asset's vectors (by default the
bundled MiniLM's input embeddings, `dagster_ir.neural.word_vectors`), and `reranker` holds what
they all share: the registry (`MODELS`), the profiles, training through
`dagster_ir.neural.training.train` with the epoch chosen on validation, and reranking.
The model names (`WORD_MODELS`, `BERT_MODELS`, `MODELS`) come without torch; `BaselineConfig`,
`PROFILES` and `profile` import `reranker` (and torch) when first read, so that the asset
definitions import this package without torch (see `dagster_ir.lazy`).
"""

from dagster_ir.methods.baselines.names import BERT_MODELS, MODELS, WORD_MODELS

__all__ = ["BERT_MODELS", "MODELS", "PROFILES", "WORD_MODELS", "BaselineConfig", "profile"]
_FROM_RERANKER = ("PROFILES", "BaselineConfig", "profile")


def __getattr__(name: str):
    if name in _FROM_RERANKER:
        from dagster_ir.methods.baselines import reranker

        return getattr(reranker, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
