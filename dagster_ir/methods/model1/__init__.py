"""IBM Model 1 for retrieval (paper 001, Boytsov & Kolter): EM, neural Model 1, BERT-Model1, fusion.
Used by the `model1` asset group (`model1_em`, `neural_model1`, `model1_export`, `bert_model1`, `bert_vanilla`,
`model1_runs`, `fusion_runs`). Start reading at `train` (EM pipeline), then `tuning` (lambda and p_self on
validation queries), `neural`, `bert`, and `runs` (the Table 2 fusion rows and the paper's pairs).

Non-parametric Model 1:

vocabulary (words | word pieces) -> `iter_bitext` (queries x chunks of relevant documents,
symmetrised) -> `train_em` -> `prune` (threshold, top-N, self-translation) -> `TranslationTable`
(Parquet / GIZA text) -> `tune_model1` (lambda, p_self) -> `Model1Scorer` over a `ForwardIndex` (rerank, explain).
The neural Model 1 (`neural`) exports to the same table; BERT-Model1 (`bert`) puts the neural layer on
BERT's contextual embeddings; `bm25` is BM25 over a Model 1 vocabulary (the "BM25 (bwps)" feature) and
`runs` fuses the feature runs with BM25 by coordinate ascent (`dagster_ir.fusion`).
"""

from dagster_ir.methods.model1.bitext import (
    Bitext,
    BitextConfig,
    chunk_pairs,
    document_text,
    iter_bitext,
    symmetrise,
    training_pairs,
)
from dagster_ir.methods.model1.bm25 import TokenBm25Config, bm25_rerank, bm25_scores, query_idf_sums
from dagster_ir.methods.model1.em import EMConfig, EMIteration, EMResult, train_em
from dagster_ir.methods.model1.index import (
    CollectionStats,
    ForwardIndex,
    bag_of_tokens,
    collection_stats,
    index_collection,
)
from dagster_ir.methods.model1.runs import (
    BERT_RUN,
    BERT_SHORT_RUN,
    BERT_VANILLA_RUN,
    FEATURE_RUNS,
    PAPER_PAIRS,
    Model1RunsConfig,
    bm25_norms,
    candidates,
    fuse_with_bm25,
    fused_name,
    normalised_bm25,
)
from dagster_ir.methods.model1.scoring import Model1Scorer, ScoringConfig, explanation_markdown
from dagster_ir.methods.model1.table import (
    PruneConfig,
    TranslationTable,
    prune,
    read_giza,
    row_sums,
    with_self_prob,
    write_giza,
    write_parquet,
)
from dagster_ir.methods.model1.train import (
    PROFILES,
    Model1Config,
    Model1Training,
    collection_vocabulary,
    train_model1,
)
from dagster_ir.methods.model1.tuning import TUNING_COLUMNS, Tuned, TuningGrid, tune_model1
from dagster_ir.methods.model1.vocabulary import (
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
    "BERT_RUN",
    "BERT_SHORT_RUN",
    "BERT_VANILLA_RUN",
    "FEATURE_RUNS",
    "PAPER_PAIRS",
    "Model1RunsConfig",
    "TokenBm25Config",
    "bm25_norms",
    "bm25_rerank",
    "bm25_scores",
    "candidates",
    "fuse_with_bm25",
    "fused_name",
    "normalised_bm25",
    "query_idf_sums",
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
    "with_self_prob",
    "TUNING_COLUMNS",
    "Tuned",
    "TuningGrid",
    "tune_model1",
]
