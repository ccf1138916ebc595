"""Collections as CORPUS / QUERIES / QRELS frames: wiki-car, Cranfield, ir_datasets ids, local files.

`load_collections_config` reads which collections the project uses, `load_collection` loads one,
`split_queries` assigns query splits and folds.
"""

from dagster_ir.collections.config import (
    Collection,
    CollectionConfigError,
    CollectionSpec,
    CranfieldSpec,
    IrdsSpec,
    LocalSpec,
    WikiCarSpec,
    default_collections,
    load_collection,
    load_collections_config,
)
from dagster_ir.collections.cranfield import CranfieldFormatError, read_cranfield
from dagster_ir.collections.irds import IrdsError, load_irds
from dagster_ir.collections.local import (
    CollectionFormatError,
    iter_corpus,
    load_local,
    read_corpus,
    read_topics,
)
from dagster_ir.collections.splits import SplitConfig, fold_assignment, fold_roles, split_queries, split_query_ids
from dagster_ir.collections.wikicar import WikiCarConfig, build_wiki_car

__all__ = [
    "Collection",
    "CollectionConfigError",
    "CollectionFormatError",
    "CollectionSpec",
    "CranfieldFormatError",
    "CranfieldSpec",
    "IrdsError",
    "IrdsSpec",
    "LocalSpec",
    "SplitConfig",
    "WikiCarConfig",
    "WikiCarSpec",
    "build_wiki_car",
    "default_collections",
    "fold_assignment",
    "fold_roles",
    "iter_corpus",
    "load_collection",
    "load_collections_config",
    "load_irds",
    "load_local",
    "read_corpus",
    "read_cranfield",
    "read_topics",
    "split_queries",
    "split_query_ids",
]
