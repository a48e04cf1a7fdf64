"""The map from config paths to YAML lines (``incsync.config.lines``): the same lines as the direct
walk of PyYAML's composed nodes it replaced, which rescanned every path for each named item."""

from __future__ import annotations

import pytest
import yaml

from incsync.config.lines import node_lines, problem_lines
from incsync_tests.support.config_scale import config_text

_NAME_KEYS = {"sources": "name", "destinations": "name", "models": "model_name", "recipients": "id"}


def _composed_lines(text: str) -> dict[str, int]:
    """The reference: every path of ``yaml.compose``'s nodes, then each named item's paths under its name."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return {}
    lines: dict[str, int] = {}

    def walk(node: yaml.Node, path: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                child = f"{path}.{key.value}" if path else str(key.value)
                lines.setdefault(child, key.start_mark.line + 1)
                walk(value, child)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                child = f"{path}[{i}]"
                lines.setdefault(child, item.start_mark.line + 1)
                walk(item, child)
                named = _NAME_KEYS.get(path)
                if named and isinstance(item, yaml.MappingNode):
                    for key, value in item.value:
                        if key.value == named and isinstance(value, yaml.ScalarNode):
                            alias = f"{path}[{value.value}]"
                            lines.setdefault(alias, item.start_mark.line + 1)
                            lines.setdefault(f"{path}.{value.value}", item.start_mark.line + 1)
                            for k, line in list(lines.items()):
                                if k.startswith(child + ".") or k.startswith(child + "["):
                                    lines.setdefault(alias + k[len(child):], line)

    if root is not None:
        walk(root, "")
    return lines


CASES = {
    "generated-postgres": config_text(40),
    "generated-lake": config_text(40, vendor="lake"),
    "empty": "",
    "scalar": "a: 1",
    "top-level-list": "- 1\n- 2",
    "two-documents": "---\na: 1\n---\nb: 2\n",
    "name-is-another-index": "recipients:\n  - id: '1'\n    x: 1\n  - id: '0'\n    y: [1, {z: 2}]\n  - {id: a, id: b, w: 3}\n",
    "name-is-a-later-index": "recipients:\n  - id: 3\n    a: 1\n  - id: x\n  - {id: y}\n  - {id: z, b: 2}\n",
    "name-with-bracket": "recipients:\n  - {id: '2].q', b: 2}\n  - {id: x}\n  - {id: y, c: 1}\n",
    "top-key-with-bracket": "recipients[2]:\n  q: 1\nrecipients:\n  - {id: x}\n  - {id: y}\n  - {id: z, c: 1}\n",
    "section-twice": "recipients:\n  - {id: x, c: 1}\nrecipients:\n  - {id: y, d: 1}\n  - {id: x, e: 2}\n",
    "anchor-and-alias": "sources: &s\n  - {name: a, p: 1}\ndestinations: *s\n",
    "complex-key": "models:\n  - ? [a, b]\n    : 1\n    model_name: m\n",
    "name-not-a-scalar": "models:\n  - model_name: [m]\n  - model_name: m2\n    primary_key: [id]\n",
    "not-yaml": "bad: [\n",
    "unknown-alias": "a: *nope\n",
    "nested-list-of-names": "sources:\n- name: pg\n  vendor: postgres\n  extra:\n    - name: inner\n      k: v\n",
    "flow-item-over-lines": "destinations:\n  - {\n    name: d1,\n    kind: delta}\n  -\n    name: d2\n    kind: delta\n",
}


@pytest.mark.parametrize("text", CASES.values(), ids=CASES.keys())
def test_every_path_maps_to_the_line_the_composed_nodes_give(text: str) -> None:
    assert node_lines(text) == _composed_lines(text)


def test_named_items_are_found_by_name_and_by_index() -> None:
    text = config_text(3)
    problems = ["recipients[acme-00002].destination: x", "recipients[2].tags.tier: y", "destinations[1]: z", "nowhere: w"]
    shown = [text.splitlines()[n - 1].strip() if n else None for n in problem_lines(text, problems)]
    recipient = "- {id: acme-00002, id_in_provider_system: org_2, destination: acme-00002_delta, tags: {tier: bronze}}"
    assert shown == [recipient, recipient, "- {name: acme-00001_delta, kind: delta, path: ./out/acme-00001}", None]


def test_problems_map_only_the_top_level_sections_they_name() -> None:
    """A warning about a source does not walk 10,000 recipients: only its section is mapped, and the
    other sections' keys keep their lines."""
    text = (
        "sources:\n"
        "  - name: app\n"
        "    password_env: APP_PW\n"
        "recipients:\n"
        "  - {id: acme, destination: lake}\n"
        "  - id: globex\n"
        "    destination: lake\n"
        "models:\n"
        "  - model_name: orders\n"
    )
    assert node_lines(text, {"sources"}) == {
        "sources": 1, "sources[0]": 2, "sources[0].name": 2, "sources[0].password_env": 3,
        "sources[app]": 2, "sources.app": 2, "sources[app].name": 2, "sources[app].password_env": 3,
        "recipients": 4, "models": 8,
    }
    assert problem_lines(text, ["sources[0].password_env: variable APP_PW is not set here",
                                "recipients[globex].destination: unknown"]) == [3, 7]
    assert problem_lines(text, ["models[orders]: no primary key"]) == [9]
