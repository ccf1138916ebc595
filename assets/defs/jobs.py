"""Jobs and sensors: parse each new dump file; the corpus-wide link assets follow by automation.

`wiki_dump_sensor` adds a `wiki_dump` partition for every dump registered with `dagster-ir add-dump`
and launches its parse run. The corpus-wide assets (`wiki_links`, the link graph, the PHP groups,
the statistics) and what reads them are rebuilt by their eager automation conditions
(`assets.defs.automation`) once the default automation sensor is on; `wiki_graph_job` does it by hand.
Both sensors are stopped by default, as Dagster's are: start them in the UI (Automation).
"""

import dagster as dg

from assets.lib.partitions import wiki_dump_partitions
from assets.lib.resources import DataDirResource

wiki_dump_job = dg.define_asset_job(
    "wiki_dump_job",
    selection=dg.AssetSelection.assets("wiki_dump", "wiki_articles", "wiki_redirects", "wiki_raw_links"),
    description="Parse one registered dump file (one partition) into articles, redirects and links.",
)
wiki_graph_job = dg.define_asset_job(
    "wiki_graph_job",
    selection=dg.AssetSelection.assets("wiki_links", "wiki_link_graph", "php_groups", "wiki_stats"),
    description="Resolve links over every parsed dump file and rebuild the link graph and PHP groups.",
)


@dg.sensor(
    job=wiki_dump_job,
    minimum_interval_seconds=60,
    description="Adds a partition and a parse run for every dump registered with `dagster-ir add-dump`. "
    "Stopped by default: start it (and default_automation_condition_sensor, which rebuilds "
    "the corpus-wide assets after the parse) to take new dumps in while the UI runs.",
)
def wiki_dump_sensor(context: dg.SensorEvaluationContext, data: DataDirResource):
    """Adds a partition and a parse run for every dump file registered with `dagster-ir add-dump`."""
    known = set(context.instance.get_dynamic_partitions(wiki_dump_partitions.name))
    new = sorted(set(data.dumps().entries()) - known)
    return dg.SensorResult(
        run_requests=[dg.RunRequest(partition_key=key, run_key=key) for key in new],
        dynamic_partitions_requests=[wiki_dump_partitions.build_add_request(new)] if new else [],
    )


all_jobs = [wiki_dump_job, wiki_graph_job]
all_sensors = [wiki_dump_sensor]
