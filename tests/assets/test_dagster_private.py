"""The private Dagster names assets/ leans on still exist (a Dagster upgrade that moves one fails here,
naming it), and no other module of assets/ imports from Dagster's private packages."""

import importlib
import re
from pathlib import Path

import dagster as dg
import pytest

from assets.lib import dagster_private

ASSETS = Path(__file__).parents[2] / "assets"


@pytest.mark.parametrize("module", sorted(dagster_private.PRIVATE_NAMES))
def test_every_private_name_still_exists(module):
    loaded = importlib.import_module(module)
    missing = [n for n in dagster_private.PRIVATE_NAMES[module] if not hasattr(loaded, n)]
    assert not missing, f"Dagster {dg.__version__} has no {module}.{missing[0]}: update assets/lib/dagster_private.py"


def test_private_attributes_still_exist():
    for dotted in dagster_private.PRIVATE_ATTRIBUTES:
        cls, attribute = dotted.split(".")
        assert hasattr(getattr(dg, cls), attribute), f"Dagster {dg.__version__} has no {dotted}"


def test_the_running_dagster_is_a_supported_minor_version():
    import tomllib

    project = tomllib.loads((ASSETS.parent / "pyproject.toml").read_text())
    supported = project["tool"]["dagster-ir"]["supported-dagster"]
    minor = ".".join(dg.__version__.split(".")[:2])
    assert minor in supported, f"dagster {dg.__version__} is not among the supported minor versions {supported}"


def test_only_dagster_private_imports_private_dagster_names():
    offenders = [
        f"{path.relative_to(ASSETS)}:{n}"
        for path in sorted(ASSETS.rglob("*.py"))
        if path.name != "dagster_private.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"dagster\._", line)
    ]
    assert not offenders, offenders


def test_stale_resolver_reports_missing_then_fresh_then_stale_with_its_cause(tmp_path):
    version = {"code": "1"}

    def build():
        @dg.asset(code_version="1")
        def upstream() -> int:
            return 1

        @dg.asset(code_version=version["code"])
        def downstream(upstream: int) -> int:
            return upstream + 1

        return [upstream, downstream]

    with dg.instance_for_test() as instance:
        io = {"io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path))}
        graph = dg.Definitions(assets=build(), resources=io).resolve_asset_graph()
        resolver = dagster_private.StaleResolver(instance, graph)
        assert resolver.status(dg.AssetKey("downstream"), None) == dagster_private.MISSING
        assert dg.materialize(build(), instance=instance, resources=io).success
        graph = dg.Definitions(assets=build(), resources=io).resolve_asset_graph()
        assert (
            dagster_private.StaleResolver(instance, graph).status(dg.AssetKey("downstream"), None)
            == dagster_private.FRESH
        )
        version["code"] = "2"
        graph = dg.Definitions(assets=build(), resources=io).resolve_asset_graph()
        resolver = dagster_private.StaleResolver(instance, graph)
        assert resolver.status(dg.AssetKey("downstream"), None) == dagster_private.STALE
        assert resolver.causes(dg.AssetKey("downstream"), None) == ["downstream: has a new code version"]
