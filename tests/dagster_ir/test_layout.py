"""The package layout's one rule: imports run downward, and one paper's package never imports another's."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "dagster_ir"
# Lower layers first; a package may import only packages of a lower layer (or its own).
LAYERS = [
    {"storage", "schemas", "settings", "provenance", "lazy"},
    {"wiki", "retrieval"},
    {"collections", "evaluation", "negatives"},
    {"fusion"},
    {"neural"},
    {"methods"},
]
LAYER_OF = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def imported_modules(path: Path) -> set[str]:
    """Every `dagster_ir.…` module named by an import statement of the file (top level or nested)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return {name for name in found if name.startswith("dagster_ir.")}


def files_of(package: str) -> list[Path]:
    target = ROOT / package
    return sorted(target.rglob("*.py")) if target.is_dir() else [target.with_suffix(".py")]


@pytest.mark.parametrize("package", sorted(LAYER_OF))
def test_imports_run_downward(package):
    upward = []
    for path in files_of(package):
        for module in imported_modules(path):
            top = module.split(".")[1]
            if top != package and LAYER_OF.get(top, len(LAYERS)) >= LAYER_OF[package]:
                upward.append(f"{path.relative_to(ROOT.parent)} imports {module}")
    assert not upward, "\n".join(upward)


def test_every_package_has_a_layer():
    packages = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith("__")}
    modules = {p.stem for p in ROOT.glob("*.py") if p.stem != "__init__"}
    assert packages | modules <= set(LAYER_OF), sorted((packages | modules) - set(LAYER_OF))


@pytest.mark.parametrize("method", ["php", "model1", "ghrm", "cet", "baselines"])
def test_methods_do_not_import_each_other(method):
    others = []
    for path in (ROOT / "methods" / method).rglob("*.py"):
        for module in imported_modules(path):
            parts = module.split(".")
            if parts[1] == "methods" and len(parts) > 2 and parts[2] != method:
                others.append(f"{path.relative_to(ROOT.parent)} imports {module}")
    assert not others, "\n".join(others)


def test_no_dagster_in_the_domain_library():
    offenders = []
    for path in ROOT.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else ([node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            )
            offenders += [f"{path}: {n}" for n in names if n == "dagster" or n.startswith("dagster.")]
    assert not offenders, offenders


def test_each_method_package_says_where_to_start():
    for method in ("php", "model1", "ghrm", "cet"):
        doc = ast.get_docstring(ast.parse((ROOT / "methods" / method / "__init__.py").read_text(encoding="utf-8")))
        assert doc and "paper 00" in doc and "Start reading" in doc, method
