"""Learning curves on Cranfield: validation nDCG@10 of each trained method against its training budget.

Budget x1 is what the demo profile gives the method on Cranfield (the `examples/cranfield.yaml`
settings over the demo profiles); x4 and x16 multiply its epochs. For each method, fold and seed
the method trains on the rotation's training queries (the collection's 5 folds: test fold i,
validation fold i+1, training the rest, as `make demo` rotates them) and reranks the validation
queries' BM25 candidates after every epoch; each point is the validation nDCG@10 of the weights at
that budget (the epoch it ends), and beside it the weights the trainer would have kept (the best
validation epoch up to that budget). BM25's validation nDCG@10 over the same queries is the
horizontal line. Points are averaged over the folds and seeds run.

One run per method serves every budget when its learning rate is constant (GHRM and the
interaction baselines: their epoch e is the same whatever the number of epochs, since each epoch's
batches are drawn from a generator seeded by (seed, epoch)): it trains for the largest budget and is
read at the others. Methods with a decaying schedule (the cross-encoder "bert": warm-up then
linear decay to 0 at the last step) train once per budget, since a 2-epoch run is not the first
2 epochs of a 32-epoch one.

"cet" (CET's coupled relevance and selection cross-encoders, `dagster_ir.methods.cet`, the ranker the
`cet` asset names "cet": naive's negatives, CET's inverse-propensity-weighted loss, the profile's tau)
is trained as the asset trains it on a unit with the demo profile (Cranfield's YAML sets nothing for
it): the simulated sparse labels of `sparse_qrels` (at most one relevant document of BM25's top 10 per
query, seed 42), negatives drawn afresh every epoch from the strong run's top 20 (the dense run of the
bundled MiniLM, passages at 128 tokens, as `dense_embeddings` and `candidate_runs` make it;
`--cet-candidates bm25` takes BM25's instead) and the first 2 MiniLM layers at 64 tokens, 1 epoch in
batches of 8 queries, lr 2e-4 with warm-up 0.1 then linear decay. Its budget xb is b epochs (b times
the steps: one step per 8 labelled training queries), and since the learning rate decays to 0 at the
last step it trains once per budget. It is scored after every epoch by the validation nDCG@10 (all
judgments) of R reranking the strong run's top 20; the asset keeps the epoch with the best MRR@10
against the validation queries' sparse labels instead, so the "kept" point here is the best epoch by
nDCG@10, as for the other methods. The dense run's own validation nDCG@10 is a second horizontal line
in its figure (the order CET reorders) and a note under the table.

"neural-model1" and "bert-model1" (`dagster_ir.methods.model1.neural` and `.bert`) train as the
`neural_model1` and `bert_model1` assets train them on a unit, demo profile (Cranfield's YAML sets
nothing for them): per epoch one (query, judged positive, negative) triple per training query, the
negatives drawn from BM25's top 500 (20 per positive), the margin loss summed over the batch, and
each epoch scored by the nDCG@10 of reranking the validation queries' BM25 top `dev_depth` (10 for
neural Model 1; 5 for BERT-Model1, whose figure then also draws BM25's top 5 as it stands, the
order it reorders). Neural Model 1: 3 epochs of batches of 32 at lr 1e-2, warm-up over the first
10% of the steps, then constant times 0.9 after each epoch; xb is 3b epochs. BERT-Model1: the
bundled MiniLM with the Model 1 layer, 1 epoch of batches of 8 capped at 24 steps, warm-up then
linear decay; xb is b epochs and a cap of 24b steps. Both train once per budget: the warm-up (a
share of all steps) and BERT-Model1's decay depend on the budget.

Methods: "bert" (the cross-encoder fine-tuned from the bundled MiniLM, `dagster_ir.neural.finetune`,
demo profile with Cranfield's 2 epochs uncapped at 5e-5), "ghrm" (demo profile, 10 epochs of 32 batches;
`selection_measure` set to nDCG@10 here, the demo selects on nDCG@20), and any of the neural
baselines (`dagster_ir.methods.baselines`, demo profile: 4 epochs of at most 24 steps of 16):
"drmm", "knrm", "co-pacrr", ... Word vectors are the bundled MiniLM's input embeddings (the word2vec
asset's default), lengths read off the collection (the assets' default).

Writes `<out>/<method>.png` (one figure per method), `<out>/learning_curves.csv` (one row per method,
fold, seed and budget) and `<out>/learning_curves.md` (the means). Figures depend on the machine's
load; they are indicative.

    PYTHONPATH=. .venv/bin/python benchmarks/learning_curves.py
        [--methods knrm drmm co-pacrr ghrm cet neural-model1 bert-model1 bert]
        [--folds 0] [--seeds 0] [--budgets 1 4 16] [--out benchmarks/out/learning_curves] [--cranfield PATH]
        [--cet-candidates dense|bm25]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import polars as pl
import torch

from dagster_ir.collections import SplitConfig, fold_assignment, offset_seeds, read_cranfield, split_queries
from dagster_ir.collections.lengths import collection_lengths
from dagster_ir.evaluation import evaluate_run
from dagster_ir.methods.baselines import protocol as baselines
from dagster_ir.methods.baselines.reranker import MODELS as BASELINE_MODELS
from dagster_ir.methods.baselines.reranker import profile as baseline_profile
from dagster_ir.methods.cet import model as cet
from dagster_ir.methods.cet.lab import LabData, lab_negatives, rerank_with
from dagster_ir.methods.ghrm import protocol as ghrm
from dagster_ir.methods.ghrm.model import profile as ghrm_profile
from dagster_ir.methods.ghrm.text import tokens
from dagster_ir.methods.ghrm.word2vec import PROFILES as WORD2VEC_PROFILES
from dagster_ir.methods.ghrm.word2vec import collection_words
from dagster_ir.methods.model1 import bert as model1_bert
from dagster_ir.methods.model1 import candidates as top_of
from dagster_ir.methods.model1 import collection_stats, wordpiece_vocabulary
from dagster_ir.methods.model1 import neural as model1_neural
from dagster_ir.negatives import sample_negatives
from dagster_ir.negatives.pooling import PoolingConfig, simulate_sparse_labels
from dagster_ir.neural import finetune
from dagster_ir.neural.device import resolve_placement
from dagster_ir.neural.training import unwrap
from dagster_ir.retrieval.dense import DenseConfig, dense_search, encode, passage_text
from dagster_ir.retrieval.lucene import Bm25Config, build_index, search
from dagster_ir.schemas import NEGATIVES
from dagster_ir.storage.atomic import atomic_path, write_text_atomic

DEFAULT_CRANFIELD = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "cranfield"
DEFAULT_OUT = Path(__file__).resolve().parent / "out" / "learning_curves"
MEASURE = "nDCG@10"
MODEL1 = {"neural-model1": model1_neural, "bert-model1": model1_bert}
METHODS = ("bert", "ghrm", "cet", *MODEL1, *BASELINE_MODELS)
DENSE = DenseConfig(max_length=128)  # the dense_embeddings asset's demo default (the bundled MiniLM)


@dataclass(frozen=True)
class Inputs:
    """Cranfield as the demo reads it: texts, qrels, the 5 folds and BM25's top 100."""

    corpus: pl.DataFrame
    queries: pl.DataFrame
    qrels: pl.DataFrame
    splits: pl.DataFrame
    bm25: pl.DataFrame
    workdir: Path
    vectors: object = None  # the MiniLM input embeddings of the collection's words (built on first use)
    dense: object = None  # the dense run (top 100 of the bundled MiniLM bi-encoder; built on first use)
    deep: object = None  # BM25's top 1000 (the candidate_runs asset's depth: Model 1's negatives; on first use)
    cet_candidates: str = "dense"  # the run CET takes negatives from and reranks (the asset's strong run)

    def roles(self, fold: int) -> dict[str, list[str]]:
        roles = fold_assignment(self.splits, fold)
        return {r: roles.filter(pl.col("role") == r)["query_id"].sort().to_list() for r in ("train", "validation")}

    def word_vectors(self):
        if self.vectors is None:
            from dagster_ir.neural.word_vectors import embedding_vectors

            config = WORD2VEC_PROFILES["demo"]
            words = collection_words(ghrm.corpus_texts(self.corpus), config)
            object.__setattr__(self, "vectors", embedding_vectors(words))
        return self.vectors

    def dense_run(self) -> pl.DataFrame:
        """The `candidate_runs` asset's "dense" run: the corpus passages and the queries embedded by the
        bundled MiniLM at 128 tokens (`dense_embeddings`' demo default), exact inner-product top 100."""
        if self.dense is None:
            passages = self.corpus.select("doc_id", passage=passage_text())
            docs = encode(passages["passage"].to_list(), DENSE)
            queries = encode(self.queries["text"].to_list(), DENSE)
            run = dense_search(docs, passages["doc_id"], queries, self.queries["query_id"], 100, "dense")
            object.__setattr__(self, "dense", run)
        return self.dense

    def deep_bm25(self) -> pl.DataFrame:
        """BM25's top 1000 (`candidate_runs`' depth), from the index `load_inputs` built."""
        if self.deep is None:
            run = search(
                self.workdir / "bm25-index", self.queries, k=1000, model=Bm25Config(), threads=2, run_name="bm25"
            )
            object.__setattr__(self, "deep", run)
        return self.deep

    def run(self, name: str) -> pl.DataFrame:
        return self.dense_run() if name == "dense" else self.bm25


@dataclass(frozen=True)
class Curve:
    """One training's validation score per epoch (index 0: epoch 1) and the examples one epoch sees."""

    scores: list[float]
    examples_per_epoch: int
    seconds: float
    examples: int  # the training unit's distinct examples (query, positive, negatives)
    steps: int = 0  # optimizer steps of the whole training


def load_inputs(cranfield: Path, workdir: Path) -> Inputs:
    corpus, queries, qrels = read_cranfield(cranfield)
    splits = split_queries(queries, SplitConfig())
    index = workdir / "bm25-index"
    build_index(corpus, index, threads=2)
    bm25 = search(index, queries.select("query_id", "text"), k=100, model=Bm25Config(), threads=2, run_name="bm25")
    return Inputs(corpus, queries.select("query_id", "text"), qrels, splits, bm25, workdir)


def mean_measure(run: pl.DataFrame, qrels: pl.DataFrame, query_ids: Sequence[str]) -> float:
    judged = qrels.filter(pl.col("query_id").is_in(pl.Series(list(query_ids), dtype=pl.String).implode()))
    return float(evaluate_run(run, judged, [MEASURE])["value"].mean())


# --- one trainer per kind of method ---------------------------------------------------------------


def train_baseline(name: str, inputs: Inputs, fold: int, seed: int, factor: int) -> Curve:
    """A neural baseline of the demo profile, its epochs times `factor` (constant learning rate)."""
    config = offset_seeds(baseline_profile("demo"), seed)
    tokenize = partial(tokens, config=WORD2VEC_PROFILES["demo"].text)
    found = collection_lengths(inputs.queries["text"].to_list(), baselines.corpus_texts(inputs.corpus), tokenize)
    config = replace(
        config,
        query_words=found.query_words,
        doc_words=found.doc_words,
        epochs=config.epochs * factor,
        selection_measure=MEASURE,
    )
    roles = inputs.roles(fold)
    [done] = baselines.run_baselines(
        [name],
        config,
        corpus=inputs.corpus,
        queries=inputs.queries,
        qrels=inputs.qrels,
        candidates=inputs.bm25,
        negatives=pl.DataFrame(),
        train_queries=roles["train"],
        validation_queries=roles["validation"],
        test_queries=roles["validation"][:1],
        checkpoint_root=inputs.workdir / f"{name}-f{fold}-s{seed}-x{factor}",
        tokenize=tokenize,
        vectors=inputs.word_vectors(),
    )
    per_epoch = min(done.examples, config.steps_per_epoch * config.batch_size)
    return Curve(list(done.result.dev_scores), per_epoch, done.result.seconds, done.examples, done.result.steps)


def train_ghrm(inputs: Inputs, fold: int, seed: int, factor: int) -> Curve:
    """GHRM ("ghrm" variant) of the demo profile, its epochs times `factor` (constant learning rate)."""
    config = offset_seeds(ghrm_profile("demo"), seed)
    text = config.inputs.text
    found = collection_lengths(
        inputs.queries["text"].to_list(), ghrm.corpus_texts(inputs.corpus), partial(tokens, config=text)
    )
    config = replace(
        config,
        inputs=replace(config.inputs, query_words=found.query_words, doc_words=found.doc_words),
        training=replace(config.training, epochs=config.training.epochs * factor, selection_measure=MEASURE),
    )
    data = ghrm.prepare_data(inputs.corpus, inputs.queries, inputs.qrels, inputs.bm25, inputs.word_vectors(), config)
    roles = inputs.roles(fold)
    _, result, _, _ = ghrm.train_ghrm(  # a curve of epochs: the untrained start does not compete
        data,
        config,
        "ghrm",
        roles["train"],
        roles["validation"],
        inputs.workdir / f"ghrm-f{fold}-s{seed}-x{factor}",
        keep_start=False,
    )
    positives = sum(len(p) for p, _ in ghrm.training_pools(data, roles["train"], config).values())
    return Curve(
        list(result.dev_scores),
        config.training.batches_per_epoch * config.training.pairs_per_batch,
        result.seconds,
        positives,
        result.steps,
    )


CRANFIELD_CROSS_ENCODER_LR = 5e-5  # examples/cranfield.yaml's `cross_encoder` rate (the demo profile's is 2e-4)


def train_cross_encoder(inputs: Inputs, fold: int, seed: int, factor: int) -> Curve:
    """The "bert" cross-encoder: the demo profile with Cranfield's 2 epochs uncapped at 5e-5, times `factor`."""
    config = offset_seeds(finetune.PROFILES["demo"], seed)
    placement = resolve_placement("auto", None)
    config = replace(
        config,
        train=replace(
            config.train,
            epochs=2 * factor,
            max_steps=None,
            lr=CRANFIELD_CROSS_ENCODER_LR,
            device=placement.device,
            bf16=placement.bf16,
        ),
        dev_measure=MEASURE,
    )
    roles = inputs.roles(fold)
    pairs = finetune.training_pairs(inputs.bm25, inputs.qrels, roles["train"], config)
    evaluate = finetune.dev_evaluator(
        inputs.bm25, inputs.queries, inputs.corpus, inputs.qrels, roles["validation"], config
    )
    model = finetune.load_model("", config)
    tuned = finetune.fine_tune(
        model,
        inputs.queries,
        inputs.corpus,
        pairs,
        config,
        inputs.workdir / f"bert-f{fold}-s{seed}-x{factor}",
        evaluate=evaluate,
    )
    return Curve(list(tuned.train.dev_scores), tuned.examples, tuned.train.seconds, tuned.examples, tuned.train.steps)


def cet_config(seed: int, factor: int, candidates: str = "dense") -> cet.LabConfig:
    """The `cet` asset's demo profile for the "cet" ranker alone: seeds offset by `seed` (as a unit's
    seed offsets them), epochs times `factor`, negatives from and reranking of `candidates`."""
    config = offset_seeds(cet.profile("demo"), seed)
    placement = resolve_placement("auto", None)
    train = replace(
        config.cet.train, epochs=config.cet.train.epochs * factor, device=placement.device, bf16=placement.bf16
    )
    return replace(config, cet=replace(config.cet, train=train), methods=("cet",), taus=(), strong_run=candidates)


def sparse_labels(inputs: Inputs) -> pl.DataFrame:
    """The `sparse_qrels` asset's labels of every query (under `cv` every query is some unit's training
    or validation query): at most one relevant document of BM25's top 10, chosen at random (seed 42)."""
    return simulate_sparse_labels(inputs.bm25, inputs.qrels, inputs.queries["query_id"], PoolingConfig()).qrels


def train_cet(inputs: Inputs, fold: int, seed: int, factor: int) -> Curve:
    """CET (the "cet" ranker: R and S) of the demo profile, its epochs times `factor` (linear decay)."""
    config = cet_config(seed, factor, inputs.cet_candidates)
    roles = inputs.roles(fold)
    runs = pl.concat([inputs.bm25, inputs.run(config.strong_run)]) if config.strong_run != "bm25" else inputs.bm25
    data = LabData(
        runs,
        inputs.queries,
        inputs.corpus,
        sparse_labels(inputs),
        inputs.qrels,
        tuple(roles["train"]),
        tuple(roles["validation"]),
    )
    model = cet.CoupledRanker.build(config.cet.ranker, coupled=True, seed=config.cet.train.seed)
    draws: dict[int, list[cet.QueryPairs]] = {}

    def examples(epoch: int) -> list[cet.QueryPairs]:  # the lab's draw: naive's negatives, fresh every epoch
        if epoch not in draws:
            draws[epoch] = cet.query_pairs(lab_negatives("cet", data, config, epoch=epoch)[0])
        return draws[epoch]

    train_ids = pl.Series(roles["train"], dtype=pl.String).implode()
    pool = data.run(config.strong_run).filter(pl.col("query_id").is_in(train_ids), pl.col("rank") <= config.pair_depth)
    labels = data.sparse_qrels.filter(pl.col("query_id").is_in(train_ids))
    texts = cet.tokenize_texts(
        model.relevance,
        inputs.queries,
        inputs.corpus,
        labels["query_id"].unique(),
        pl.concat([pool["doc_id"], labels["doc_id"]]).unique(),
        config.cet.ranker.use_title,
    )
    validation = pl.Series(roles["validation"], dtype=pl.String).implode()
    candidates = data.run(config.strong_run).filter(pl.col("query_id").is_in(validation))

    def evaluate(trained: torch.nn.Module) -> float:  # R reranking the validation queries' top rerank_depth
        reranked = rerank_with(unwrap(trained).relevance, candidates, inputs.queries, inputs.corpus, config, "cet")
        return mean_measure(reranked, inputs.qrels, roles["validation"])

    state = inputs.workdir / f"cet-f{fold}-s{seed}-x{factor}"
    result = cet.train_ranker(model, examples, texts, config.cet, state, evaluate=evaluate)
    shutil.rmtree(state, ignore_errors=True)  # resumable states of two cross-encoders: not needed here
    per_epoch = len(examples(0))
    return Curve(list(result.dev_scores), per_epoch, result.seconds, per_epoch, result.steps)


def model1_config(method: str, seed: int, factor: int):
    """The `neural_model1` / `bert_model1` asset's demo profile: seeds offset by `seed`, epochs (and BERT-Model1's
    step cap) times `factor`, placed as the asset places it (neural Model 1 in float32)."""
    config = offset_seeds(MODEL1[method].PROFILES["demo"], seed)
    placement = resolve_placement("auto", None if method == "bert-model1" else False)
    steps = config.train.max_steps and config.train.max_steps * factor
    train = replace(
        config.train, epochs=config.train.epochs * factor, max_steps=steps, device=placement.device, bf16=placement.bf16
    )
    return replace(config, train=train)


def train_model1(method: str, inputs: Inputs, fold: int, seed: int, factor: int) -> Curve:
    """Neural Model 1 or BERT-Model1 as `assets.defs.model1._train_ranker` trains it on a unit: negatives from BM25's
    top 500 of the training queries' judged documents, the epoch scored by nDCG@10 reranking the validation
    queries' BM25 top `dev_depth`."""
    config = model1_config(method, seed, factor)
    roles = inputs.roles(fold)
    train_ids = pl.Series("query_id", roles["train"], dtype=pl.String)
    validation_ids = pl.Series("query_id", roles["validation"], dtype=pl.String)
    judged = inputs.qrels.filter(pl.col("query_id").is_in(train_ids.implode()))
    negatives = sample_negatives(inputs.deep_bm25(), judged, train_ids, config.negatives).negatives
    negatives = negatives.select(list(NEGATIVES)).sort(list(NEGATIVES))
    vocabulary = wordpiece_vocabulary(config.backbone)
    stats = collection_stats(inputs.corpus, vocabulary)
    if method == "neural-model1":
        model, _ = model1_neural.build_model(stats, config)
    else:
        model = model1_bert.BertModel1.from_backbone(stats, config)
    dev_run = top_of(inputs.bm25, "bm25", validation_ids, config.dev_depth)
    docs = pl.concat([negatives["pos_doc_id"], negatives["neg_doc_id"], dev_run["doc_id"]]).unique()
    texts = model1_neural.NeuralTexts(
        model1_neural.TokenizedTexts.of_queries(inputs.queries, vocabulary),
        model1_neural.TokenizedTexts.of_documents(inputs.corpus, docs, vocabulary),
    )
    state = inputs.workdir / f"{method}-f{fold}-s{seed}-x{factor}"
    result, _, _ = model1_neural.train_ranker(model, texts, negatives, state, dev_run=dev_run, qrels=inputs.qrels)
    shutil.rmtree(state, ignore_errors=True)
    per_epoch = negatives["query_id"].n_unique()  # one (query, positive, negative) triple per query and epoch
    return Curve(list(result.dev_scores), per_epoch, result.seconds, per_epoch, result.steps)


def trainer(method: str) -> tuple[Callable[[Inputs, int, int, int], Curve], bool]:
    """(train(inputs, fold, seed, factor), whether one run at the largest budget serves every budget)."""
    if method == "bert":
        return train_cross_encoder, False
    if method == "ghrm":
        return train_ghrm, True
    if method == "cet":
        return train_cet, False
    if method in MODEL1:
        return partial(train_model1, method), False
    if method in BASELINE_MODELS:
        return partial(train_baseline, method), True
    raise SystemExit(f"learning_curves: unknown method {method!r} (have {', '.join(METHODS)})")


def demo_epochs(method: str) -> int:
    if method == "bert":
        return 2
    if method == "ghrm":
        return ghrm_profile("demo").training.epochs
    if method == "cet":
        return cet.profile("demo").cet.train.epochs
    if method in MODEL1:
        return MODEL1[method].PROFILES["demo"].train.epochs
    return baseline_profile("demo").epochs


def points(method: str, inputs: Inputs, fold: int, seed: int, budgets: Sequence[int]) -> list[dict]:
    """Train `method` on one rotation and seed for `budgets` and read its validation scores there."""
    train, one_run = trainer(method)
    factors = [max(budgets)] if one_run else list(budgets)
    curves = {factor: train(inputs, fold, seed, factor) for factor in factors}
    validation = inputs.roles(fold)["validation"]
    bm25 = mean_measure(inputs.bm25, inputs.qrels, validation)
    name, run = candidates_of(method, inputs)
    reference = (name, bm25 if name == "bm25" else mean_measure(run, inputs.qrels, validation))
    return budget_rows(method, fold, seed, budgets, demo_epochs(method), curves, bm25, reference)


def candidates_of(method: str, inputs: Inputs) -> tuple[str, pl.DataFrame]:
    """(name, run) of the candidates `method` reranks on the validation queries: "bm25" (its top 100), the
    CET strong run, or "bm25 top k" when a Model 1 ranker validates on fewer than 10 of BM25's."""
    if method == "cet":
        return inputs.cet_candidates, inputs.run(inputs.cet_candidates)
    if method in MODEL1 and (depth := MODEL1[method].PROFILES["demo"].dev_depth) < 10:
        return f"bm25 top {depth}", inputs.bm25.filter(pl.col("rank") <= depth)
    return "bm25", inputs.bm25


def budget_rows(
    method: str,
    fold: int,
    seed: int,
    budgets: Sequence[int],
    epochs: int,
    curves: dict[int, Curve],
    bm25: float,
    candidates: tuple[str, float] | None = None,
) -> list[dict]:
    """One row per budget b: the validation score after `epochs` * b epochs and the best one up to there.

    `curves` holds one training per budget, or a single one (at the largest budget) read at every budget.
    `candidates`: (name, validation score) of the run the method reranks (default: BM25's).
    """
    candidates = candidates or ("bm25", bm25)
    rows = []
    for budget in budgets:
        curve = curves.get(budget) or curves[max(curves)]
        seen = curve.scores[: epochs * budget]
        if len(seen) < epochs * budget:
            raise ValueError(f"{method}: budget x{budget} needs {epochs * budget} epochs, the training ran {len(seen)}")
        rows.append(
            {
                "method": method,
                "fold": fold,
                "seed": seed,
                "budget": f"x{budget}",
                "epochs": len(seen),
                "unit_examples": curve.examples,
                "examples_seen": len(seen) * curve.examples_per_epoch,
                "validation_at_budget": seen[-1],
                "validation_kept": max(seen),
                "kept_epoch": seen.index(max(seen)) + 1,
                "bm25": bm25,
                "candidates": candidates[0],
                "candidates_score": candidates[1],
                "train_seconds": round(curve.seconds * len(seen) / len(curve.scores), 1),
                "train_steps": curve.steps * len(seen) // len(curve.scores),
                "one_run": len(curves) == 1 and len(budgets) > 1,
            }
        )
    return rows


# --- outputs --------------------------------------------------------------------------------------


def summary(rows: pl.DataFrame) -> pl.DataFrame:
    """Means over folds and seeds per (method, budget)."""
    return rows.group_by("method", "budget", maintain_order=True).agg(
        pl.col("examples_seen").mean(),
        pl.col("validation_at_budget").mean(),
        pl.col("validation_kept").mean(),
        pl.col("bm25").mean(),
        pl.len().alias("runs"),
        pl.col("train_seconds").mean(),
        pl.col("train_steps").mean(),
        pl.col("candidates").first(),
        pl.col("candidates_score").mean(),
    )


def plot(method: str, table: pl.DataFrame, path: Path) -> None:
    from matplotlib.figure import Figure

    from dagster_ir.evaluation.plots import figure_to_png_bytes

    part = table.filter(pl.col("method") == method)
    fig = Figure(figsize=(5.5, 3.6), layout="constrained")
    ax = fig.subplots()
    x = part["examples_seen"].to_list()
    ax.plot(x, part["validation_at_budget"].to_list(), marker="o", label=f"{method}: weights at the budget")
    ax.plot(x, part["validation_kept"].to_list(), marker="*", linestyle="--", label=f"{method}: best epoch so far")
    ax.axhline(part["bm25"][0], color="grey", linestyle=":", label="BM25")
    if part["candidates"][0] != "bm25":  # the run the method reorders, when it is not BM25's
        ax.axhline(
            part["candidates_score"][0],
            color="tab:green",
            linestyle="-.",
            label=f"{part['candidates'][0]} (the candidates reranked)",
        )
    ax.set_xscale("log", base=2)
    ax.set_xticks(x, [f"{b}\n{int(e)}" for b, e in zip(part["budget"], x, strict=True)])
    ax.set_xlabel("training budget (demo = x1) / examples seen")
    ax.set_ylabel(f"validation {MEASURE}")
    ax.set_title(f"{method} on Cranfield (mean of {part['runs'][0]} fold x seed runs)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    with atomic_path(path) as tmp:
        Path(tmp).write_bytes(figure_to_png_bytes(fig))


def markdown(table: pl.DataFrame) -> str:
    lines = [
        "| method | budget | examples seen | validation nDCG@10 at budget | best epoch so far | BM25 | runs |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in table.iter_rows(named=True):
        lines.append(
            f"| {r['method']} | {r['budget']} | {r['examples_seen']:.0f} | {r['validation_at_budget']:.3f} | "
            f"{r['validation_kept']:.3f} | {r['bm25']:.3f} | {r['runs']} |"
        )
    others = table.filter(pl.col("candidates") != "bm25").unique("method", maintain_order=True)
    notes = [
        f"\n{r['method']} reranks {r['candidates']}, whose own validation {MEASURE} is {r['candidates_score']:.3f}."
        for r in others.iter_rows(named=True)
    ]
    return "\n".join(lines) + "\n" + "".join(notes)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--methods",
        nargs="+",
        default=["knrm", "drmm", "co-pacrr", "ghrm", "cet", "neural-model1", "bert-model1", "bert"],
    )
    parser.add_argument("--folds", nargs="+", type=int, default=[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--budgets", nargs="+", type=int, default=[1, 4, 16])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--cranfield", type=Path, default=DEFAULT_CRANFIELD)
    parser.add_argument(
        "--cet-candidates",
        choices=["dense", "bm25"],
        default="dense",
        help="the run CET draws negatives from and reranks (default: the asset's strong run)",
    )
    args = parser.parse_args(argv)
    for method in args.methods:
        trainer(method)  # unknown names fail before any work
    if not (args.cranfield / "cran.qry").is_file():
        raise SystemExit(
            f"learning_curves: no Cranfield files in {args.cranfield}; pass --cranfield DIR "
            "(the folder of cran.all.1400, cran.qry, cranqrel)"
        )
    if sorted(set(args.budgets)) != list(args.budgets) or min(args.budgets) < 1:
        raise SystemExit("learning_curves: --budgets must be increasing multiples >= 1, e.g. 1 4 16")
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        started = time.monotonic()
        inputs = replace(load_inputs(args.cranfield, Path(folder)), cet_candidates=args.cet_candidates)
        print(f"inputs: {time.monotonic() - started:.0f} s", flush=True)
        for method in args.methods:
            for fold in args.folds:
                for seed in args.seeds:
                    started = time.monotonic()
                    rows += points(method, inputs, fold, seed, args.budgets)
                    print(
                        f"{method} fold {fold} seed {seed}: {time.monotonic() - started:.0f} s "
                        f"{[round(r['validation_at_budget'], 3) for r in rows[-len(args.budgets) :]]}",
                        flush=True,
                    )
            frame = pl.DataFrame(rows)  # written after every method, so a long run leaves what it finished
            with atomic_path(args.out / "learning_curves.csv") as tmp:
                frame.write_csv(tmp)
            table = summary(frame)
            write_text_atomic(args.out / "learning_curves.md", markdown(table))
            plot(method, table, args.out / f"{method}.png")
    print(markdown(table))


if __name__ == "__main__":
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    main()
