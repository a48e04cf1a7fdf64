"""Typed errors: every message names the model/recipient/setting at fault and the fix."""

from __future__ import annotations


class IncsyncError(Exception):
    """Base class for every error incsync raises on purpose."""


class ConfigError(IncsyncError):
    """The configuration file is invalid; ``problems`` holds one line per problem."""

    def __init__(self, path: str, problems: list[str], lines: list[int | None] | None = None):
        self.path = path
        self.problems = problems
        self.lines = list(lines) if lines is not None else [None] * len(problems)  # 1-based, where known
        text = "\n".join(f"  {line}" for line in self.located())
        super().__init__(f"invalid incsync configuration ({len(problems)} problem(s)):\n{text}")

    def located(self) -> list[str]:
        """``file:line: problem`` (``file: problem`` where the line is unknown), one per problem."""
        return [f"{self.path}:{line}: {p}" if line else f"{self.path}: {p}" for p, line in zip(self.problems, self.lines)]


class InputError(IncsyncError):
    """A bad argument, tag or status given on the command line or as a run tag."""


class SourceError(IncsyncError):
    """A source could not be read (connection, permissions, missing table or column)."""


class SchemaError(IncsyncError):
    """A source or destination schema does not fit the model."""


class StagingError(IncsyncError):
    """The staged files do not hold what the source read returned (e.g. a staging folder Spark's executors
    wrote to but this process cannot see)."""


class ValidationError(IncsyncError):
    """A staged batch breaks the model's contract (NULL or duplicate key, NULL last-modified)."""


class PublishError(IncsyncError):
    """A destination refused a publish; nothing was made visible."""


class LeaseError(PublishError):
    """Another writer published to the same (model, recipient) since this transfer read its state."""


class OwnershipError(PublishError):
    """A destination table or prefix belongs to another recipient: nothing was written."""


class NotSubscribedError(InputError):
    """A transfer names a recipient none of whose products holds the model: nothing was read or written."""
