"""Freed memory goes back to the system after a training (glibc's malloc_trim)."""

import json
import platform
import subprocess
import sys

import pytest

from dagster_ir.neural.memory import _libc, release_freed_memory

# Run in a fresh interpreter: how glibc places blocks depends on what the process allocated before.
# Freeing a 16 MiB block raises glibc's mmap threshold, so the 8 MiB blocks after it come from the
# heap; with small blocks kept between them (as a training keeps its weights and optimizer states),
# freeing them leaves holes that stay resident, as a training step's activations do.
SCENARIO = """
import json, sys, torch
from dagster_ir.neural.memory import release_freed_memory
def resident():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096
first = torch.ones(16 * 2**20 // 4)
del first
blocks, kept = [], []
for _ in range(48):  # 384 MiB
    blocks.append(torch.ones(8 * 2**20 // 4))
    kept.append(torch.ones(1024))
del blocks
before = resident()
trimmed = release_freed_memory() if sys.argv[1] == "release" else False
print(json.dumps({"before": before, "after": resident(), "trimmed": trimmed}))
"""


def _scenario(mode: str) -> dict:
    done = subprocess.run([sys.executable, "-c", SCENARIO, mode], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(platform.system() != "Linux" or _libc() is None, reason="needs Linux and glibc's malloc_trim")
def test_freed_heap_goes_back_to_the_system():
    released = _scenario("release")
    assert released["trimmed"] is True
    if released["before"] < 300 * 2**20:  # seen once inside the whole suite, never alone: blocks in mappings
        pytest.skip(f"glibc did not keep the freed blocks resident here ({released['before'] / 2**20:.0f} MiB)")
    assert released["before"] - released["after"] > 200 * 2**20, released
    kept = _scenario("keep")
    assert kept["before"] - kept["after"] < 50 * 2**20  # without the trim they stay resident


def test_without_malloc_trim_it_only_collects(monkeypatch):
    monkeypatch.setattr("dagster_ir.neural.memory._libc", lambda: None)
    assert release_freed_memory() is False
