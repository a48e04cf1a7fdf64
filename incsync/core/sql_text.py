"""SQL text as users paste it: trailing `;` and comments of a ``source_query``, and table names as
database tools print them (``public."Order"``, ``"Order"``, `` `db`.`t` ``, ``public.Order``).

Both are read with a small scanner that knows string literals, quoted identifiers, dollar quotes and
comments, so a ``--`` inside a string is text and a ``.`` inside quotes is part of a name.
"""

from __future__ import annotations

import re

_DOLLAR_TAG = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$")


def _segments(query: str, *, mysql: bool) -> list[tuple[str, int, int]]:
    """``(kind, start, end)`` spans: kind is ``code``, ``quoted`` (strings, identifiers) or ``comment``."""
    spans: list[tuple[str, int, int]] = []
    i, n, code_start = 0, len(query), 0

    def close_code(at: int) -> None:
        if at > code_start:
            spans.append(("code", code_start, at))

    while i < n:
        ch = query[i]
        end = None
        kind = "quoted"
        if ch in "'\"`":
            # Backslash escapes: MySQL strings, and PostgreSQL E'' strings only.
            e_prefix = i > 0 and query[i - 1] in "eE" and (i < 2 or not (query[i - 2].isalnum() or query[i - 2] == "_"))
            escapes = ch == "'" and (mysql or e_prefix)
            j = i + 1
            while j < n:
                if escapes and query[j] == "\\" and j + 1 < n:
                    j += 2
                    continue
                if query[j] == ch:
                    if j + 1 < n and query[j + 1] == ch:  # doubled quote
                        j += 2
                        continue
                    break
                j += 1
            end = min(j + 1, n)
        elif ch == "$" and (m := _DOLLAR_TAG.match(query, i)) and (i == 0 or not (query[i - 1].isalnum() or query[i - 1] == "_")):
            close_at = query.find(m.group(0), m.end())
            end = n if close_at < 0 else close_at + len(m.group(0))
        elif query.startswith("--", i) or (mysql and ch == "#"):
            newline = query.find("\n", i)
            end, kind = (n if newline < 0 else newline), "comment"
        elif query.startswith("/*", i):
            close_at = query.find("*/", i + 2)
            end, kind = (n if close_at < 0 else close_at + 2), "comment"
        if end is None:
            i += 1
            continue
        close_code(i)
        spans.append((kind, i, end))
        i = code_start = end
    close_code(n)
    return spans


def pasted_query(query: str, *, vendor: str = "postgres") -> str:
    """The query without its trailing comments, whitespace and semicolons: what can go inside ``( ... )``.

    Nothing else is changed; a comment or ``;`` in the middle stays (and the database judges it).
    """
    text = query
    while True:
        spans = _segments(text, mysql=vendor in ("mysql", "mariadb"))
        while spans and (spans[-1][0] == "comment" or (spans[-1][0] == "code" and not text[spans[-1][1]:spans[-1][2]].strip())):
            spans.pop()
        if not spans:
            return ""
        cut = spans[-1][2]
        if spans[-1][0] == "code":
            cut = spans[-1][1] + len(text[spans[-1][1]:spans[-1][2]].rstrip())
        stripped = text[:cut]
        if stripped.endswith(";"):
            text = stripped[:-1]
            continue
        return stripped


_BARE_PART = re.compile(r"^[^\W\d][\w$]*$")


def split_qualified(name: str) -> list[str] | None:
    """The parts of a (possibly qualified) name as the database spells them; None when it is not one.

    ``public."Order"`` -> ``["public", "Order"]``; ``public.Order`` -> ``["public", "Order"]`` (the case as
    typed: incsync quotes every part, so nothing folds); `` `db`.`t` `` -> ``["db", "t"]``. A doubled quote
    character inside a quoted part stands for one. Unquoted parts are words (letters, digits, ``_``, ``$``).
    """
    parts: list[str] = []
    i, n = 0, len(name)
    while True:
        if i < n and name[i] in "\"`":
            quote, j, chars = name[i], i + 1, []
            while True:
                if j >= n:
                    return None  # unterminated quote
                if name[j] == quote:
                    if j + 1 < n and name[j + 1] == quote:
                        chars.append(quote)
                        j += 2
                        continue
                    break
                chars.append(name[j])
                j += 1
            part, i = "".join(chars), j + 1
        else:
            j = name.find(".", i)
            j = n if j < 0 else j
            part, i = name[i:j], j
            if not _BARE_PART.fullmatch(part):
                return None
        if not part or "\x00" in part:
            return None
        parts.append(part)
        if i == n:
            return parts
        if name[i] != ".":
            return None
        i += 1
