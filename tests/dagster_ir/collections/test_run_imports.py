import pytest

from dagster_ir.collections.config import CollectionConfigError, load_run_imports


def test_run_imports_resolve_relative_to_the_file(tmp_path):
    config = tmp_path / "dagster-ir.yaml"
    config.write_text(
        "collections: {cranfield: {kind: cranfield, path: x}}\nruns:\n  cranfield:\n    ance: runs/a.trec\n"
    )
    assert load_run_imports(config) == {"cranfield": {"ance": (tmp_path / "runs" / "a.trec").resolve()}}


def test_bad_run_import_names_the_field(tmp_path):
    config = tmp_path / "dagster-ir.yaml"
    config.write_text("runs:\n  cranfield:\n    ance: [1, 2]\n")
    with pytest.raises(CollectionConfigError, match=r"dagster-ir.yaml: runs.cranfield.ance"):
        load_run_imports(config)
