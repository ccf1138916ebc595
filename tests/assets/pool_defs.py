"""Two training steps (by name) and two light steps, run by the multiprocess executor (test_pools.py)."""

import time

import dagster as dg

from assets.defs.automation import TRAINING_POOL, automate


def _slow() -> int:
    time.sleep(1.5)  # long enough for two parallel steps to overlap
    return 1


@dg.asset(group_name="php", pool=TRAINING_POOL)
def php_hp() -> int:
    """A training step: in the `training` pool."""
    return _slow()


@dg.asset(group_name="ghrm", pool=TRAINING_POOL)
def word2vec() -> int:
    """Another training step."""
    return _slow()


@dg.asset(group_name="retrieval")
def bm25_index() -> int:
    """Not a training step: not limited."""
    return _slow()


@dg.asset(group_name="retrieval")
def dense_embeddings() -> int:
    """Not a training step either."""
    return _slow()


def _job(name: str, selection: list[str]) -> dg.JobDefinition:
    defs = dg.Definitions(
        assets=automate([php_hp, word2vec, bm25_index, dense_embeddings]),
        jobs=[
            dg.define_asset_job(
                name, selection=selection, executor_def=dg.multiprocess_executor.configured({"max_concurrent": 2})
            )
        ],
    )
    return defs.resolve_job_def(name)


def training_job() -> dg.JobDefinition:
    return _job("training", ["php_hp", "word2vec"])


def light_job() -> dg.JobDefinition:
    return _job("light", ["bm25_index", "dense_embeddings"])
