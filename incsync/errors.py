"""Typed errors: every message names the model/recipient/setting at fault and the fix; and the text of an
unexpected exception in one readable line, secrets removed."""

from __future__ import annotations

import re


class IncsyncError(Exception):
    """Base class for every error incsync raises on purpose."""


class ConfigError(IncsyncError):
    """The configuration file is invalid; ``problems`` holds one line per problem."""

    def __init__(self, path: str, problems: list[str], lines: list[int | None] | None = None) -> None:
        self.path = path
        self.problems = problems
        self.lines = list(lines) if lines is not None else [None] * len(problems)  # 1-based, where known
        text = "\n".join(f"  {line}" for line in self.located())
        super().__init__(f"invalid incsync configuration ({len(problems)} problem(s)):\n{text}")

    def located(self) -> list[str]:
        """``file:line: problem`` (``file: problem`` where the line is unknown), one per problem."""
        return [f"{self.path}:{line}: {p}" if line else f"{self.path}: {p}" for p, line in zip(self.problems, self.lines, strict=False)]


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


def root_cause(exc: BaseException) -> str:
    """The deepest Java cause's class and message, else the Python message's first line."""
    java = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
    if java is not None:
        try:
            causes: list[str] = []
            while java is not None and len(causes) < 20:
                causes.append(f"{java.getClass().getSimpleName()}: {java.getMessage()}")
                java = java.getCause()
            return " <- ".join(reversed(causes[-2:])) if len(causes) > 1 else causes[0]
        except Exception:  # noqa: BLE001 - the gateway may be gone; fall back to the text
            pass
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    lines = text.splitlines()
    # Spark Connect sends the server's JVM trace as text: its last "Caused by" is the driver's own words.
    causes = [line.removeprefix("Caused by: ").strip() for line in lines if line.startswith("Caused by: ")]
    return f"{causes[-1]} <- {lines[0]}" if causes else lines[0]


def sanitize(text: str, secrets: list[str]) -> str:
    """Remove secrets and anything that looks like one; keep the message to one readable line."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    text = re.sub(r"(?i)(password\s*[=:]\s*)[^\s&;,)]+", r"\1***", text)
    text = re.sub(r"//[^/@\s]*:[^/@\s]*@", "//***@", text)
    text = " ".join(text.split())
    return text[:500]
