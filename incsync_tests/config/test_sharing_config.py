"""`sharing:` in the file: defaults that serve without a section, the names a model is shared under, and the
names Delta Sharing refuses, each a problem naming the model and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from incsync.config.load import load_config
from incsync.config.sharing import shared_schema, shared_table
from incsync.errors import ConfigError
from incsync_tests.support.lake import lake_config


def _with_sharing(tmp_path: Path, sharing: dict[str, object], *, second_model: bool = False) -> Path:
    file = lake_config(tmp_path)
    doc = yaml.safe_load(file.read_text())
    if second_model:
        doc["models"].append({**doc["models"][0], "model_name": "orders_v2"})
    doc["sharing"] = sharing
    file.write_text(yaml.safe_dump(doc, sort_keys=False))
    return file


def test_without_a_section_every_model_is_shared_under_default_by_its_name(tmp_path: Path) -> None:
    config = load_config(lake_config(tmp_path))
    sharing = config.sharing
    assert (sharing.listen, sharing.public_url, sharing.url_lifetime_seconds, sharing.token_lifetime_days) == (
        "127.0.0.1:8088", None, 900, 365)
    assert (shared_schema(sharing, config.models[0]), shared_table(sharing, "orders")) == ("default", "orders")


def test_the_section_names_schemas_and_tables(tmp_path: Path) -> None:
    config = load_config(_with_sharing(tmp_path, {"schema_by_source": True, "tables": {"orders_v2": {"schema": "sales",
                                                                                                      "table": "orders"}}},
                                       second_model=True))
    first, second = config.models
    assert (shared_schema(config.sharing, first), shared_table(config.sharing, "orders")) == ("lake", "orders")
    assert (shared_schema(config.sharing, second), shared_table(config.sharing, "orders_v2")) == ("sales", "orders")


@pytest.mark.parametrize("sharing, problems", [
    ({"tables": {"ordres": {"table": "x"}}}, ['sharing.tables.ordres: "ordres" is not a model; known: [orders, orders_v2]']),
    ({"schema": "my.schema"},
     ['sharing.schema: "my.schema" holds a space, a slash, a control character or a period; Delta Sharing refuses '
      "such names"]),
    ({"tables": {"orders": {"table": "order lines"}}},
     ['sharing: model orders would be shared with table "order lines", which holds a space, a slash, a control '
      "character or a period; name another under sharing.tables.orders.table"]),
    ({"tables": {"orders_v2": {"table": "ORDERS"}}},
     ["sharing: models orders and orders_v2 would both be shared as default.ORDERS (names ignore case); name one "
      "otherwise under sharing.tables"]),
], ids=["unknown model", "a period in a schema", "a space in a table", "two models on one name"])
def test_names_delta_sharing_refuses_fail_validation_naming_the_fix(tmp_path: Path, sharing: dict[str, object],
                                                                    problems: list[str]) -> None:
    with pytest.raises(ConfigError) as failed:
        load_config(_with_sharing(tmp_path, sharing, second_model=True))
    assert [p for p in failed.value.problems if p.startswith("sharing")] == problems


@pytest.mark.parametrize("sharing", [{"listen": "8088"}, {"public_url": "ftp://x"}, {"url_lifetime_seconds": 5},
                                     {"serve": True}], ids=["listen without host", "not http", "too short", "unknown key"])
def test_a_bad_setting_is_refused(tmp_path: Path, sharing: dict[str, object]) -> None:
    with pytest.raises(ConfigError) as failed:
        load_config(_with_sharing(tmp_path, sharing))
    assert any(p.startswith("sharing") for p in failed.value.problems), failed.value.problems
