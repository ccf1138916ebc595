"""PHP settings: the stages and their groups, `PhpConfig`, the named profiles and ablations.

Stages (section 3.2): HP contrasts D1 u D2 u D3 against D4, SHP D1 u D2 against D3, MRDS D1 against D2.
Ablations are named configurations (`ablation_config`): "<stage>-only" (one stage from the
backbone), "no-mlm" (no MLM loss and unmasked inputs), "anchor-<ratio>" (e.g. "anchor-0.15"),
"negatives-<n>" (n negatives per example in every stage, Figure 5a; the examples are drawn again).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace

from dagster_ir.neural.training import TrainConfig

STAGES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "hp": (("D1", "D2", "D3"), ("D4",)),
    "shp": (("D1", "D2"), ("D3",)),
    "mrds": (("D1",), ("D2",)),
}
STAGE_ORDER = ("hp", "shp", "mrds")
GROUP_ORDER = ("D1", "D2", "D3", "D4")
FILL_NEGATIVES = ("none", "lower", "lower+random")
D4_RULES = ("cover", "literal")  # see `dagster_ir.methods.php.examples` (the paper's D4 contradiction)
MLM_HEAD_FILE = "mlm_head.safetensors"
PHP_FILE = "php.json"
IGNORE = -100  # label of tokens that are not predicted


@dataclass(frozen=True)
class PhpConfig:
    """PHP examples and pre-training settings (defaults: the paper's, see PROFILES)."""

    backbone: str = ""  # "" = the bundled all-MiniLM-L6-v2; the paper profile uses bert-base-uncased
    stages: tuple[str, ...] = STAGE_ORDER  # ("shp",) = the single-stage ablation
    hp_epochs: int = 1
    shp_epochs: int = 1
    mrds_epochs: int = 2
    n_negatives: int = 24
    max_examples: int | None = None  # per stage, a seeded sample of the examples (None = all)
    max_length: int = 512
    max_query_length: int = 256
    mlm_weight: float = 1.0  # 0: no MLM (ablation)
    anchor_mask_prob: float = 0.5
    mask_prob: float = 0.15
    exclude_eval_articles: bool = True  # leave out the articles of the fine-tuning collection's dev/test queries
    fill_negatives: str = "none"  # "none" (paper) | "lower" | "lower+random": see the module docstring
    d4_rule: str = "cover"  # "cover": D4 = every link not in s; "literal": only unidirectional ones (see examples)
    train: TrainConfig = TrainConfig(lr=1e-5, warmup_ratio=0.1, weight_decay=0.01, batch_size=24)

    def __post_init__(self) -> None:
        unknown = [s for s in self.stages if s not in STAGES]
        if unknown or not self.stages:
            raise ValueError(f"PhpConfig.stages: choose from {STAGE_ORDER}, got {self.stages}")
        if self.n_negatives < 1:
            raise ValueError(f"PhpConfig.n_negatives must be >= 1, got {self.n_negatives}")
        for name in ("anchor_mask_prob", "mask_prob"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"PhpConfig.{name} must lie in [0, 1], got {getattr(self, name)}")
        if self.mlm_weight < 0:
            raise ValueError(f"PhpConfig.mlm_weight must be >= 0, got {self.mlm_weight}")
        if self.d4_rule not in D4_RULES:
            raise ValueError(f"PhpConfig.d4_rule: choose from {D4_RULES}, got {self.d4_rule!r}")
        if self.fill_negatives not in FILL_NEGATIVES:
            raise ValueError(f"PhpConfig.fill_negatives: choose from {FILL_NEGATIVES}, got {self.fill_negatives!r}")

    def epochs(self, stage: str) -> int:
        return {"hp": self.hp_epochs, "shp": self.shp_epochs, "mrds": self.mrds_epochs}[stage]


PROFILES: dict[str, PhpConfig] = {
    "demo": PhpConfig(
        n_negatives=3, max_examples=200, max_length=96, max_query_length=48, fill_negatives="lower+random",
        train=TrainConfig(lr=1e-4, warmup_ratio=0.1, weight_decay=0.01, batch_size=8, max_steps=30),
    ),
    "paper": PhpConfig(backbone="bert-base-uncased"),
}  # fmt: skip


def ablation_config(base: PhpConfig, name: str) -> PhpConfig:
    """The settings of a named ablation: "<stage>-only", "no-mlm", "anchor-<ratio>" or "negatives-<n>"."""
    if name.endswith("-only") and name.removesuffix("-only") in STAGES:
        return replace(base, stages=(name.removesuffix("-only"),))
    if name == "no-mlm":
        return replace(base, mlm_weight=0.0)
    if name.startswith("negatives-") and name.removeprefix("negatives-").isdigit():
        return replace(base, n_negatives=int(name.removeprefix("negatives-")))
    if name.startswith("anchor-"):
        try:
            return replace(base, anchor_mask_prob=float(name.removeprefix("anchor-")))
        except ValueError:
            pass
    raise ValueError(
        f"unknown PHP ablation {name!r}: use '<stage>-only' ({', '.join(STAGE_ORDER)}), "
        "'no-mlm', 'anchor-<ratio>' or 'negatives-<n>'"
    )


def seed_of(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()[:8], "little")


def run_key(*parts: object) -> str:
    """A short stable hash of settings and input versions: names a training run's checkpoint folder."""
    return hashlib.blake2b(json.dumps(parts, sort_keys=True, default=str).encode(), digest_size=8).hexdigest()
