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


# --- assets/: lib <- defs <- definitions <- cli ----------------------------------------------------

ASSETS = ROOT.parent / "assets"
ASSET_LAYERS = {"lib": 0, "defs": 1, "definitions": 2, "cli": 3}


def asset_layer(module: str) -> int | None:
    """The layer of `assets.<part>...` (None for the package root, `assets/__init__.py`)."""
    parts = module.split(".")
    return ASSET_LAYERS.get(parts[1]) if len(parts) > 1 else None


def asset_imports(root: Path) -> dict[str, set[str]]:
    """{module: the `assets.…` modules it imports, at the top or inside a function} for each file under `root`."""
    paths = {".".join(p.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__"): p
             for p in sorted(root.rglob("*.py"))}  # fmt: skip
    graph = {}
    for module, path in paths.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from assets.lib import settings` imports the module assets.lib.settings
                found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in paths else node.module
                          for a in node.names}  # fmt: skip
        graph[module] = {name for name in found if name in paths and name != module}
    return graph


def upward_asset_imports(root: Path) -> list[str]:
    upward = []
    for module, names in asset_imports(root).items():
        layer = asset_layer(module)
        for name in names:
            target = asset_layer(name)
            if layer is not None and target is not None and target > layer:
                upward.append(f"{module} imports {name}")
    return sorted(upward)


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles of `graph` that depth-first search meets (empty when it has none)."""
    cycles, state = [], {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return cycles


def test_assets_imports_run_downward():
    assert upward_asset_imports(ASSETS) == []
    assert {asset_layer(m) for m in asset_imports(ASSETS)} == {None, *ASSET_LAYERS.values()}


def test_assets_has_no_import_cycle():
    assert import_cycles(asset_imports(ASSETS)) == []


def test_an_upward_import_and_a_cycle_are_found(tmp_path):
    root = tmp_path / "assets"
    for package in ("lib", "defs", "cli"):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "lib" / "a.py").write_text("def f():\n    from assets.cli.terminal import table\n")
    (root / "cli" / "terminal.py").write_text("")
    (root / "defs" / "b.py").write_text("from assets.lib import a\nfrom assets.defs import c\n")
    (root / "defs" / "c.py").write_text("from assets.defs.b import x\n")
    (root / "cli" / "main.py").write_text("import assets.defs.b\n")
    assert upward_asset_imports(root) == ["assets.lib.a imports assets.cli.terminal"]
    graph = asset_imports(root)
    assert graph["assets.defs.b"] == {"assets.lib.a", "assets.defs.c"}
    assert import_cycles(graph) == [["assets.defs.b", "assets.defs.c", "assets.defs.b"]]


def unexplained_function_imports(root: Path) -> list[str]:
    """Imports inside functions under `root` whose line has no comment saying why it is not at the top."""
    found = []
    for path in sorted(root.rglob("*.py")):
        lines = path.read_text(encoding="utf-8").split("\n")
        for function in ast.walk(ast.parse("\n".join(lines), filename=str(path))):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found += [f"{path.relative_to(root.parent)}:{node.lineno}" for node in ast.walk(function)
                          if isinstance(node, (ast.Import, ast.ImportFrom)) and "#" not in lines[node.lineno - 1]]  # fmt: skip
    return sorted(set(found))


def test_an_import_inside_a_function_of_assets_says_why(tmp_path):
    # e.g. `# torch: loaded when the step runs`, `# dagster: not loaded by --help`
    assert unexplained_function_imports(ASSETS) == []
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "a.py").write_text("def f():\n    import json\n\n    import os  # why\n")
    assert unexplained_function_imports(tmp_path / "assets") == ["assets/a.py:2"]
