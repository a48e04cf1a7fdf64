"""Run ``incsync transfer --backfill`` for several recipients inside ONE process (one Python start, one
Spark session or Connect client), as a long-lived worker would. Used by ``compare_dlt.py`` (tool
``warm1p``); prints one ``rows_transferred=`` line per transfer like the CLI.

    .venv/bin/python benchmarks/incsync_loop.py -c incsync.yaml MODEL RECIPIENT [RECIPIENT ...]
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("-c", "--config", required=True)
    parser.add_argument("model")
    parser.add_argument("recipients", nargs="+")
    args = parser.parse_args()
    warnings.simplefilter("ignore")

    from incsync.config.load import load_config
    from incsync.core.windows import recipient_windows
    from incsync.operations.instance import dagster_instance
    from incsync.operations.runs import run_transfers
    from incsync.orchestration.definitions import build_definitions

    file = Path(args.config)
    config = load_config(file)
    defs, instance = build_definitions(file), dagster_instance(file)
    model = config.model(args.model)
    failed = 0
    for recipient_id in args.recipients:
        recipient = config.recipient(recipient_id)
        lines = run_transfers(defs, instance, config=config, model=model, recipient=recipient,
                              windows=[w.key for w in recipient_windows(model, recipient)])
        for line in lines:
            print(line, flush=True)
        failed += sum(not line.ok for line in lines)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
