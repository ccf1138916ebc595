"""Where a measured figure comes from: the commit (and whether the tree differs from it) and the machine."""

import shutil
import subprocess

import pytest

from dagster_ir.provenance import commit_of, machine


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_commit_names_the_head_and_says_when_tracked_files_differ(tmp_path):
    def git(*args):
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()

    assert commit_of(tmp_path) == "unknown"  # not a repository
    git("init", "-q")
    (tmp_path / "a.txt").write_text("1")
    git("add", "a.txt")
    git("commit", "-qm", "one")
    head = git("rev-parse", "--short", "HEAD")
    (tmp_path / "untracked.txt").write_text("not part of the code")
    assert commit_of(tmp_path) == head
    (tmp_path / "a.txt").write_text("2")
    assert commit_of(tmp_path) == head + "+changes"


def test_machine_names_the_cores():
    import os

    assert f", {os.cpu_count()} cores" in machine()
