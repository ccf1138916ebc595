"""`dagster-ir update` over the fault-injection pipeline (fault_defs): the command's own start-up
(killed runs marked failed, their pool slots freed, orphans removed), then `update_all`.

    python update_driver.py DATA_DIR [ASSET ...]    (only those assets when named)

Prints the update's lines as they come and a JSON summary as its last line.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import dagster as dg  # noqa: E402
import fault_defs  # noqa: E402

from assets.cli.commands import prepare_update  # noqa: E402
from assets.cli.updates import update_all  # noqa: E402


def main(root: Path, names: list[str]) -> None:
    def log(line: str) -> None:
        print(line, flush=True)

    instance = prepare_update(root, log)
    defs, resources = fault_defs.definitions(str(root))
    selection = dg.AssetSelection.assets(*names) if names else None
    # traces=False: as the command prints by default (its --verbose prints each failed step's stack)
    report = update_all(defs, instance, resources=resources, log=log, selection=selection, traces=False)
    counts = {
        "materialized": report.materialized,
        "unchanged": report.unchanged,
        "fresh": report.fresh,
        "failed": report.failed,
        "skipped": len(report.skipped),
        "done_elsewhere": len(report.done_elsewhere),
        "not_started": report.not_started,
    }
    ran = [k for _, keys in report.runs for k in keys]
    summary = {"ran": ran, "failed": report.failures, "fresh": report.fresh, "planned": report.planned}
    print(json.dumps({**summary, "counts": counts, "line": report.summary()}), flush=True)
    sys.exit(130 if report.interrupted else 0)  # as `dagster-ir update` after Ctrl-C


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
