"""Every asset that reads a partitioned observable source gives its output a data version of its own.

Dagster records such a source's version in a reader's provenance as the hash of its (absent)
materializations, the same whatever the file holds; a reader whose version is computed from its
inputs' would then keep its version when the file changed, and its readers would never go stale.
"""

import inspect

import dagster as dg

from assets.definitions import defs


def _partitioned_sources(graph) -> set[dg.AssetKey]:
    return {key for key in graph.observable_asset_keys if graph.get(key).partitions_def is not None}


def test_every_reader_of_a_partitioned_source_versions_its_output_by_content():
    graph = defs.resolve_asset_graph()
    sources = _partitioned_sources(graph)
    assert {"imported_runs", "collection_config", "collection_settings", "wiki_dump_file"} <= {
        k.to_user_string() for k in sources
    }
    readers = {key for key in graph.materializable_asset_keys if graph.get(key).parent_keys & sources}
    assert {"candidate_runs", "ghrm_runs", "neural_baselines", "corpus", "wiki_dump"} <= {
        k.to_user_string() for k in readers
    }
    missing = []
    for key in readers:
        assets_def = defs.resolve_assets_def(key)
        body = inspect.getsource(assets_def.op.compute_fn.decorated_fn)
        if "data_version=" not in body and "by_content(" not in body:
            missing.append(key.to_user_string())
    assert missing == [], f"readers of a partitioned observable source without a content data version: {missing}"
