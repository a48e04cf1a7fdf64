"""Driver errors in one readable line: the deepest Java cause, secrets removed."""

from __future__ import annotations

import re


def url_without_query(url: str) -> str:
    return url.split("?", 1)[0]


def root_cause(exc: BaseException) -> str:
    """The deepest Java cause's class and message, else the Python message's first line."""
    java = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
    if java is not None:
        try:
            causes = []
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
