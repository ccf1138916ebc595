"""The Wikipedia chain and the wiki-car BM25 index as three jobs, under a chosen executor.

Loaded by name on every worker (a Dask worker or a multiprocess child) through
`dg.build_reconstructable_job("dist_defs", "stage_job", (executor, stage))`; the data directory
comes from $DAGSTER_IR_DATA, which the workers inherit.
"""

import os

import dagster as dg

from assets.defs.executors import ExecutorSettings, executor_definition

# One run per partitions definition: a dump file's parse, the corpus-wide link graph, one collection.
STAGES = {
    "dump": ["wiki_dump", "wiki_articles", "wiki_redirects", "wiki_raw_links"],
    "graph": ["wiki_links", "wiki_link_graph", "php_groups", "wiki_stats"],
    "collection": ["corpus", "queries", "qrels", "query_splits", "bm25_index"],
}
SCHEDULER_ENV = "DIST_DEFS_DASK_SCHEDULER"  # a running scheduler's address; unset: a LocalCluster per run


def executor_settings(executor: str) -> ExecutorSettings:
    if executor == "multiprocess":
        return ExecutorSettings(kind="multiprocess", max_concurrent=2)
    return ExecutorSettings(kind="dask", address=os.environ.get(SCHEDULER_ENV), n_workers=2)


def stage_job(executor: str, stage: str) -> dg.JobDefinition:
    from assets.definitions import all_assets, all_checks, resources

    defs = dg.Definitions(
        assets=all_assets,
        asset_checks=all_checks,
        resources=resources(os.environ["DAGSTER_IR_DATA"]),
        jobs=[
            dg.define_asset_job(
                stage,
                selection=dg.AssetSelection.assets(*STAGES[stage]),
                executor_def=executor_definition(executor_settings(executor)),
            )
        ],
    )
    return defs.resolve_job_def(stage)
