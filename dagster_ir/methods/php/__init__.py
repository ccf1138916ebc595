"""PHP: progressive hyperlink prediction pre-training (paper 000, "Pre-training for IR: Are Hyperlinks Fully Explored?").
Used by the `php` asset group (`php_examples`, `php_hp` -> `php_shp` -> `php_mrds`, `php_ablations`, `cross_encoder`).
Start reading at `config` (stages, groups, profiles), then `examples`, `masking`, `model`, `stages`;
the Table 3 baselines (ICT, WLP, PROP, HARP) are `baselines` (example generators) and `baseline_training`.

A segment s of article d is the query; the articles d links to are documents in four groups
D1..D4 (`php_groups`, built in `dagster_ir.wiki.graph`). Each stage contrasts one positive against
n negatives:

    hp:   positives D1 u D2 u D3, negatives D4
    shp:  positives D1 u D2,      negatives D3
    mrds: positives D1,           negatives D2

Loss = LCE + `mlm_weight` * anchor-aware MLM; each stage starts from the previous stage's folder.
"""

from dagster_ir.methods.php.baseline_training import (
    BaselineInputs,
    baseline_loss,
    baseline_train_config,
    pairwise_hinge,
    pretrain_baseline,
)
from dagster_ir.methods.php.baselines import (
    BASELINE_EXAMPLES,
    HARP_OBJECTIVES,
    METHODS,
    BaselineConfig,
    build_baseline_examples,
)
from dagster_ir.methods.php.config import (
    D4_RULES,
    FILL_NEGATIVES,
    GROUP_ORDER,
    IGNORE,
    MLM_HEAD_FILE,
    PHP_FILE,
    PROFILES,
    STAGE_ORDER,
    STAGES,
    PhpConfig,
    ablation_config,
    run_key,
)
from dagster_ir.methods.php.examples import ExampleCounts, apply_d4_rule, build_php_examples, stage_groups
from dagster_ir.methods.php.masking import PhpInputs, anchor_token_flags, mask_tokens
from dagster_ir.methods.php.model import MlmHead, PhpModel, php_loss
from dagster_ir.methods.php.stages import StageResult, pretrain_chain, pretrain_stage, stage_train_config

__all__ = [
    "BASELINE_EXAMPLES",
    "HARP_OBJECTIVES",
    "METHODS",
    "BaselineConfig",
    "BaselineInputs",
    "baseline_loss",
    "baseline_train_config",
    "build_baseline_examples",
    "pairwise_hinge",
    "pretrain_baseline",
    "D4_RULES",
    "FILL_NEGATIVES",
    "GROUP_ORDER",
    "IGNORE",
    "MLM_HEAD_FILE",
    "PHP_FILE",
    "PROFILES",
    "STAGES",
    "STAGE_ORDER",
    "ExampleCounts",
    "MlmHead",
    "PhpConfig",
    "PhpInputs",
    "PhpModel",
    "StageResult",
    "ablation_config",
    "apply_d4_rule",
    "anchor_token_flags",
    "build_php_examples",
    "mask_tokens",
    "php_loss",
    "pretrain_chain",
    "pretrain_stage",
    "run_key",
    "stage_groups",
    "stage_train_config",
]
