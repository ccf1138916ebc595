import os
import subprocess
import sys
from pathlib import Path

from assets.instance import CONCURRENCY, ensure_instance_config

OPEN = """
import sys
from assets.instance import open_instance
instance = open_instance(sys.argv[1])
print(len(instance.get_runs()))
"""


def test_processes_opening_one_new_home_at_once_all_succeed(tmp_path):
    # without the lock, the second process's migrations fail with "table runs already exists"
    for attempt in range(3):
        home = tmp_path / f"home{attempt}"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path.cwd()), os.environ.get("PYTHONPATH", "")])}
        processes = [subprocess.Popen([sys.executable, "-c", OPEN, str(home)], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True) for _ in range(4)]
        outputs = [p.communicate(timeout=300) for p in processes]
        for process, (out, err) in zip(processes, outputs, strict=True):
            assert process.returncode == 0, err[-3000:]
            assert out.split() == ["0"]
        assert (home / "history" / "runs.db").exists() and CONCURRENCY in (home / "dagster.yaml").read_text()


def test_instance_config_keeps_what_the_user_wrote(tmp_path):
    (tmp_path / "dagster.yaml").write_text("telemetry:\n  enabled: true\n")
    text = ensure_instance_config(tmp_path).read_text()
    assert text.startswith("telemetry:\n  enabled: true\n") and text.endswith(CONCURRENCY)
    assert ensure_instance_config(tmp_path).read_text() == text  # a second call adds nothing
