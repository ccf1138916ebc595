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
    report = update_all(defs, instance, resources=resources, log=log, selection=selection)
    print(
        json.dumps(
            {"ran": [k for _, keys in report.runs for k in keys], "failed": report.failures, "fresh": report.fresh}
        ),
        flush=True,
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
