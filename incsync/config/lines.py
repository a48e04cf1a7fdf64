"""Where in the YAML file a problem is: ``models[0].primary_key`` -> its line, so every message reads
``file:line: path: problem — fix``. Only run when there is a problem (composing the file costs a
second parse)."""

from __future__ import annotations

import re

import yaml

# Items may be named by their index or by their name (checks outside the file model say `sources[pg]`).
_NAME_KEYS = {"sources": "name", "destinations": "name", "models": "model_name", "recipients": "id"}
_PATH = re.compile(r"^((?:[A-Za-z_][\w]*)(?:\[[^\]\s]+\]|\.[A-Za-z_][\w]*)*)")


def node_lines(text: str) -> dict[str, int]:
    """Every path of the document -> its 1-based line (a key's own line for mappings)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        root = yaml.compose(text, Loader=loader)
    except yaml.YAMLError:
        return {}
    lines: dict[str, int] = {}

    def walk(node: yaml.Node, path: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                name = str(key.value)
                child = f"{path}.{name}" if path else name
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
                            _alias(lines, child, alias)

    if root is not None:
        walk(root, "")
    return lines


def _alias(lines: dict[str, int], index_path: str, name_path: str) -> None:
    for key, line in list(lines.items()):
        if key.startswith(index_path + ".") or key.startswith(index_path + "["):
            lines.setdefault(name_path + key[len(index_path):], line)


def problem_line(problem: str, lines: dict[str, int]) -> int | None:
    """The line of the deepest path the problem starts with, or None."""
    match = _PATH.match(problem)
    if not match:
        return None
    path = match.group(1)
    while path:
        if path in lines:
            return lines[path]
        cut = max(path.rfind("."), path.rfind("["))
        if cut <= 0:
            return lines.get(path)
        path = path[:cut]
    return None


def problem_lines(text: str, problems: list[str]) -> list[int | None]:
    lines = node_lines(text)
    return [problem_line(p, lines) for p in problems]
