"""Jobs and sensors: parse each new dump file, then rebuild the corpus-wide link assets."""


import dagster as dg

from assets.partitions import wiki_dump_partitions
from assets.resources import DataDirResource

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


@dg.sensor(job=wiki_dump_job, minimum_interval_seconds=60)
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
