"""Importing the definitions (what every `dagster-ir` command and every run does first) stays light:
no torch, SciPy, matplotlib, gensim or transformers until a step uses them (see `dagster_ir.lazy`)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "scipy", "matplotlib", "gensim", "transformers", "safetensors.torch", "sklearn")


def _imported_after(statement: str) -> list[str]:
    code = f"import json, sys\n{statement}\nprint(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_the_definitions_imports_no_heavy_library():
    assert _imported_after("import assets.definitions") == []


def test_the_check_sees_a_heavy_import():
    # the same check on a module that needs torch at its top level reports it
    assert "torch" in _imported_after("import dagster_ir.methods.ghrm.model")
