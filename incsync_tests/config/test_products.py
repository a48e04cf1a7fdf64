"""Products and tiers in the file: what a recipient receives decides which of its names are checked."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from incsync.config.load import load_config
from incsync.errors import ConfigError
from incsync_tests.support.lake import lake_config


def test_a_schema_is_checked_only_for_the_schema_tenanted_models_a_recipient_receives(tmp_path: Path) -> None:
    long_schema = "s" * 70  # PostgreSQL would cut it to 63 bytes
    file = lake_config(tmp_path, recipients=[{"id": "acme", "id_in_provider_system": long_schema, "destination": "acme_delta",
                                              "products": ["basic"]}])
    doc = yaml.safe_load(file.read_text())
    doc["sources"].append({"name": "app", "vendor": "postgres", "jdbc_url": "jdbc:postgresql://127.0.0.1:5432/app", "user": "u"})
    doc["models"].append({"model_name": "ledger", "source": "app", "source_table": "ledger", "primary_key": ["id"],
                          "last_modified_column": "updated_at", "tenancy": "schema", "min_start_time_epoch": 1704067200})
    doc["products"] = [{"name": "basic", "models": ["orders"]}, {"name": "finance", "models": ["ledger"]}]
    file.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert load_config(file).recipient("acme").products == ["basic"]

    doc["recipients"][0]["products"] = ["basic", "finance"]
    file.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(ConfigError) as failed:
        load_config(file)
    assert [p.split(" of schema-tenanted model ")[1][:20] for p in failed.value.problems] == ["ledger (source app, "]
