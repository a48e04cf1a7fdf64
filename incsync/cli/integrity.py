"""``incsync verify`` and ``incsync repair``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from incsync.cli.parsing import Commands
from incsync.errors import ConfigError

if TYPE_CHECKING:
    from pathlib import Path

    from incsync.config.model import IncsyncConfig


def _targets(args: argparse.Namespace):  # noqa: ANN202 - (file, config, model, recipients)
    from incsync.config.load import load_config
    from incsync.integrity.verify import recipients_of
    from incsync.paths import config_path

    file = config_path(args.config)
    config = load_config(file)
    try:
        model = config.model(args.model)
        recipients = recipients_of(config, model, args.recipient)
    except KeyError as exc:
        raise ConfigError(str(file), [exc.args[0]]) from None
    return file, config, model, recipients


def _spark(config: IncsyncConfig):  # noqa: ANN202 - a lazy SparkSession factory: verify starts Spark only for differing buckets
    session = []

    def get():  # noqa: ANN202 - the SparkSession, imported lazily
        if not session:
            from incsync.cli.connectivity import _jdbc_spark

            session.append(_jdbc_spark(config))
        return session[0]

    return get


def _staging(config: IncsyncConfig) -> Path:
    from pathlib import Path

    from incsync.staging.folders import default_staging_dir

    return Path(default_staging_dir(config))


def cmd_verify(args: argparse.Namespace) -> int:
    from incsync.integrity.verify import verify_recipient

    _, config, model, recipients = _targets(args)
    spark, failed = _spark(config), 0
    for recipient in recipients:
        result = verify_recipient(config, model, recipient, spark=spark, sampling_rate=args.sampling_rate,
                                  staging_root=_staging(config))
        failed += not result.passed
        if args.json:
            print(json.dumps({"model": result.model, "recipient": result.recipient, "passed": result.passed,
                              **result.metadata()}, sort_keys=True))
        else:
            print(result.line())
            for counter, examples in result.findings.examples.items():
                for example in examples:
                    print(f"  {counter}: {example}")
    return 1 if failed else 0


def cmd_repair(args: argparse.Namespace) -> int:
    from incsync.integrity.verify import verify_recipient
    from incsync.transfer.repair import repair_recipient

    _, config, model, recipients = _targets(args)
    spark, failed = _spark(config), 0
    for recipient in recipients:
        done = repair_recipient(config, model, recipient, spark=spark, staging_root=_staging(config),
                                allow_mass_delete=args.allow_mass_delete)
        print(done.line())
        if done.transfer_id is not None:
            after = verify_recipient(config, model, recipient, spark=spark, staging_root=_staging(config))
            print(f"  then: {after.line()}")
            failed += not after.passed
    if failed:
        print("some copies still differ (a transfer committed meanwhile?); run `incsync repair` again", file=sys.stderr)
    return 1 if failed else 0


def add_parsers(sub: Commands) -> None:
    p = sub.add_parser("verify", help="compare recipients' copies with the source, bucket by bucket (integrity check)")
    p.add_argument("model")
    p.add_argument("--recipient", action="append", help="a recipient id (repeatable; default: every enabled recipient)")
    p.add_argument("--sampling-rate", type=float, default=1.0,
                   help="check this fraction of the key space's buckets, always the same ones (default 1)")
    p.add_argument("--json", action="store_true", help="one JSON object per recipient (Prequel's field names)")
    p.add_argument("-c", "--config")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("repair", help="re-transfer only the rows verify finds wrong; remove orphaned ones "
                       "(deletes: hard/soft; deletes: none keeps them)")
    p.add_argument("model")
    p.add_argument("--recipient", action="append", help="a recipient id (repeatable; default: every enabled recipient)")
    p.add_argument("--allow-mass-delete", action="store_true",
                   help="remove orphaned rows even past the model's max_delete_fraction")
    p.add_argument("-c", "--config")
    p.set_defaults(func=cmd_repair)
