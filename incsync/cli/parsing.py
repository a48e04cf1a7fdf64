"""The parser of the `incsync` command: mistakes as one line naming the fix, and its commands by name.

Standard library and ``incsync.cli.errors`` only: `incsync transfer --worker` stays a thin client.
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from incsync.cli.errors import UsageError


class Parser(argparse.ArgumentParser):
    """argparse whose mistakes are one line naming the fix (exit status 2), not a usage dump."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands: dict[str, argparse.ArgumentParser] = {}  # filled by the Commands of add_commands()

    def add_commands(self, **kwargs: Any) -> Commands:
        """``add_subparsers(**kwargs)``, whose parsers this parser knows by name (to suggest one for a typo)."""
        return Commands(self.add_subparsers(**kwargs), self.commands)

    def error(self, message: str) -> None:  # type: ignore[override]  # argparse's error never returns; ours raises instead of exiting
        names = list(self.commands)
        choice = re.match(r"argument (\S+): invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if choice and names and choice.group(2) not in names and "'validate'" in choice.group(3):
            typed = choice.group(2)
            close = difflib.get_close_matches(typed, names, n=1)
            hint = f'did you mean "{close[0]}"?' if close else f"one of: {', '.join(names)}"
            raise UsageError(f'"{typed}" is not an incsync command — {hint} (`incsync --help` lists them)')
        raise UsageError(f"{self.prog}: {message} — see `{self.prog} --help`")


class Commands:
    """The commands of a ``Parser``: what ``add_subparsers()`` returned, used through its public
    ``add_parser`` only, each new parser remembered by its name."""

    def __init__(self, subparsers: Any, known: dict[str, argparse.ArgumentParser]) -> None:
        self._subparsers = subparsers
        self._known = known

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = self._subparsers.add_parser(name, **kwargs)
        self._known[name] = parser
        return parser


class LazyChoices:
    """An argument's ``choices`` read from ``load`` only when argparse checks a value or shows the help, so
    building the parser imports nothing heavy. Pass a ``metavar`` too: argparse lists choices without one."""

    def __init__(self, load: Callable[[], Iterable[str]]) -> None:
        self._load = load

    def __contains__(self, value: object) -> bool:
        return value in list(self._load())

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._load()))
