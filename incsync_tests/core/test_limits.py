"""Names, ids, tenant values and tags have length limits with clear errors (issue 13 item 9)."""

from __future__ import annotations

import pytest
import yaml

from incsync.config.errors import TagError
from incsync.config.load import parse_config
from incsync.config.tags import parse_tags
from incsync.errors import ConfigError

DOC = """
sources: [{name: lake, vendor: lake, path: ./src}]
destinations:
  - {name: acme_delta, kind: delta, path: ./out/acme}
  - {name: globex_pg, kind: postgres, dsn_env: GLOBEX_PG_DSN, schema: globex}
models:
  - {model_name: orders, source: lake, source_table: orders, primary_key: [id], last_modified_column: updated_at,
     organization_column: organization_id, min_start_time_epoch: 1704067200}
recipients:
  - {id: acme, id_in_provider_system: org_1, destination: acme_delta, tags: {tier: gold}}
"""


def _problems(doc: dict) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(doc, path="incsync.yaml")
    return info.value.problems


def test_limits_at_the_edge_pass() -> None:
    doc = yaml.safe_load(DOC)
    doc["recipients"][0].update(id="a" * 63, id_in_provider_system="t" * 255, tags={"k" * 63: "v" * 255})
    doc["models"][0]["model_name"] = "m" * 63
    doc["destinations"][1]["schema"] = "s" * 63
    assert parse_config(doc).recipients[0].id == "a" * 63


def test_every_value_past_its_limit_is_named() -> None:
    doc = yaml.safe_load(DOC)
    doc["recipients"][0].update(id="a" * 64, id_in_provider_system="t" * 256, tags={"k" * 64: "gold", "tier": "v" * 65536})
    doc["models"][0]["model_name"] = "m" * 64
    doc["destinations"][1]["schema"] = "s" * 64
    problems = _problems(doc)
    assert problems == [
        'destinations[1].schema: schema "ssssssssssssssssssss…" is 64 characters long; the limit is 63: shorten it',
        'models[0].model_name: model name "mmmmmmmmmmmmmmmmmmmm…" is 64 characters long; the limit is 63: shorten it',
        'recipients[0].id: recipient id "aaaaaaaaaaaaaaaaaaaa…" is 64 characters long; the limit is 63: shorten it',
        'recipients[0].id_in_provider_system: tenant value "tttttttttttttttttttt…" is 256 characters long; the limit '
        "is 255: shorten it",
        'recipients[0].tags: tag key "kkkkkkkkkkkkkkkkkkkk…" is 64 characters long; the limit is 63: shorten it',
        'recipients[0].tags: tag tier value "vvvvvvvvvvvvvvvvvvvv…" is 65536 characters long; the limit is 255: shorten it',
    ]
    assert max(len(p) for p in problems) < 200  # the 64 KB value is never repeated


def test_command_line_tags_have_the_same_limits() -> None:
    assert parse_tags(["t" * 63 + "=" + "v" * 255]) == {"t" * 63: "v" * 255}
    with pytest.raises(TagError) as info:
        parse_tags(["ticket=" + "x" * 65536])
    assert str(info.value) == 'tag ticket value "xxxxxxxxxxxxxxxxxxxx…" is 65536 characters long; the limit is 255: shorten it'
