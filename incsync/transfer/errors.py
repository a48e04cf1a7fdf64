"""Errors of the transfer engine."""

from __future__ import annotations

import re

from incsync.errors import IncsyncError, PublishError


class TransferFailures(IncsyncError):
    """Recipients of one run failed: several, or one with an error that does not name it."""


class MassDeleteError(PublishError):
    """A transfer or repair would remove more of a recipient's rows than ``max_delete_fraction`` allows."""


class EngineError(IncsyncError):
    """Spark failed on one recipient's read, staging or publish, for a reason incsync does not name itself."""


# A qualified Java/Scala class (``java.io.IOException: ``, ``org.apache.spark.SparkException: ``) and
# py4j's preamble: words for whoever debugs the JVM, not for a user.
_JAVA_CLASS = re.compile(r"\b(?:[a-z_$][\w$]*\.)+[A-Z][\w$]*(?:Exception|Error|Throwable)\b:?\s*")
_PY4J_CALL = re.compile(r"An error occurred while calling [\w.$]+\.?\s*(?:: )?")


def engine_words(exc: BaseException) -> str:
    """What the engine said about ``exc``, in its deepest cause's words, without Java class names."""
    java = getattr(exc, "java_exception", None)
    text = ""
    try:
        while java is not None:
            text = str(java.getMessage() or text)
            java = java.getCause()
    except Exception:  # noqa: BLE001 - the gateway may be gone: the Python text below stands in
        text = ""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip() and not line.strip().startswith("at ")]
    text = text or (lines[-1] if lines else type(exc).__name__)
    text = _JAVA_CLASS.sub("", _PY4J_CALL.sub("", text)).strip()
    return " ".join(text.split())[:500] or "no message"


def named_error(exc: Exception, *, model: str, recipient: str) -> Exception:
    """``exc`` as the failure of one recipient: incsync's own errors as they are, an engine's (py4j, PySpark)
    as an ``EngineError`` naming the model and the recipient, never a Java class."""
    if isinstance(exc, IncsyncError) or not type(exc).__module__.startswith(("py4j", "pyspark")):
        return exc
    error = EngineError(
        f"model {model}, recipient {recipient}: Spark failed: {engine_words(exc)}. Windows it did not commit "
        "were not published; the run's log holds Spark's full report."
    )
    error.__cause__ = exc
    return error
