"""Non-parametric IBM Model 1 for retrieval (Boytsov & Kolter): EM, pruning, export and scoring.

vocabulary (words | word pieces) -> `iter_bitext` (queries x chunks of relevant documents,
symmetrised) -> `train_em` -> `prune` (threshold, top-N, self-translation) -> `TranslationTable`
(Parquet / GIZA text) -> `Model1Scorer` over a `ForwardIndex` (rerank, explain).
The neural Model 1 lives in `dagster_ir.models.neural_model1` and exports to the same table.
"""

from dagster_ir.models.model1.bitext import (
    Bitext,
    BitextConfig,
    chunk_pairs,
    document_text,
    iter_bitext,
    symmetrise,
    training_pairs,
)
from dagster_ir.models.model1.em import EMConfig, EMIteration, EMResult, train_em
from dagster_ir.models.model1.index import (
    CollectionStats,
    ForwardIndex,
    bag_of_tokens,
    collection_stats,
    index_collection,
)
from dagster_ir.models.model1.scoring import Model1Scorer, ScoringConfig, explanation_markdown
from dagster_ir.models.model1.table import (
    PruneConfig,
    TranslationTable,
    prune,
    read_giza,
    row_sums,
    write_giza,
    write_parquet,
)
from dagster_ir.models.model1.train import (
    PROFILES,
    Model1Config,
    Model1Training,
    collection_vocabulary,
    train_model1,
)
from dagster_ir.models.model1.vocabulary import (
    KINDS,
    WORDPIECES,
    WORDS,
    Ragged,
    Vocabulary,
    build_vocabulary,
    stop_words,
    word_vocabulary,
    wordpiece_vocabulary,
)

__all__ = [
    "KINDS",
    "PROFILES",
    "WORDPIECES",
    "WORDS",
    "Bitext",
    "BitextConfig",
    "CollectionStats",
    "EMConfig",
    "EMIteration",
    "EMResult",
    "ForwardIndex",
    "Model1Config",
    "Model1Scorer",
    "Model1Training",
    "PruneConfig",
    "Ragged",
    "ScoringConfig",
    "TranslationTable",
    "Vocabulary",
    "bag_of_tokens",
    "build_vocabulary",
    "chunk_pairs",
    "collection_stats",
    "collection_vocabulary",
    "document_text",
    "explanation_markdown",
    "index_collection",
    "iter_bitext",
    "prune",
    "read_giza",
    "row_sums",
    "stop_words",
    "symmetrise",
    "train_em",
    "train_model1",
    "training_pairs",
    "word_vocabulary",
    "wordpiece_vocabulary",
    "write_giza",
    "write_parquet",
]
