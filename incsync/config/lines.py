"""Where in the YAML file a problem is: ``models[0].primary_key`` -> its line, so every message reads
``file:line: path: problem — fix``. Only run when there is a problem or a warning, and linear in the
file, so a file of 10,000 recipients maps without delaying the message."""

from __future__ import annotations

import re
from typing import Any

import yaml

# Items may be named by their index or by their name (checks outside the file model say `sources[pg]`).
_NAME_KEYS = {"sources": "name", "destinations": "name", "models": "model_name", "recipients": "id"}
_PATH = re.compile(r"^((?:[A-Za-z_][\w]*)(?:\[[^\]\s]+\]|\.[A-Za-z_][\w]*)*)")
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# A node as the walk reads it: ("scalar", line, text), ("map", line, [(key line, key, node)]) or
# ("seq", line, [node]); lines are 1-based, a node's line is where it starts.
_Node = tuple[str, int, Any]


class _Compose(Exception):
    """A document the event reader leaves to PyYAML's composer (anchors, complex keys, several documents)."""


def node_lines(text: str, roots: set[str] | None = None) -> dict[str, int]:
    """Every path of the document -> its 1-based line (a key's own line for mappings); with ``roots``,
    only the paths under those top-level keys (a warning about a source need not map 10,000 recipients).

    Named items are reachable by name too (``recipients[acme].destination``); where a path could mean
    two places, the first one in the file wins.
    """
    try:
        root = _read_events(text, roots)
    except _Compose:
        try:
            root = _from_composed(yaml.compose(text, Loader=_LOADER))
        except yaml.YAMLError:
            return {}
    except yaml.YAMLError:
        return {}
    return _walk(root) if root is not None else {}


def _read_events(text: str, roots: set[str] | None = None) -> _Node | None:
    """The document's nodes from PyYAML's parser events: what ``yaml.compose`` gives, without resolving
    every scalar's tag in Python (a tenth of the time). A top-level key outside ``roots`` keeps its own
    line, and its value is skipped."""
    stack: list[list[Any]] = []  # [kind, line, children, pending key or None]
    root: _Node | None = None
    documents = 0
    skipping = 0  # the nesting depth inside a skipped top-level value
    for event in yaml.parse(text, Loader=_LOADER):
        kind = type(event)
        if skipping:
            if kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
                skipping += 1
            elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
                skipping -= 1
                if not skipping:
                    key, stack[0][3] = stack[0][3], None
                    stack[0][2].append((key[1], key[2], ("scalar", key[1], None)))
            continue
        if (roots is not None and len(stack) == 1 and stack[0][0] == "map" and stack[0][3] is not None
                and (kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent) and str(stack[0][3][2]) not in roots):
            skipping = 1
            continue
        if kind is yaml.ScalarEvent:
            if event.anchor is not None:
                raise _Compose
            node: _Node = ("scalar", event.start_mark.line + 1, event.value)
        elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
            if event.anchor is not None:
                raise _Compose
            stack.append(["map" if kind is yaml.MappingStartEvent else "seq", event.start_mark.line + 1, [], None])
            continue
        elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
            done = stack.pop()
            node = (done[0], done[1], done[2])
        elif kind is yaml.AliasEvent:
            raise _Compose
        elif kind is yaml.DocumentStartEvent:
            documents += 1
            if documents > 1:
                raise _Compose  # PyYAML refuses it; its error is what the caller expects
            continue
        else:
            continue
        if not stack:
            root = node
            continue
        parent = stack[-1]
        if parent[0] == "seq":
            parent[2].append(node)
        elif parent[3] is None:
            if node[0] != "scalar":
                raise _Compose
            parent[3] = node
        else:
            key, parent[3] = parent[3], None
            parent[2].append((key[1], key[2], node))
    return root


def _from_composed(node: yaml.Node | None) -> _Node | None:
    if node is None:
        return None
    line = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        return ("map", line, [(key.start_mark.line + 1, key.value, _from_composed(value)) for key, value in node.value])
    if isinstance(node, yaml.SequenceNode):
        return ("seq", line, [_from_composed(item) for item in node.value])
    return ("scalar", line, node.value)


def _walk(root: _Node) -> dict[str, int]:
    """Paths by index first, then each named item's paths again under its name (``_alias``), in the
    order of the file. Each item's paths are remembered as they are added, so naming an item copies its
    own paths rather than searching all of them."""
    lines: dict[str, int] = {}
    under: dict[str, list[str]] = {}  # item path (by index or by name) -> the paths added below it
    scan = False  # names or top-level keys holding brackets: an item's paths may hide below another's

    def walk(node: _Node, path: str, added: list[str] | None) -> None:
        nonlocal scan
        kind, _, children = node
        if kind == "map":
            for line, key, value in children:
                name = str(key)
                if not path and "[" in name:
                    scan = True
                child = f"{path}.{name}" if path else name
                if child not in lines:
                    lines[child] = line
                    if added is not None:
                        added.append(child)
                walk(value, child, added)
        elif kind == "seq":
            named = _NAME_KEYS.get(path)
            for i, item in enumerate(children):
                child = f"{path}[{i}]"
                if child not in lines:
                    lines[child] = item[1]
                    if added is not None:
                        added.append(child)
                if named:
                    mine = under.setdefault(child, [])
                    walk(item, child, mine)
                else:
                    walk(item, child, added)
                if named and item[0] == "map":
                    for _, key, value in item[2]:
                        if key == named and value[0] == "scalar":
                            alias = f"{path}[{value[2]}]"
                            lines.setdefault(alias, item[1])
                            lines.setdefault(f"{path}.{value[2]}", item[1])
                            if "]" in str(value[2]):
                                scan = True
                            _alias(lines, child, alias, under, scan)

    walk(root, "", None)
    return lines


def _alias(lines: dict[str, int], index_path: str, name_path: str, under: dict[str, list[str]], scan: bool) -> None:
    """Every path below ``index_path`` again below ``name_path`` (where not already taken)."""
    if scan:
        below = [key for key in lines if key.startswith(index_path + ".") or key.startswith(index_path + "[")]
    else:
        below = list(under.get(index_path, ()))
    added = under.setdefault(name_path, [])
    for key in below:
        target = name_path + key[len(index_path):]
        if target not in lines:
            lines[target] = lines[key]
            added.append(target)


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
    """The line of each problem (the file is not read again when there is none)."""
    if not problems:
        return []
    roots: set[str] | None = set()
    for problem in problems:
        match = _PATH.match(problem)
        if match is None:
            roots = None
            break
        roots.add(re.split(r"[.\[]", match.group(1), maxsplit=1)[0])
    lines = node_lines(text, roots)
    return [problem_line(p, lines) for p in problems]
