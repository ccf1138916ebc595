"""The PHP group: its run configs (`config`), its assets (`assets`) and their checks (`checks`)."""

from assets.defs.php.assets import cross_encoder, php_assets, reranked_runs
from assets.defs.php.checks import php_checks
from assets.defs.php.config import CrossEncoderSettings, PhpBaselineSettings, PhpSettings, RerankSettings

__all__ = [
    "CrossEncoderSettings",
    "PhpBaselineSettings",
    "PhpSettings",
    "RerankSettings",
    "cross_encoder",
    "php_assets",
    "php_checks",
    "reranked_runs",
]
