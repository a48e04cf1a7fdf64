"""`audit:` in the file: a destination of the provider's that no recipient uses, a cron; unset, nothing changes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from incsync.config.load import load_config
from incsync.errors import ConfigError
from incsync_tests.support.lake import lake_config


def _with_audit(tmp_path: Path, audit: dict[str, object]) -> Path:
    file = lake_config(tmp_path)
    doc = yaml.safe_load(file.read_text())
    doc["destinations"].append({"name": "warehouse", "kind": "postgres", "dsn_env": "WAREHOUSE_DSN", "schema": "incsync_log"})
    doc["audit"] = audit
    file.write_text(yaml.safe_dump(doc, sort_keys=False))
    return file


def test_an_audit_block_names_a_destination_and_a_cron(tmp_path: Path) -> None:
    audit = load_config(_with_audit(tmp_path, {"destination": "warehouse", "frequency": "0 * * * *"})).audit
    assert audit is not None
    assert (audit.destination, audit.frequency, audit.lookback_seconds) == ("warehouse", "0 * * * *", 300)
    assert load_config(lake_config(tmp_path)).audit is None


@pytest.mark.parametrize("audit, problems", [
    ({"destination": "wharehouse"},
     ['audit.destination: "wharehouse" is not a configured destination; known: [acme_delta, warehouse]']),
    ({"destination": "acme_delta"},
     ['audit.destination: "acme_delta" is the destination of recipient(s) acme; the transfer log names every '
      "recipient, so give it a destination of the provider's own that no recipient uses"]),
    ({"destination": "warehouse", "frequency": "hourly"},
     ['audit.frequency: "hourly" is not a cron expression (e.g. "*/15 * * * *")']),
], ids=["unknown destination", "a recipient's destination", "not a cron"])
def test_a_wrong_audit_block_fails_validation_naming_the_fix(tmp_path: Path, audit: dict[str, object], problems: list[str]) -> None:
    with pytest.raises(ConfigError) as failed:
        load_config(_with_audit(tmp_path, audit))
    assert [p for p in failed.value.problems if p.startswith("audit")] == problems


def test_an_unknown_audit_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as failed:
        load_config(_with_audit(tmp_path, {"destination": "warehouse", "every": "1h"}))
    assert any("audit.every" in p for p in failed.value.problems), failed.value.problems
