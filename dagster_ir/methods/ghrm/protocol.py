"""Training GHRM and reranking with it under the paper's fold protocol.

`prepare_data` builds what every variant and fold shares: the vocabulary, the document graphs
(built on first use), the query terms and the candidate run. `run_folds` then rotates the k folds
of `query_splits` (`fold_roles`: test fold i, validation fold i+1 mod k, training the rest; 60/20/20
for k=5). Per rotation it

1. gives every training query (and no other) its pools from its BM25 top `train_depth` (by default
   `rerank_depth`, the depth validation and test rerank: `TrainingConfig.pair_depth`): positives
   are the documents judged relevant, negatives the others (`training_pools`). This follows CEDR
   (MacAvaney et al. 2019), whose setting the paper adopts; positives BM25 did not retrieve are
   left out, because they teach a matching model the opposite of what reranking the top needs (on
   wiki-car BM25 itself orders only 34% of such pairs correctly); the authors' code draws its
   positives from all the query's judged documents. Queries without a positive or a negative
   there are not trained on (the authors' code drops queries without positives too);
2. trains with the shared loop (`dagster_ir.neural.training.train`): each epoch is
   `batches_per_epoch` batches; a batch holds `pairs_per_batch` distinct training queries (drawn
   with replacement only when there are fewer), each with one positive and one negative drawn
   uniformly from its pools (`sample_batch`; the paper: 32 batches of 16 positive and 16
   negative pairs, the authors' code draws them so); pairwise hinge loss; Adam with a constant
   learning rate (AdamW without weight decay is Adam);
3. after every epoch reranks the validation queries' BM25 top `rerank_depth` and scores
   `selection_measure` against their qrels; the best epoch's weights are kept, or the freshly
   initialised start's when they score above every epoch (`against_start`). Test queries are
   never scored before this choice is made;
4. reranks the test fold's candidates with the chosen weights (and the validation fold's, kept as
   `FoldResult.validation_run` for the first-stage interpolation, `dagster_ir.fusion.interpolate`).

The test runs of the k rotations cover every query once; `run_folds` concatenates them into one run
(RUN columns plus `fold`, the rotation whose test fold held the query), and `fold_evaluation`
scores it as the paper reports: every query by the model whose test fold held it.

The authors' code picks the epoch on the test fold's own queries; we pick it on the validation
fold (the paper says its hyperparameters were tuned on validation), so test queries stay unseen.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import NamedTuple

import numpy as np
import polars as pl
import torch
from gensim.models import KeyedVectors
from safetensors.torch import load_model

from dagster_ir.collections import fold_assignment
from dagster_ir.evaluation import evaluate_run
from dagster_ir.fusion.interpolate import interpolated_run
from dagster_ir.methods.ghrm.inputs import GraphBatch, GraphStore, InputConfig, Vocabulary, build_vocabulary, collate
from dagster_ir.methods.ghrm.model import GHRM, GHRMConfig, ModelConfig, hinge_loss, variant_config
from dagster_ir.neural.threads import torch_threads
from dagster_ir.neural.training import BEST_DIR, MODEL_FILE, TrainConfig, TrainResult, against_start, train
from dagster_ir.retrieval.runs import strictly_decreasing, top_k
from dagster_ir.schemas import QRELS, QUERIES, QUERY_SPLITS, RUN, validate
from dagster_ir.storage.atomic import write_text_atomic

CONFIG_FILE = "ghrm.json"
Triple = tuple[str, str, str]  # (query_id, positive doc_id, negative doc_id)
Pools = dict[str, tuple[list[str], list[str]]]  # query_id -> (positive doc_ids, negative doc_ids)


@dataclass(frozen=True, eq=False)
class GHRMData:
    """What GHRM reads for one collection, shared by every variant and fold."""

    vocabulary: Vocabulary
    graphs: GraphStore
    query_terms: dict[str, np.ndarray]  # query_id -> word ids (at most M)
    candidates: pl.DataFrame  # RUN rows: the first-stage run to rerank and to draw negatives from
    qrels: pl.DataFrame
    inputs: InputConfig


def document_text(title: str | None, text: str | None) -> str:
    """What GHRM reads of a document: its title (if any) followed by its text."""
    return " ".join(part for part in (title, text) if part)


def prepare_data(
    corpus: pl.DataFrame | pl.LazyFrame,
    queries: pl.DataFrame,
    qrels: pl.DataFrame,
    run: pl.DataFrame,
    vectors: KeyedVectors,
    config: GHRMConfig,
) -> GHRMData:
    """GHRM's inputs: vocabulary and IDF over the whole corpus, graphs for the documents it may score.

    `run` is the first-stage run (one run_name); only its top max(rerank_depth, train_depth) is kept and
    the documents it holds get graphs, so memory follows the candidates, not the corpus.
    """
    validate(queries, QUERIES, "queries")
    validate(qrels, QRELS, "qrels")
    validate(run, RUN, "run")
    if run["run_name"].n_unique() > 1:
        raise ValueError(f"prepare_data: pass one candidate run, got {sorted(run['run_name'].unique())}")
    training = config.training
    candidates = top_k(run, max(training.rerank_depth, training.pair_depth))
    lazy = corpus.lazy()
    vocabulary = build_vocabulary(corpus_texts(lazy), vectors, config.inputs)
    needed = candidates["doc_id"].unique()
    docs = lazy.filter(pl.col("doc_id").is_in(needed.implode())).select("doc_id", "title", "text").collect()
    texts = {d: document_text(t, x) for d, t, x in docs.iter_rows()}
    terms = {
        q: vocabulary.encode(t, config.inputs.query_words) for q, t in queries.select("query_id", "text").iter_rows()
    }
    return GHRMData(vocabulary, GraphStore(texts, vocabulary, config.inputs), terms, candidates, qrels, config.inputs)


def corpus_texts(corpus: pl.DataFrame | pl.LazyFrame, chunk: int = 50_000) -> Iterator[str]:
    """Every document's `document_text`, streamed `chunk` rows at a time."""
    corpus, offset = corpus.lazy(), 0
    while True:
        part = corpus.slice(offset, chunk).select("title", "text").collect()
        if part.height == 0:
            return
        yield from (document_text(t, x) for t, x in part.iter_rows())
        offset += chunk


# --- scoring ------------------------------------------------------------------------------------


def score_pairs(model: GHRM, data: GHRMData, pairs: Sequence[tuple[str, str]]) -> torch.Tensor:
    """rel(q, d) for (query_id, doc_id) pairs, as one batch (gradients flow)."""
    return model(_collate_pairs(data, pairs))


def _collate_pairs(data: GHRMData, pairs: Sequence[tuple[str, str]]) -> GraphBatch:
    graphs = [data.graphs[doc_id] for _, doc_id in pairs]
    queries = [data.query_terms[query_id] for query_id, _ in pairs]
    return collate(graphs, queries, data.vocabulary, data.inputs.query_words)


# collated validation batches are kept across epochs up to this size (their padded arrays); above it
# they are collated again at each scoring, as before (the paper profile's 300-word graphs at depth 150)
CACHE_BYTES = 256 * 2**20


@dataclass(frozen=True, eq=False)
class RerankInputs:
    """What `rerank` scores for some queries: their candidates' top `depth`, the (query, doc) pairs in batches of
    similar graph size, and those batches collated once (`batches`; None: collated at each scoring)."""

    candidates: pl.DataFrame  # RUN rows: the top `depth` of the queries' candidates
    pairs: list[tuple[str, str]]  # (query_id, doc_id), one per row of `candidates`
    chunks: list[list[int]]  # indices into `pairs`, one list per batch
    batches: list[GraphBatch] | None


def rerank_inputs(
    data: GHRMData, query_ids: Iterable[str], depth: int, batch_size: int = 256, cache_bytes: int = CACHE_BYTES
) -> RerankInputs:
    """The candidates' top `depth` of `query_ids`, batched for `score_inputs`; collated now when the padded
    batches take at most `cache_bytes` (0: never), so scoring them every epoch does not collate them again."""
    wanted = pl.Series(list(query_ids), dtype=pl.String).implode()
    candidates = top_k(data.candidates.filter(pl.col("query_id").is_in(wanted)), depth)
    pairs = list(zip(candidates["query_id"], candidates["doc_id"], strict=True))
    order = sorted(range(len(pairs)), key=lambda i: len(data.graphs[pairs[i][1]].nodes))
    chunks = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
    largest = [max([1, *(len(data.graphs[pairs[i][1]].nodes) for i in chunk)]) for chunk in chunks]
    padded = sum(len(chunk) * n * (n + data.inputs.query_words) * 4 for chunk, n in zip(chunks, largest, strict=True))
    batches = None
    if 0 < padded <= cache_bytes:
        batches = [_collate_pairs(data, [pairs[i] for i in chunk]) for chunk in chunks]
    return RerankInputs(candidates, pairs, chunks, batches)


def score_inputs(model: GHRM, data: GHRMData, inputs: RerankInputs, run_name: str) -> pl.DataFrame:
    """`inputs`' candidates rescored by `model` and re-ranked (RUN frame); see `rerank`."""
    scores = np.zeros(len(inputs.pairs))
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            for b, chosen in enumerate(inputs.chunks):
                batch = (
                    inputs.batches[b]
                    if inputs.batches is not None
                    else _collate_pairs(data, [inputs.pairs[i] for i in chosen])
                )
                scores[chosen] = model(batch).double().numpy()
    finally:
        model.train(was_training)
    rescored = inputs.candidates.select("query_id", "doc_id", pl.Series("score", scores), first_rank=pl.col("rank"))
    return strictly_decreasing(
        rescored.sort(["query_id", "score", "first_rank"], descending=[False, True, False])
        .with_columns(rank=(pl.int_range(pl.len()).over("query_id") + 1).cast(pl.Int32), run_name=pl.lit(run_name))
        .select(list(RUN))
    ).sort(["query_id", "rank"])


def rerank(
    model: GHRM, data: GHRMData, query_ids: Iterable[str], depth: int, run_name: str, batch_size: int = 256
) -> pl.DataFrame:
    """The candidates' top `depth` of `query_ids`, rescored by `model` and re-ranked (RUN frame).

    Batches hold documents of similar graph size (less padding). Ties keep the first-stage order
    (`strictly_decreasing`: tied scores move down a few float64 steps, so evaluators keep it too).
    To score the same queries again and again (validation, every epoch), build `rerank_inputs` once
    and call `score_inputs`: the same scores, without collating the batches again.
    """
    return score_inputs(model, data, rerank_inputs(data, query_ids, depth, batch_size, cache_bytes=0), run_name)


def mean_measure(run: pl.DataFrame, qrels: pl.DataFrame, query_ids: Sequence[str], measure: str) -> float:
    """Mean of `measure` over the judged queries among `query_ids` (unanswered ones count 0)."""
    judged = qrels.filter(pl.col("query_id").is_in(pl.Series(list(query_ids), dtype=pl.String).implode()))
    if judged.height == 0:
        raise ValueError(f"mean_measure: none of the {len(query_ids)} queries has qrels; cannot compute {measure}")
    return float(evaluate_run(run, judged, [measure])["value"].mean())


# --- training -----------------------------------------------------------------------------------


def training_pools(data: GHRMData, query_ids: Sequence[str], config: GHRMConfig) -> Pools:
    """Per query of `query_ids`: its judged-relevant and its other documents in the BM25 top `pair_depth`
    (`train_depth`, else `rerank_depth`); only those queries' qrels are read.

    Queries lacking either are left out; doc ids are sorted, so the pools do not depend on row order.
    """
    wanted = pl.Series(list(query_ids), dtype=pl.String).implode()
    pool = top_k(data.candidates.filter(pl.col("query_id").is_in(wanted)), config.training.pair_depth)
    relevant = data.qrels.filter(pl.col("relevance") > 0).select("query_id", "doc_id", positive=pl.lit(True))
    labelled = pool.join(relevant, on=["query_id", "doc_id"], how="left").with_columns(
        pl.col("positive").fill_null(False)
    )
    grouped = labelled.group_by("query_id").agg(
        positives=pl.col("doc_id").filter(pl.col("positive")).sort(),
        negatives=pl.col("doc_id").filter(~pl.col("positive")).sort(),
    )
    return {q: (list(p), list(n)) for q, p, n in grouped.sort("query_id").iter_rows() if len(p) and len(n)}


def sample_batch(pools: Pools, size: int, rng: np.random.Generator) -> list[Triple]:
    """`size` distinct queries of `pools` (with replacement only when fewer), one positive and one negative each."""
    queries = sorted(pools)
    picks = rng.choice(len(queries), size=size, replace=len(queries) < size)
    batch = []
    for i in picks:
        positives, negatives = pools[queries[i]]
        batch.append((queries[i], positives[rng.integers(len(positives))], negatives[rng.integers(len(negatives))]))
    return batch


def make_model(config: ModelConfig, query_words: int, seed: int) -> GHRM:
    """A freshly initialised GHRM, seeded."""
    torch.manual_seed(seed)
    return GHRM(config, query_words)


def train_ghrm(
    data: GHRMData,
    config: GHRMConfig,
    variant: str,
    train_queries: Sequence[str],
    validation_queries: Sequence[str],
    checkpoint_dir: str | Path,
    validation: RerankInputs | None = None,
    keep_start: bool = True,
) -> GHRMTrained:
    """Train one variant on `train_queries`, choosing the epoch on `validation_queries` only.

    Returns the model with the kept weights: the best validation epoch's, or, with `keep_start`, the
    freshly initialised start's when no epoch scores above it on validation (then they are also what
    `checkpoint_dir/best/` holds, so `load_ghrm` loads them). `checkpoint_dir` gets the shared loop's
    checkpoints (resumed when they match) and `ghrm.json` (the settings to rebuild the model).
    `validation`: `rerank_inputs` of `validation_queries` at `rerank_depth`, built here when not given;
    every epoch scores these same batches.
    """
    training = config.training
    pools = training_pools(data, train_queries, config)
    if not pools:
        raise ValueError(
            f"train_ghrm: none of the {len(train_queries)} training queries has both a judged-relevant "
            f"and another document in the BM25 top {training.pair_depth}"
        )
    model_config = variant_config(config.model, variant)
    model = make_model(model_config, data.inputs.query_words, training.seed)
    _write_model_config(Path(checkpoint_dir), model_config, data.inputs.query_words)

    def make_batches(epoch: int, rng: np.random.Generator) -> list[list[Triple]]:
        return [sample_batch(pools, training.pairs_per_batch, rng) for _ in range(training.batches_per_epoch)]

    def loss_fn(module: torch.nn.Module, batch: Sequence[Triple]) -> tuple[torch.Tensor, dict[str, float]]:
        pairs = [(q, pos) for q, pos, _ in batch] + [(q, neg) for q, _, neg in batch]
        scores = score_pairs(module, data, pairs)
        positive, negative = scores[: len(batch)], scores[len(batch) :]
        return hinge_loss(positive, negative), {"accuracy": float((positive > negative).float().mean())}

    if validation is None:
        validation = rerank_inputs(data, validation_queries, training.rerank_depth, training.eval_batch_size)

    def evaluate(module: torch.nn.Module) -> float:
        run = score_inputs(module, data, validation, variant)
        return mean_measure(run, data.qrels, validation_queries, training.selection_measure)

    loop = TrainConfig(
        lr=training.lr,
        warmup_ratio=0.0,
        schedule=training.schedule,
        weight_decay=0.0,
        epochs=training.epochs,
        batch_size=training.pairs_per_batch,
        seed=training.seed,
        max_grad_norm=None,
    )
    result, start_score, kept_start = against_start(
        model,
        evaluate if keep_start else None,  # a start that cannot be kept is not scored
        partial(train, model, make_batches, loss_fn, loop, checkpoint_dir, evaluate=evaluate),
        checkpoint_dir=checkpoint_dir,
    )
    return GHRMTrained(model, result, start_score, kept_start)


class GHRMTrained(NamedTuple):
    """`train_ghrm`'s model (the kept weights), its training record, the start's validation score (None
    when the start did not compete) and whether the start was kept."""

    model: GHRM
    result: TrainResult
    start_score: float | None
    kept_start: bool


def _write_model_config(folder: Path, config: ModelConfig, query_words: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomic(folder / CONFIG_FILE, json.dumps({"model": asdict(config), "query_words": query_words}, indent=1))


def load_ghrm(checkpoint_dir: str | Path) -> GHRM:
    """The best-epoch model that `train_ghrm` left in `checkpoint_dir`."""
    folder = Path(checkpoint_dir)
    path = folder / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"load_ghrm: {path} is missing; is {folder} a GHRM checkpoint folder?")
    saved = json.loads(path.read_text(encoding="utf-8"))
    model_fields = {**saved["model"], "mlp_hidden": tuple(saved["model"]["mlp_hidden"])}
    model = GHRM(ModelConfig(**model_fields), int(saved["query_words"]))
    load_model(model, str(folder / BEST_DIR / MODEL_FILE))
    return model.eval()


# --- folds --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FoldResult:
    """One rotation: which queries played which role, the training record and the test run."""

    fold: int
    train_queries: list[str]
    validation_queries: list[str]
    test_queries: list[str]
    result: TrainResult
    test_run: pl.DataFrame  # RUN columns plus fold
    checkpoint_dir: Path
    validation_run: pl.DataFrame | None = None  # RUN: the chosen weights' reranking of the validation queries
    start_score: float | None = None  # the freshly initialised weights' validation score
    kept_start: bool = False  # they scored above every epoch, so they were kept

    @property
    def chosen_epoch(self) -> int:
        """The kept weights: 0 for the start, else the 1-based epoch."""
        return 0 if self.kept_start else self.result.best_epoch + 1


def run_folds(
    data: GHRMData,
    splits: pl.DataFrame,
    config: GHRMConfig,
    variant: str,
    checkpoint_root: str | Path,
    folds: Sequence[int] | None = None,
) -> list[FoldResult]:
    """Rotate the folds of `splits` (QUERY_SPLITS) for one variant; see the module docstring.

    `folds` restricts the rotations run (default: all k). Checkpoints go to `checkpoint_root/fold-<i>`.
    """
    validate(splits, QUERY_SPLITS, "query_splits")
    with torch_threads(config.training.threads):
        return _run_folds(data, splits, config, variant, checkpoint_root, folds)


def _run_folds(data, splits, config, variant, checkpoint_root, folds) -> list[FoldResult]:
    k = int(splits["fold"].max()) + 1
    results = []
    for fold in range(k) if folds is None else folds:
        roles = fold_assignment(splits, fold, folds=k)
        members = {
            role: roles.filter(pl.col("role") == role)["query_id"].to_list() for role in ("train", "validation", "test")
        }
        folder = Path(checkpoint_root) / f"fold-{fold}"
        validation = rerank_inputs(
            data, members["validation"], config.training.rerank_depth, config.training.eval_batch_size
        )
        model, result, start_score, kept_start = train_ghrm(
            data, config, variant, members["train"], members["validation"], folder, validation
        )
        test_run = rerank(
            model, data, members["test"], config.training.rerank_depth, variant, config.training.eval_batch_size
        )
        validation_run = score_inputs(model, data, validation, variant)
        results.append(
            FoldResult(
                fold,
                members["train"],
                members["validation"],
                members["test"],
                result,
                test_run.with_columns(fold=pl.lit(fold, dtype=pl.Int32)),
                folder,
                validation_run,
                start_score,
                kept_start,
            )
        )
    return results


def run_variants(
    data: GHRMData,
    splits: pl.DataFrame,
    config: GHRMConfig,
    variants: Sequence[str],
    checkpoint_root: str | Path,
    folds: Sequence[int] | None = None,
    workers: int = 1,
) -> dict[str, list[FoldResult]]:
    """`run_folds` of each of `variants` (checkpoints under `checkpoint_root/<variant>`), as {variant: results}.

    `workers` > 1 trains the (variant, rotation) pairs that many at a time, each in a worker process of
    its own (spawned: the caller may hold a JVM) with `config.training.threads` torch threads. Every
    pair is seeded on its own, so the results equal those of `workers=1`, only sooner: the demo
    profile trains on one thread, and two workers keep both cores of a 2-core machine busy.
    """
    validate(splits, QUERY_SPLITS, "query_splits")
    if workers < 1:
        raise ValueError(f"run_variants: workers must be >= 1, got {workers}")
    rotations = list(range(int(splits["fold"].max()) + 1)) if folds is None else list(folds)
    root = Path(checkpoint_root)
    jobs = [(variant, fold) for variant in variants for fold in rotations]
    if workers == 1 or len(jobs) < 2:
        return {variant: run_folds(data, splits, config, variant, root / variant, rotations) for variant in variants}
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    with ProcessPoolExecutor(
        min(workers, len(jobs)),
        mp_context=get_context("spawn"),
        initializer=_start_worker,
        initargs=(data, splits, config),
    ) as pool:
        futures = {job: pool.submit(_rotation_in_worker, job[0], str(root / job[0]), job[1]) for job in jobs}
        done = {job: future.result() for job, future in futures.items()}
    return {variant: [done[(variant, fold)] for fold in rotations] for variant in variants}


_WORKER: dict[str, object] = {}  # what a `run_variants` worker process trains on, set once per process


def _start_worker(data: GHRMData, splits: pl.DataFrame, config: GHRMConfig) -> None:
    _WORKER.update(data=data, splits=splits, config=config)


def _rotation_in_worker(variant: str, checkpoint_root: str, fold: int) -> FoldResult:
    (result,) = run_folds(_WORKER["data"], _WORKER["splits"], _WORKER["config"], variant, checkpoint_root, [fold])
    return result


def fold_run(results: Sequence[FoldResult]) -> pl.DataFrame:
    """The rotations' test runs as one run over all their queries (RUN columns plus fold)."""
    return pl.concat([r.test_run for r in results]).sort(["query_id", "rank"])


def interpolated_fold_run(
    results: Sequence[FoldResult], candidates: pl.DataFrame, qrels: pl.DataFrame, measure: str, run_name: str
) -> tuple[pl.DataFrame, list[float]]:
    """Each rotation's test run interpolated with `candidates` (the run it reranked; `dagster_ir.fusion.interpolate`)
    under the weight chosen by `measure` on that rotation's validation run, as one run (RUN plus fold); and the weights."""
    runs, weights = [], []
    for r in results:
        if r.validation_run is None:
            raise ValueError(f"interpolated_fold_run: rotation {r.fold} kept no validation run")
        mixed, choice = interpolated_run(
            r.validation_run, r.test_run.select(list(RUN)), candidates, qrels, run_name, measure
        )
        runs.append(mixed.with_columns(fold=pl.lit(r.fold, dtype=pl.Int32)))
        weights.append(choice.weight)
    return pl.concat(runs).sort(["query_id", "rank"]), weights


def fold_means(run: pl.DataFrame, qrels: pl.DataFrame, measure: str) -> list[float]:
    """Mean `measure` over each test fold's judged queries of a `fold_run` (RUN plus fold), fold by fold.

    The paper's number is the average of these; the report's mean over every query weights folds by size.
    """
    folds = run.group_by("query_id").agg(pl.col("fold").unique())
    if (folds["fold"].list.len() > 1).any():
        raise ValueError("fold_means: a query is scored by more than one fold's model")
    means = []
    for fold in sorted(run["fold"].unique().to_list()):
        part = run.filter(pl.col("fold") == fold)
        means.append(mean_measure(part, qrels, part["query_id"].unique().to_list(), measure))
    return means


def fingerprint(config: GHRMConfig, data: GHRMData, splits: pl.DataFrame) -> str:
    """A short hash of everything training reads: settings, vocabulary (words, IDF, vectors), candidates,
    qrels and folds. It names a checkpoint root, so a finished checkpoint is reused only for the same inputs."""
    digest = hashlib.sha256(json.dumps(asdict(config), sort_keys=True).encode())
    digest.update("\n".join(data.vocabulary.words).encode())
    digest.update(data.vocabulary.idf.tobytes())
    digest.update(data.vocabulary.vectors.tobytes())
    for frame, key in (
        (data.candidates, ["query_id", "doc_id", "rank"]),
        (data.qrels, ["query_id", "doc_id", "relevance"]),
        (splits, ["query_id", "fold"]),
    ):
        rows = frame.select(key).sort(key).write_csv().encode()
        digest.update(hashlib.sha256(rows).digest())
    return digest.hexdigest()[:12]
