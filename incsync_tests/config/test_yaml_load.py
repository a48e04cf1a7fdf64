"""The fast YAML path reads every document exactly as PyYAML's safe loader does, or hands it over."""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from incsync.config.yaml_load import FAST_PATH_MIN_BYTES, _Unsupported, fast_load, load_yaml

# Plain scalars whose meaning PyYAML (YAML 1.1) decides: bools, nulls, ints in every base, floats,
# dates and timestamps, and strings that only look like them.
TRICKY = [
    "yes", "No", "on", "OFF", "y", "n", "true", "False", "~", "null", "Null", "NULL", "", " ", "0", "-0", "+7",
    "007", "0o17", "0x1F", "0b101", "1_000", "1:30", "190:20:30", "1e3", "1.5e-3", ".5", "-.inf", ".NaN",
    "2024-01-01", "2024-01-01 10:00:00", "2024-01-01T10:00:00.123456+02:00", "2024-1-1", "12:30",
    "r00001", "org_1", "a: b", "#not a comment", "x #y", "- item", "[1]", "{a: 1}", "'q'", '"dq"', "é ü 漢字",
    "line\nbreak", "trailing ", " leading", "*star", "&amp", "!bang", "%pct", "@at", "`tick`", "|pipe", ">gt",
    "s3://bucket/prefix", "postgresql://user@host:5432/db", "*/15 * * * *", "0 0 * * *", "1.0", "3.14159",
]


def _same(a, b) -> bool:  # noqa: ANN001 - any YAML value
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=False))
    return a == b


def _parses(line: str) -> bool:
    try:
        return isinstance(yaml.safe_load(line), dict)
    except yaml.YAMLError:
        return False


def _check(text: str) -> None:
    expected = yaml.safe_load(text)
    try:
        got = fast_load(text)
    except Exception:  # noqa: BLE001 - _Unsupported or rapidyaml's own refusal: load_yaml hands these to PyYAML
        assert _same(load_yaml(text), expected)
        return
    assert _same(got, expected), (text, got, expected)


@pytest.mark.parametrize("flow", [False, True])
def test_tricky_scalars_as_keys_and_values_plain_and_quoted(flow: bool) -> None:
    lines = [f"k{i}: {s}" for i, s in enumerate(TRICKY) if "\n" not in s]
    _check("\n".join(line for line in lines if _parses(line)) + "\n")
    dumped = yaml.safe_dump({"values": TRICKY, "keys": {s: i for i, s in enumerate(TRICKY)}}, default_flow_style=flow,
                            allow_unicode=True)
    _check(dumped)


def test_block_scalars_comments_nesting_and_documents() -> None:
    _check(
        "# comment\nsources:\n  - name: app_db  # trailing comment\n    vendor: postgres\n    options: {a: 1, b: [x, 'y']}\n"
        "query: |\n  SELECT 1\n    FROM t\nfolded: >\n  one\n  two\n\n  three\nempty:\nlist: []\nmap: {}\n"
        "quoted: \"tab\\tnew\\nline \\u00e9\"\nsingle: 'it''s'\n"
    )
    _check("--- \nsolo: 1\n...\n")
    for unsupported in ("a: &x 1\nb: *x\n", "a: !!str 1\n", "base: &b {x: 1}\nd:\n  <<: *b\n", "a: 1\n---\nb: 2\n"):
        with pytest.raises(_Unsupported):
            fast_load(unsupported)
        assert load_yaml(unsupported * 1) == yaml.safe_load(unsupported) if "---" not in unsupported else True


scalars = st.one_of(
    st.sampled_from(TRICKY), st.text(max_size=12), st.integers(), st.booleans(), st.none(),
    st.floats(allow_nan=False), st.dates(), st.datetimes(timezones=st.just(dt.timezone.utc)),
)
documents = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                         max_leaves=25)


@settings(max_examples=int(__import__("os").environ.get("YAML_EXAMPLES", "300")), deadline=None)
@given(doc=documents, flow=st.booleans())
def test_any_document_pyyaml_writes_reads_back_the_same(doc, flow: bool) -> None:  # noqa: ANN001
    _check(yaml.safe_dump({"doc": doc}, default_flow_style=flow, allow_unicode=True))


def test_a_large_config_takes_the_fast_path_and_loads_the_same(tmp_path: Path) -> None:
    from incsync.config.load import load_config

    n = 2_000
    doc = {
        "sources": [{"name": "lake", "vendor": "lake", "path": "./src"}],
        "destinations": [{"name": f"d_{k}", "kind": "delta", "path": f"./out/r{k:05d}"} for k in range(n)],
        "models": [{"model_name": "orders", "source": "lake", "source_table": "orders", "primary_key": ["id"],
                    "last_modified_column": "updated_at", "organization_column": "organization_id",
                    "min_start_time_epoch": 1704067200, "frequency": "*/15 * * * *"}],
        "recipients": [{"id": f"r{k:05d}", "id_in_provider_system": f"org_{k}", "destination": f"d_{k}",
                        "enabled": k % 7 != 0, "tags": {"tier": "gold" if k % 2 else "yes"}} for k in range(n)],
    }
    text = yaml.safe_dump(doc, sort_keys=False)
    assert len(text) >= FAST_PATH_MIN_BYTES
    assert _same(fast_load(text), yaml.safe_load(text))
    path = tmp_path / "incsync.yaml"
    path.write_text(text)
    cfg = load_config(path)
    assert len(cfg.recipients) == n and cfg.recipients[7].enabled is False
    assert cfg.recipients[2].tags == {"tier": "yes"}  # quoted by safe_dump, so a string, not True


def test_a_broken_large_file_is_reported_by_pyyaml_with_its_line() -> None:
    text = "recipients:\n" + "".join(f"  - id: r{k}\n" for k in range(10_000)) + "  - id: [unclosed\n"
    assert len(text) >= FAST_PATH_MIN_BYTES
    with pytest.raises(yaml.YAMLError, match="line 10002"):
        load_yaml(text)
