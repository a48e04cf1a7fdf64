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


def _retention(tmp_path: Path, retention: int, sharing: dict[str, object] | None, *, unused: bool = False) -> Path:
    file = lake_config(tmp_path)
    doc = yaml.safe_load(file.read_text())
    doc["destinations"][0]["retention_hours"] = retention
    if unused:  # a second destination no recipient uses
        doc["destinations"].append({"name": "spare", "kind": "delta", "path": "./out/spare", "retention_hours": 0})
    if sharing is not None:
        doc["sharing"] = sharing
    file.write_text(yaml.safe_dump(doc, sort_keys=False))
    return file


@pytest.mark.parametrize("retention, sharing, problem", [
    (0, {"listen": "127.0.0.1:8088"},
     'destinations[0]: "acme_delta" keeps the files a newer version replaced for retention_hours: 0 (0 s), less than '
     "sharing.url_lifetime_seconds: 900: `incsync maintain` could delete a file while a reader still holds its URL from "
     "`incsync serve`; set retention_hours to 1 or more (docs/sharing.md#vacuum-and-file-urls)"),
    (1, {"url_lifetime_seconds": 7200},
     'destinations[0]: "acme_delta" keeps the files a newer version replaced for retention_hours: 1 (3600 s), less than '
     "sharing.url_lifetime_seconds: 7200: `incsync maintain` could delete a file while a reader still holds its URL "
     "from `incsync serve`; set retention_hours to 2 or more, or sharing.url_lifetime_seconds to 3600 or less "
     "(docs/sharing.md#vacuum-and-file-urls)"),
], ids=["no retention", "retention under the lifetime"])
def test_a_vacuum_shorter_than_the_file_urls_is_refused_naming_both_settings(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], retention: int, sharing: dict[str, object], problem: str) -> None:
    from incsync.cli.main import run_command

    file = _retention(tmp_path, retention, sharing)
    with pytest.raises(ConfigError) as failed:
        load_config(file)
    assert [p for p in failed.value.problems if p.startswith("destinations")] == [problem]
    assert run_command(["validate", "-c", str(file)]) == 2  # a configuration error
    line = 1 + file.read_text().splitlines().index("- name: acme_delta")
    # the CLI points at the destination's line and sets the fix apart
    assert capsys.readouterr().err == f"error: {file}:{line}: {problem.replace('; set', ' — set')}\n"


@pytest.mark.parametrize("retention, sharing, unused", [
    (0, None, False),  # nothing served: the file has no `sharing:` section
    (1, {"url_lifetime_seconds": 3600}, False),  # exactly the lifetime
    (168, {"listen": "127.0.0.1:8088"}, True),  # a destination no recipient uses is not served
], ids=["no sharing section", "retention equal to the lifetime", "an unused destination"])
def test_a_vacuum_that_outlasts_the_file_urls_passes(tmp_path: Path, retention: int, sharing: dict[str, object] | None,
                                                     unused: bool) -> None:
    assert load_config(_retention(tmp_path, retention, sharing, unused=unused)).destinations[0].retention_hours == retention
