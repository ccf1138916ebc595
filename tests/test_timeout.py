"""The per-test time limit of pyproject.toml ([tool.pytest.ini_options] timeout): a hung test fails alone."""

import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

HANGS = """
import time

def test_hangs():
    time.sleep(60)

def test_passes():
    assert True
"""


def test_the_suite_has_a_default_limit(pytestconfig: pytest.Config) -> None:
    assert float(pytestconfig.getini("timeout")) == 300


def test_a_test_that_sleeps_past_its_limit_fails_with_its_stack(tmp_path: Path) -> None:
    (tmp_path / "test_hang.py").write_text(HANGS)
    started = time.monotonic()
    # the project's own configuration, with the limit cut to 2 s
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path),
         "-o", "timeout=2", "-p", "no:cacheprovider", str(tmp_path / "test_hang.py")],
        capture_output=True, text=True, cwd=tmp_path, timeout=50,
    )  # fmt: skip
    assert time.monotonic() - started < 50  # the 60 s sleep was cut short
    assert result.returncode == 1, result.stdout
    assert "1 failed, 1 passed" in result.stdout
    assert "Timeout (>2.0s) from pytest-timeout" in result.stdout and "test_hangs" in result.stdout
    assert "time.sleep(60)" in result.stdout  # the stack of the hung test
