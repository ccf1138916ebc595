"""The definitions the UI and `dagster-ir` load: every asset (its group and code version), check, job,
schedule and sensor, against the list committed in definitions_snapshot.json.

The list was written before assets/ was split into lib/, defs/ and cli/ (a move that must change none of
them). A change that adds, renames or re-versions one on purpose rewrites the list:
`.venv/bin/python tests/assets/test_definitions_snapshot.py --write`, and the diff shows what changed.
"""

import json
import sys
from pathlib import Path

SNAPSHOT = Path(__file__).with_name("definitions_snapshot.json")


def definitions_summary() -> dict:
    from assets.definitions import defs

    repo = defs.get_repository_def()
    graph = repo.asset_graph
    assets = {}
    for key in sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string()):
        node = graph.get(key)
        assets[key.to_user_string()] = {"group": node.group_name, "code_version": node.code_version}
    return {
        "assets": assets,
        "checks": sorted(c.to_user_string() for c in graph.asset_check_keys),
        "jobs": sorted(j.name for j in repo.get_all_jobs()),
        "schedules": sorted(s.name for s in repo.schedule_defs),
        "sensors": sorted(s.name for s in repo.sensor_defs),
    }


def test_the_definitions_are_the_committed_ones() -> None:
    expected = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    found = definitions_summary()
    for part in expected:
        assert found[part] == expected[part], f"{part} differ from {SNAPSHOT.name} (rewrite it if on purpose)"
    assert set(found) == set(expected)


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit(f"usage: python {sys.argv[0]} --write")
    SNAPSHOT.write_text(json.dumps(definitions_summary(), indent=1) + "\n", encoding="utf-8")
