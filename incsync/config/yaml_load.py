"""YAML documents as PyYAML's safe loader reads them, fast enough for 10,000 recipients.

PyYAML's C loader still builds and resolves every node in Python, so a 10,000-recipient file costs a
noticeable pause, paid by every process that loads the config (the CLI, the code server, each run
worker). Large files are parsed by rapidyaml (C++), and the tree is turned into
Python objects here with PyYAML's own rules for plain scalars (its implicit resolvers and safe
constructor), so ``yes``, ``1e3``, ``2024-01-01`` or ``~`` mean exactly what they mean to PyYAML.
Anything this path does not model — anchors, aliases, merge keys, explicit tags, several documents —
and any parse error go to PyYAML, whose errors name the line. ``incsync_tests/config/test_yaml_load.py``
checks both paths give the same objects.
"""

from __future__ import annotations

from typing import Any

import yaml

FAST_PATH_MIN_BYTES = 64 << 10  # below this PyYAML costs little; its path stays the common one
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_STR = "tag:yaml.org,2002:str"
_PYYAML_SPECIAL = ("\t", "\r", "\x85", "\u2028", "\u2029", "\ufeff")


class _Unsupported(Exception):
    """A construct the fast path leaves to PyYAML."""


def load_yaml(text: str) -> Any:
    """``yaml.safe_load(text)``; raises ``yaml.YAMLError`` like it."""
    if len(text) >= FAST_PATH_MIN_BYTES:
        try:
            return fast_load(text)
        except _Unsupported:
            pass
        except Exception:  # noqa: BLE001 - rapidyaml's parse errors: PyYAML reports them with the line
            pass
    return yaml.load(text, Loader=_SAFE_LOADER)  # noqa: S506 - the safe loader


def fast_load(text: str) -> Any:
    """The rapidyaml path; raises ``_Unsupported`` for what only PyYAML handles."""
    import ryml

    if any(c in text for c in _PYYAML_SPECIAL):
        raise _Unsupported  # tabs, CR and Unicode line breaks: PyYAML's corner cases, not worth modelling
    tree = ryml.parse_in_arena(text.encode())
    root = tree.root_id()
    if tree.is_stream(root):
        if tree.num_children(root) != 1:
            raise _Unsupported
        root = tree.first_child(root)
    resolve = _PlainScalars()
    none = ryml.NONE
    # One call per node for its flags; the rest are bit tests.
    refused = ryml.KEYANCH | ryml.VALANCH | ryml.KEYREF | ryml.VALREF | ryml.KEYTAG | ryml.VALTAG
    is_map, is_seq, has_val = ryml.MAP, ryml.SEQ, ryml.VAL
    key_plain, val_plain, val_nil = ryml.KEY_PLAIN, ryml.VAL_PLAIN, ryml.VALNIL
    node_type, first_child, next_sibling, key_of, val_of = tree.type, tree.first_child, tree.next_sibling, tree.key, tree.val

    def convert(node: int) -> Any:
        flags = node_type(node)
        if flags & refused:
            raise _Unsupported
        if flags & is_map:
            out: dict[Any, Any] = {}
            child = first_child(node)
            while child != none:
                key = resolve(bytes(key_of(child)).decode(), plain=bool(node_type(child) & key_plain))
                if key == "<<" or isinstance(key, (list, dict)):
                    raise _Unsupported
                out[key] = convert(child)
                child = next_sibling(child)
            return out
        if flags & is_seq:
            items = []
            child = first_child(node)
            while child != none:
                items.append(convert(child))
                child = next_sibling(child)
            return items
        if not flags & has_val:
            raise _Unsupported
        plain = bool(flags & val_plain)
        if flags & val_nil and plain:
            return None
        return resolve(bytes(val_of(node)).decode(), plain=plain)

    return convert(root)


class _PlainScalars:
    """PyYAML's resolution of scalars: quoted and block scalars are strings; a plain one takes the first
    implicit resolver whose pattern matches, then the safe constructor builds its value."""

    def __init__(self) -> None:
        self._resolvers = yaml.resolver.Resolver.yaml_implicit_resolvers
        self._constructor = yaml.constructor.SafeConstructor()
        self._cache: dict[str, Any] = {}

    def __call__(self, text: str, *, plain: bool) -> Any:
        if not plain:
            return text
        if text in self._cache:
            return self._cache[text]
        tag = _STR
        for candidate, pattern in self._resolvers.get(text[:1], []) + self._resolvers.get(None, []):
            if pattern.match(text):
                tag = candidate
                break
        value = text if tag == _STR else self._constructor.construct_object(yaml.ScalarNode(tag, text), deep=True)
        if not isinstance(value, (list, dict, set)):
            self._cache[text] = value
        return value
