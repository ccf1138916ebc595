"""The PHP group's run configs (what the UI's launchpad shows): a profile ("demo" | "paper", see
`dagster_ir.methods.php.PROFILES` and `dagster_ir.neural.finetune.PROFILES`) plus optional overrides
(None keeps the profile's value; for `max_examples` and `max_steps` 0 means "no cap")."""

from dataclasses import fields, replace

import dagster as dg

from assets.lib.torchrun import TorchrunSettings
from dagster_ir.lazy import lazy_module
from dagster_ir.neural.device import Placement, resolve_placement
from dagster_ir.neural.training import TrainConfig

# the torch code, imported where a config is mapped (the definitions import this module without torch)
php = lazy_module("dagster_ir.methods.php")
finetune = lazy_module("dagster_ir.neural.finetune")


class _TrainOverrides(dg.Config):
    """Overrides of the TrainConfig inside a profile (None keeps the profile's value)."""

    lr: float | None = None
    warmup_ratio: float | None = None
    weight_decay: float | None = None
    batch_size: int | None = None
    grad_accumulation: int | None = None
    max_steps: int | None = None  # 0: no cap
    seed: int | None = None
    checkpoint_every: int | None = None
    device: str = "auto"  # "auto": CUDA when available (this process's GPU under torchrun), else the CPU
    bf16: bool | None = None  # None: bfloat16 autocast where the device has it natively (dagster_ir.neural.device)

    def train_config(self, base: TrainConfig, epochs: int | None = None) -> TrainConfig:
        values = {
            f.name: getattr(self, f.name)
            for f in fields(TrainConfig)
            if f.name in type(self).model_fields and getattr(self, f.name) is not None
        }
        if values.get("max_steps") == 0:
            values["max_steps"] = None
        if epochs is not None:
            values["epochs"] = epochs
        placement = resolve_placement(self.device, self.bf16)
        values.update(device=placement.device, bf16=placement.bf16)
        return replace(base, **values)


class PhpSettings(_TrainOverrides):
    """Maps onto `dagster_ir.methods.php.PhpConfig`: a profile plus overrides."""

    profile: str = "demo"
    backbone: str | None = None
    n_negatives: int | None = None
    max_examples: int | None = None  # 0: every example
    max_length: int | None = None
    max_query_length: int | None = None
    mlm_weight: float | None = None
    anchor_mask_prob: float | None = None
    mask_prob: float | None = None
    exclude_eval_articles: bool | None = None
    fill_negatives: str | None = None  # "none" | "lower" | "lower+random" (demo): see dagster_ir.methods.php
    d4_rule: str | None = None  # "cover" (default) | "literal": see dagster_ir.methods.php.examples
    hp_epochs: int | None = None
    shp_epochs: int | None = None
    mrds_epochs: int | None = None

    def to_domain(self) -> "php.PhpConfig":
        base = _profile(php.PROFILES, self.profile)
        values = {
            f.name: getattr(self, f.name)
            for f in fields(php.PhpConfig)
            if f.name in type(self).model_fields and getattr(self, f.name) is not None
        }
        if values.get("max_examples") == 0:
            values["max_examples"] = None
        return replace(base, **values, train=self.train_config(base.train))


class PhpStageSettings(PhpSettings):
    """The PHP settings plus the processes and nodes a stage trains on (php_hp, php_shp, php_mrds)."""

    # nproc_per_node 0 = one per GPU of the host (one on a CPU); more than one process (or node)
    # trains the stage under torchrun (DDP), else in the step's own process
    torchrun: TorchrunSettings = TorchrunSettings()


class PhpAblationSettings(PhpSettings):
    """The PHP settings plus the ablations to pre-train ("<stage>-only", "no-mlm", "anchor-<ratio>", "negatives-<n>")."""

    variants: list[str] = []
    # nproc_per_node 0 = one per GPU of the host (one on a CPU); more than one process (or node)
    # pre-trains each variant under torchrun (DDP), else in the step's own process
    torchrun: TorchrunSettings = TorchrunSettings()


class PhpBaselineSettings(PhpSettings):
    """The PHP settings (same backbone, budget, MLM, training) plus the Table 3 baselines' generators."""

    # which to pre-train, of "ict" | "wlp" | "prop" | "harp"; None: those some collection's cross_encoder
    # fine-tunes (its `inits`, default or set in the collections YAML; see `baselines_to_pretrain`)
    methods: list[str] | None = None
    baseline_negatives: int | None = None  # ICT and WLP: None = PhpConfig.n_negatives
    mu: float = 1000.0  # PROP / HARP's RQP: Dirichlet prior of the document language models
    query_length_mean: float = 3.0  # PROP / HARP's RQP: Poisson mean of a sampled word set's size
    harp_objectives: list[str] = ["rqp", "rdp"]
    # Examples generated per objective: those of smallest seeded hash, so memory is bounded on a full dump
    # (0: every example; the sample has fewer than 3,300 per objective, so the cap does not bind there)
    baseline_max_examples: int = 20_000
    # Cap each baseline at the optimizer steps PHP's three stages took together (the same budget);
    # False: the profile's own caps (max_examples, epochs of the three stages, max_steps).
    match_php_steps: bool = True
    # nproc_per_node 0 = one per GPU of the host (one on a CPU); more than one process (or node)
    # pre-trains each baseline under torchrun (DDP), else in the step's own process
    torchrun: TorchrunSettings = TorchrunSettings()

    def generator_config(self) -> "php.BaselineConfig":
        domain = self.to_domain()
        return php.BaselineConfig(
            n_negatives=self.baseline_negatives or domain.n_negatives,
            mu=self.mu,
            query_length_mean=self.query_length_mean,
            harp_objectives=tuple(self.harp_objectives),
            seed=domain.train.seed,
            max_examples=self.baseline_max_examples or None,
        )


DEFAULT_INITS = ("bert", "php", "ict", "harp")


class CrossEncoderSettings(_TrainOverrides):
    """Maps onto `dagster_ir.neural.finetune.FineTuneConfig`; `inits` picks the models to fine-tune.

    Settable per collection (`assets: {cross_encoder: ...}` in the YAML, see `assets.lib.settings`).
    """

    profile: str = "demo"
    # "bert" | "php" | "php-<stage>" | "php-<ablation>" | a Table 3 baseline of php_baselines ("ict", "wlp", ...)
    inits: list[str] = list(DEFAULT_INITS)
    backbone: str | None = None
    n_negatives: int | None = None
    max_length: int | None = None
    max_query_length: int | None = None
    epochs: int | None = None
    dev_depth: int | None = None  # candidates reranked on validation (the rerank depth)
    dev_measure: str | None = None
    train_pairs: str | None = None  # "candidates" (pairs from BM25's top train_depth) | "negatives" (the asset's)
    train_depth: int | None = None  # None: dev_depth
    select_start: bool | None = None  # the starting weights compete with every epoch on validation
    # "full" | "gated" | "gated-segments" for the models started from the backbone ("bert"); None: the
    # cross-encoder's default
    cross_attention: str | None = None
    # Evaluate the start and every epoch on the validation queries (candidate run "bm25") and keep the
    # best; False: no validation, the last step's weights are kept.
    select_on_dev: bool = True
    # Processes and nodes: nproc_per_node 0 = one per GPU of the host (one on a CPU); more than one
    # process (or node) trains each model under torchrun (DDP), else in the step's own process.
    torchrun: TorchrunSettings = TorchrunSettings()

    def to_domain(self) -> "finetune.FineTuneConfig":
        base = _profile(finetune.PROFILES, self.profile)
        values = {
            f.name: getattr(self, f.name)
            for f in fields(finetune.FineTuneConfig)
            if f.name in type(self).model_fields and getattr(self, f.name) is not None
        }
        return replace(base, **values, train=self.train_config(base.train, self.epochs))


class RerankSettings(dg.Config):
    """Which candidate run and how deep (the unit's test queries); scoring batch and device."""

    profile: str = "demo"
    candidate: str = "bm25"
    depth: int | None = None  # None: the profile's (demo 20, paper 100)
    batch_size: int = 64
    device: str = "auto"  # as CrossEncoderSettings'
    bf16: bool | None = None
    interpolate: bool = True  # also <model>+<candidate>: interpolated with the candidates, weight chosen on validation
    interpolation_measure: str = "nDCG@10"
    # also rerank with the bundled sentence-transformers model as a bi-encoder, untrained: run "bi-encoder"
    bi_encoder: bool = True

    def rerank_depth(self) -> int:
        return self.depth or _profile({"demo": 20, "paper": 100}, self.profile)

    def placement(self) -> Placement:
        return resolve_placement(self.device, self.bf16)


def _profile(profiles: dict, name: str):
    if name not in profiles:
        raise ValueError(f"unknown profile {name!r}: choose from {sorted(profiles)}")
    return profiles[name]
