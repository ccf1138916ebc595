"""What the Dagster UI shows of a materialization: previews, column descriptions, report headlines.

The Parquet IO manager adds to every tabular asset its row count, a preview of its first rows and
its column schema with descriptions (`COLUMN_DOCS`, from the table schemas in `dagster_ir.schemas`).
A report's asset adds `report_headline(...)`: the main table of each section as Markdown (and its
recall figure where it fits), kept under `HEADLINE_LIMIT` bytes, and `results_table(...)`: the mean
of each run and measure as one table (one metadata entry, not one number per run and measure, which
the UI's Plots tab would draw as as many one-point charts).

Size: the event log keeps every materialization's metadata, so an image is inlined only when its
PNG is under `INLINE_IMAGE_LIMIT` bytes (else the entry names its file), and `capped(...)` keeps
one event's metadata under `EVENT_METADATA_LIMIT` bytes by replacing its largest entries with a note.
"""

from __future__ import annotations

import base64
import json

import dagster as dg
import polars as pl

from dagster_ir.evaluation.report import _markdown_table
from dagster_ir.storage.parquet import frame_version

PREVIEW_ROWS = 5
PREVIEW_CHARS = 80  # longer strings are cut in the preview
HEADLINE_LIMIT = 64_000  # bytes of Markdown in one metadata entry
INLINE_IMAGE_LIMIT = 16_000  # PNG bytes an image may have to be inlined (base64) in a metadata entry
EVENT_METADATA_LIMIT = 100_000  # bytes of metadata in one materialization event

# Column descriptions by column name (the comments of dagster_ir.schemas, for the UI).
COLUMN_DOCS: dict[str, str] = {
    "article_id": "Wikipedia page id of the article",
    "title": "title (normalised for Wikipedia pages)",
    "segment_no": "segment of the article, 1 = the lead",
    "section": "heading path of the segment's first paragraph ('' for the lead)",
    "text": "plain text",
    "n_words": "words in the segment",
    "revision_id": "revision the article was read from (null if the dump has none)",
    "from_title": "redirect page title",
    "to_title": "title the redirect points to",
    "src_id": "article that holds the link",
    "src_segment": "segment of the source article that holds the link",
    "anchor_text": "the link's anchor text",
    "anchor_start": "character offset of the anchor in the segment text",
    "anchor_end": "character offset of the anchor's end in the segment text",
    "target_title": "title the link points to",
    "target_id": "article id of the link target after redirects (null: not in the corpus)",
    "dst_id": "linked article",
    "n_links": "links from src to dst in the kept text",
    "src_first_segment": "first segment of src that links to dst",
    "reciprocal": "dst links back to src",
    "back_segment": "Seg(a, d_i): segment of dst where its first link to src appears (null if none)",
    "linked_id": "d_i, the linked article",
    "group": "PHP group D1-D4",
    "doc_id": "document id",
    "query_id": "query id",
    "relevance": "graded relevance judgement",
    "score": "the ranker's score",
    "rank": "rank in the run (1 = best)",
    "run_name": "name of the run (one ranker's output)",
    "measure": "ir_measures measure name (nDCG@10, RR@10, ...)",
    "value": "the measure's value for the run and query (per-query evaluation tables)",
    "mean": "mean over queries",
    "split": "train/fusion, train/model, dev or test",
    "fold": "cross-validation fold 0..k-1",
    "pos_doc_id": "a relevant document",
    "neg_doc_id": "a sampled negative document",
    "neg_rank": "rank of the negative in the run it was drawn from",
    "sample_no": "number of the negative for its (query, positive)",
    "src_token": "source token of the translation probability",
    "tgt_token": "target token",
    "prob": "T(tgt_token | src_token)",
    "stage": "PHP stage: hp, shp or mrds",
    "pos_id": "the positive linked article d_i",
    "neg_ids": "the stage's negatives for the same (d, s)",
    "with_replacement": "fewer negatives than asked: the list repeats some",
    "seed": "seed offset of the training unit (null: not trained per seed)",
    "partition": "the asset partition the row belongs to",
    # checkpoints and other manifests: one row per trained model or built index
    "path": "file or folder the row describes (a checkpoint, an index, a vector file)",
    "init": "what the model started from (a backbone, a PHP stage or another checkpoint)",
    "examples": "training examples seen",
    "steps": "optimizer steps taken",
    "seconds": "wall-clock seconds the step took",
    "examples_per_s": "training throughput, examples per second",
    "skipped": "the stage was not trained (its checkpoint was reused)",
    "best_epoch": "epoch chosen on the validation queries (0-based)",
    "dev_score": "validation score of the kept weights (null: no validation)",
    "chosen_epoch": "weights kept on the validation queries: 0 the untrained start, else the epoch (1-based)",
    "start_score": "validation score of the untrained start (null: it did not compete)",
    "dev_ndcg10": "nDCG@10 on the validation queries at the chosen epoch",
    "dev_mrr10": "MRR@10 on the validation queries at the chosen epoch",
    "train_seed": "seed of the training run",
    "backbone": "the pre-trained encoder the model is built on",
    "model": "the encoder that embedded the documents",
    "documents": "documents indexed",
    "empty": "documents with no text left to index",
    "dim": "vector dimensions",
    "words": "words in the vocabulary",
    "epochs": "training epochs",
    "source": "the text the vectors were trained on",
    "remove_stopwords": "stop words removed before training",
    "lemmatize": "words lemmatized before training",
    "vocabulary": "which vocabulary the table is over (words or word pieces)",
    "method": "the negative-sampling method the ranker was trained with",
    "tau": "CET's threshold tau on the coupled relevance model (null: not CET)",
    "relevance_path": "checkpoint of CET's relevance model",
    "selection_path": "checkpoint of CET's selection model",
    "queries": "training queries",
    "pairs": "(query, document) training pairs",
    "false_negative_share": "share of sampled negatives that are judged relevant",
    "final_loss": "training loss at the last step",
    "fingerprint": "hash of everything the training read (config, data versions)",
    "candidates": "the first-stage run the ranker re-ranks",
    "table": "the ranker is one of Table 1's rows",
    "sweep": "the parameter swept (tau or eta; null: not a sweep point)",
    "sweep_value": "the swept parameter's value",
    "notes": "what else the trainer reported",
}
# Where a column name means something else in one table: (table, column) -> description.
TABLE_COLUMN_DOCS: dict[tuple[str, str], str] = {
    ("wiki_stats", "statistic"): "name of the corpus statistic (articles, links, group sizes, ...)",
    ("wiki_stats", "value"): "the statistic's value",
    ("php_hp", "stage"): "PHP stage of the checkpoint (hp)",
    ("php_shp", "stage"): "PHP stage of the checkpoint (shp)",
    ("php_mrds", "stage"): "PHP stage of the checkpoint (mrds)",
    ("cross_encoder", "run_name"): "name of the fine-tuned ranker (its initialisation)",
    ("cet", "run_name"): "name of the trained ranker (negative-sampling method, tau)",
    ("word2vec", "seed"): "seed of the word2vec training",
    ("model1_em", "seed"): "seed offset of the training unit",
}


def column_description(table: str | None, column: str) -> str | None:
    """What `column` of asset `table` holds: the table's own description of it, else the shared one."""
    return TABLE_COLUMN_DOCS.get((table or "", column)) or COLUMN_DOCS.get(column)


def column_schema(columns: dict[str, str], table: str | None = None) -> dg.TableSchema:
    """The `dagster/column_schema` of asset `table`: names, dtypes and the descriptions we know."""
    return dg.TableSchema(
        columns=[
            dg.TableColumn(name, dtype, description=column_description(table, name)) for name, dtype in columns.items()
        ]
    )


def results_table(summary: pl.DataFrame, measures: list[str] | tuple[str, ...]) -> dg.MetadataValue:
    """The mean of each run (rows) and measure (columns) of an `aggregate` frame, as one UI table."""
    wanted = [m for m in measures if m in set(summary["measure"].to_list())]
    runs = list(dict.fromkeys(summary["run_name"].to_list()))
    means = {(r["run_name"], r["measure"]): r["mean"] for r in summary.iter_rows(named=True)}
    columns = [
        dg.TableColumn("run_name", "string", description=COLUMN_DOCS["run_name"]),
        *(dg.TableColumn(m, "float", description=f"mean {m} over the queries") for m in wanted),
    ]
    records = [dg.TableRecord({"run_name": run, **{m: _round(means.get((run, m))) for m in wanted}}) for run in runs]
    return dg.MetadataValue.table(records=records, schema=dg.TableSchema(columns=columns))


def _round(value):
    return None if value is None else round(float(value), 4)


def metadata_size(value) -> int:
    """Bytes `value` takes in the event log (as Dagster serialises it)."""
    if isinstance(value, dg.MetadataValue):
        return len(dg.serialize_value(value))
    return len(json.dumps(value, default=str))


def capped(metadata: dict, limit: int = EVENT_METADATA_LIMIT) -> dict:
    """`metadata` under `limit` bytes: its largest entries replaced, one by one, by a note saying so."""
    sizes = {key: metadata_size(value) for key, value in metadata.items()}
    out = dict(metadata)
    for key in sorted(sizes, key=sizes.get, reverse=True):
        if sum(sizes.values()) <= limit:
            break
        out[key] = dg.MetadataValue.text(
            f"left out: {sizes[key] // 1000} KB would pass this event's "
            f"{limit // 1000} KB metadata limit (see the asset's files)"
        )
        sizes[key] = metadata_size(out[key])
    return out


def preview(frame: pl.DataFrame | pl.LazyFrame, rows: int = PREVIEW_ROWS) -> dg.MetadataValue:
    """The first `rows` rows as a UI table; long strings cut, nested values as text."""
    head = frame.head(rows)
    head = head.collect() if isinstance(head, pl.LazyFrame) else head
    columns = [
        dg.TableColumn(name, "string" if not dtype.is_numeric() and dtype != pl.Boolean else str(dtype).lower())
        for name, dtype in head.schema.items()
    ]
    records = [
        dg.TableRecord({name: _cell(value) for name, value in row.items()}) for row in head.iter_rows(named=True)
    ]
    return dg.MetadataValue.table(records=records, schema=dg.TableSchema(columns=columns))


def _cell(value):
    if value is None or isinstance(value, bool | int | float):
        return value
    text = str(value)
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def report_headline(report, full_report: str, limit: int = HEADLINE_LIMIT) -> dg.MetadataValue:
    """Each section's main table (results with significance marks) as Markdown, under `limit` bytes.

    `report` is a `dagster_ir.evaluation.Report` or `ReportBook`; `full_report` (the HTML file's path)
    is named at the end, and where sections had to be left out to stay under the limit.
    """
    return dg.MetadataValue.md(headline_markdown(report, full_report, limit))


def headline_markdown(
    report, full_report: str, limit: int = HEADLINE_LIMIT, image_limit: int = INLINE_IMAGE_LIMIT
) -> str:

    sections = getattr(report, "sections", None) or (report,)
    tail = f"\n\nFull report (every table, figures and appendices): `{full_report}`\n"
    parts, size, left_out = [f"# {report.title}"], len(report.title.encode()) + len(tail.encode()) + 2, 0
    for section in sections:
        heading = f"## {section.title}" if len(sections) > 1 else ""
        text = "\n\n".join(p for p in (heading, _markdown_table(section.tables()[0], 1)) if p)
        if size + len(text.encode()) + 2 > limit - 200:
            left_out += 1
            continue
        parts.append(text)
        size += len(text.encode()) + 2
    if left_out:
        parts.append(f"*{left_out} section(s) left out here to keep this entry under {limit // 1000} KB.*")
    figure = _headline_figure(report)
    if figure is not None and len(figure.png) <= image_limit:
        image = f"![{figure.caption}](data:image/png;base64,{base64.b64encode(figure.png).decode()})"
        if size + len(image) + 2 <= limit - 200:
            parts.append(image)
    elif figure is not None:  # too large to keep in every event: the report's file has it
        parts.append(f"*{figure.caption}: in the full report (`figures/{figure.name}.png` beside it).*")
    return "\n\n".join(parts) + tail


def _headline_figure(report):
    """The report's recall-by-depth figure (the first-stage picture), if it has one."""
    figures = getattr(report, "figures", ())
    return next((f for f in figures if f.name == "recall" or f.name.endswith("_recall")), None)


# The UI's kind badges (at most three an asset): what stores it, and what computes it where that says more.
TORCH_STEPS = frozenset(
    {
        "php_hp",
        "php_shp",
        "php_mrds",
        "php_ablations",
        "php_baselines",
        "cross_encoder",
        "neural_model1",
        "bert_model1",
        "bert_vanilla",
        "ghrm_runs",
        "ghrm_sweeps",
        "cet",
        "neural_baselines",
    }
)
COMPUTED_WITH = {
    "bm25_index": "lucene",
    "candidate_runs": "lucene",
    "word2vec": "gensim",
    "wiki_links": "duckdb",
    "wiki_link_graph": "duckdb",
    "php_groups": "duckdb",
    "wiki_stats": "duckdb",
}


def kinds_of(name: str) -> set[str]:
    """The kinds of asset `name` stored by the Parquet IO manager."""
    kinds = {"polars", "parquet"}
    if name in TORCH_STEPS:
        kinds.add("pytorch")
    elif name in COMPUTED_WITH:
        kinds.add(COMPUTED_WITH[name])
    return kinds


def with_kinds(assets: list) -> list:
    """Every materializable asset with its kinds (`kinds_of`), those it declares kept first."""
    out = []
    for item in assets:
        if isinstance(item, dg.AssetsDefinition) and item.is_materializable:
            item = item.map_asset_specs(
                lambda spec: spec if spec.kinds else spec.merge_attributes(kinds=kinds_of(spec.key.to_user_string()))
            )
        out.append(item)
    return out


def source_tags(kind: str) -> dict[str, str]:
    """The kind badge of an observable source asset (they take tags, not `kinds`)."""
    return {f"dagster/kind/{kind}": ""}


def source_metadata(observes: str, makes_stale: str) -> dict[str, str]:
    """What an observable source's data version covers, and what a change to it makes stale."""
    return {
        "observes": observes,
        "a change makes stale": makes_stale,
        "observed by": "dagster-ir update, demo, reproduce and status, before they compare data versions; "
        "in the UI, source_observation_sensor, when what they read changed",
    }


def by_content(frame: pl.DataFrame) -> dg.Output:
    """`frame` as the asset's output with a data version of its content.

    For assets that read a partitioned observable source (`collection_settings`, `collection_config`,
    ...): Dagster records such a source's version in its readers as the same hash whatever the file
    holds, so a version computed from the inputs would not change when the settings do, and the
    readers of this asset would never go stale (see tests/assets/test_data_versions.py).
    """

    return dg.Output(frame, data_version=dg.DataVersion(frame_version(frame)))


KEPT_WEIGHTS = "kept weights"  # a trained asset's entry: per run and unit, the weights its training kept
KEPT_COLUMNS = {"run_name": pl.String, "unit": pl.String, "chosen_epoch": pl.Int64, "start_score": pl.Float64,
                "dev_score": pl.Float64}  # fmt: skip


def kept_weights_entry(rows: list[dict]) -> dg.MetadataValue:
    """The `KEPT_WEIGHTS` entry of `rows` (`dagster_ir.neural.training.kept_record` plus `unit`): run_name,
    unit, chosen_epoch (0: the untrained start), start_score and dev_score (the kept weights')."""
    return dg.MetadataValue.json(
        [{k: round(v, 4) if isinstance(v := row.get(k), float) else v for k in KEPT_COLUMNS} for row in rows]
    )


def recorded_kept(instance: dg.DagsterInstance, partitions: list[tuple[str, str | None]]) -> pl.DataFrame:
    """The `KEPT_WEIGHTS` rows (KEPT_COLUMNS) that the latest materialization of each (asset, partition)
    recorded; materializations without the entry add none."""
    rows: list[dict] = []
    for asset, partition in partitions:
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(
                asset_key=dg.AssetKey(asset.split("/")), asset_partitions=None if partition is None else [partition]
            ),
            limit=1,
        ).records
        materialization = records[0].asset_materialization if records else None
        entry = materialization.metadata.get(KEPT_WEIGHTS) if materialization else None
        if entry is not None:
            rows.extend(entry.value)
    return pl.DataFrame(rows, schema=KEPT_COLUMNS, orient="row") if rows else pl.DataFrame(schema=KEPT_COLUMNS)
