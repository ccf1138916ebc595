"""Where a measured figure comes from: the commit of the code and the machine it ran on.

Pages that print measurements (`dagster-ir reproduce --markdown PATH`, `benchmarks/summary.py --docs
PATH`) head them with these two, beside the date and the settings.
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the project's checkout


def commit_of(folder: str | os.PathLike[str] = ROOT) -> str:
    """The short commit of the code in `folder`, `+changes` when tracked files differ from it; `unknown` outside git."""

    def git(*args: str) -> str:
        try:
            done = subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return ""
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD")
    if not head:
        return "unknown"
    return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def machine() -> str:
    """The CPU's model name, its cores and the memory, as /proc tells (the cores alone elsewhere)."""

    def first(path: str, prefix: str) -> str | None:
        try:
            with open(path, encoding="utf-8") as lines:
                return next((line.split(":", 1)[1].strip() for line in lines if line.startswith(prefix)), None)
        except OSError:
            return None

    cpu = first("/proc/cpuinfo", "model name") or platform.processor() or platform.machine()
    memory = first("/proc/meminfo", "MemTotal")
    gib = f", {int(memory.split()[0]) / 2**20:.0f} GiB of memory" if memory else ""
    return f"{cpu}, {os.cpu_count()} cores{gib}"
