"""Collections as CORPUS / QUERIES / QRELS frames: wiki-car, Cranfield, ir_datasets ids, local files.

`load_collections_config` reads which collections the project uses, `load_collection` loads one,
`split_queries` assigns query splits and folds, `units_of` lists a collection's training units
(collection, fold, seed) under its protocol and `unit_queries` gives a unit's train, validation,
fusion and test queries.
"""

from dagster_ir.collections.config import (
    Collection,
    CollectionConfigError,
    CollectionSpec,
    CranfieldSpec,
    IrdsSpec,
    LocalSpec,
    WikiCarSpec,
    collection_layout,
    default_collections,
    load_collection,
    load_collections_config,
    units_of,
)
from dagster_ir.collections.cranfield import CranfieldFormatError, read_cranfield
from dagster_ir.collections.irds import IrdsError, load_irds
from dagster_ir.collections.local import (
    CollectionFormatError,
    detect_layout,
    iter_corpus,
    load_local,
    read_corpus,
    read_local_qrels,
    read_topics,
)
from dagster_ir.collections.protocol import (
    PROTOCOLS,
    UNIT_COLUMNS,
    Protocol,
    TrainingUnit,
    UnitQueries,
    offset_seeds,
    report_query_ids,
    tag_unit,
    training_units,
    unit_queries,
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
    "PROTOCOLS",
    "Protocol",
    "SplitConfig",
    "TrainingUnit",
    "UNIT_COLUMNS",
    "UnitQueries",
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
    "detect_layout",
    "read_local_qrels",
    "collection_layout",
    "offset_seeds",
    "read_corpus",
    "read_cranfield",
    "read_topics",
    "report_query_ids",
    "split_queries",
    "split_query_ids",
    "tag_unit",
    "training_units",
    "unit_queries",
    "units_of",
]
