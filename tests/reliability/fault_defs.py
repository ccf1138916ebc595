"""A small pipeline for the fault-injection tests, shaped like the demo's: a data asset, two training
steps in the `training` pool (through `assets.defs.automation.automate`, as the real definitions), and a
report that reads both. Each step works in short sleeps and leaves a marker file per step done
(`<data>/progress/<asset>-<n>`), and while a file `<data>/hold/<asset>` exists it stops after its
second step and waits, so a test can kill `update` at a chosen moment. A step's output depends only
on its inputs: an interrupted and resumed update must end with the tables of an uninterrupted one.
"""

import hashlib
import os
import time
from pathlib import Path

import dagster as dg
import polars as pl

from assets.defs.automation import TRAINING_POOL, automate

STEPS = 6
STEP_SECONDS = float(os.environ.get("FAULT_STEP_SECONDS", "0.1"))


def _work(name: str, frame: pl.DataFrame) -> pl.DataFrame:
    """`STEPS` short steps, a marker file after each; a deterministic table of the input."""
    root = Path(os.environ["DAGSTER_IR_DATA"])
    (root / "progress").mkdir(parents=True, exist_ok=True)
    for step in range(STEPS):
        time.sleep(STEP_SECONDS)
        (root / "progress" / f"{name}-{step}").write_text(str(os.getpid()))
        while step == 1 and (root / "hold" / name).exists():
            time.sleep(0.05)
    digest = [
        int(hashlib.blake2b(f"{name}:{v}".encode(), digest_size=4).hexdigest(), 16) / 2**32
        for v in frame["doc"].to_list()
    ]
    return frame.select("doc").with_columns(pl.Series(f"{name}_score", digest))


@dg.asset(group_name="retrieval", code_version="1")
def docs() -> pl.DataFrame:
    """The data step: a tiny corpus."""
    return _work("docs", pl.DataFrame({"doc": [f"d{i}" for i in range(20)]}))


@dg.asset(pool=TRAINING_POOL, group_name="php", code_version="1")
def php_hp(docs: pl.DataFrame) -> pl.DataFrame:
    """A training step (pool `training`)."""
    return _work("php_hp", docs)


@dg.asset(pool=TRAINING_POOL, group_name="ghrm", code_version="1")
def word2vec(docs: pl.DataFrame) -> pl.DataFrame:
    """Another training step (pool `training`)."""
    return _work("word2vec", docs)


@dg.asset(group_name="evaluation", code_version="1")
def report(php_hp: pl.DataFrame, word2vec: pl.DataFrame) -> pl.DataFrame:
    """Reads both trained tables."""
    return _work("report", php_hp.join(word2vec, on="doc"))


ASSETS = ["docs", "php_hp", "word2vec", "report"]


def definitions(root: str) -> tuple[dg.Definitions, dict]:
    from assets.lib.io_managers import PolarsParquetIOManager
    from assets.lib.resources import DataDirResource

    resources = {"io_manager": PolarsParquetIOManager(data_dir=root), "data": DataDirResource(path=root)}
    return dg.Definitions(assets=automate([docs, php_hp, word2vec, report]), resources=resources), resources
