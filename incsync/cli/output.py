"""How the `incsync` command talks: one-line errors, JSON, the table of transfers, and a log file for the
chatter (a transfer's progress and its lines: ``progress``).

Standard library only at import time: `incsync transfer --worker` stays a thin client.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sys
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from incsync.cli.progress import duration

LOG_DIR_ENV_VAR = "INCSYNC_LOG_DIR"
KEEP_LOGS = 20
# The loggers whose INFO lines go to the log file (never to the terminal).
CHATTY_LOGGERS = ("dagster", "py4j", "pyspark", "deltalake", "incsync")


def fix_separator(problem: str) -> str:
    """``problem; fix`` as ``problem — fix`` (the first ``; `` outside quotes only)."""
    quoted = False
    for i, ch in enumerate(problem):
        if ch == '"':
            quoted = not quoted
        elif not quoted and problem.startswith("; ", i):
            return problem[:i] + " — " + problem[i + 2 :]
    return problem


def config_problem_lines(exc: Any) -> list[str]:
    """A ConfigError's problems as ``file:line: path: problem — fix`` lines (the line where known)."""
    from incsync.errors import ConfigError

    return ConfigError(exc.path, [fix_separator(p) for p in exc.problems], exc.lines).located()


def error_lines(exc: Any) -> tuple[list[str], int]:
    """An ``IncsyncError`` as the command line says it, ``error: ...``, and the exit status: 2 when the file or the
    command line is wrong (``ConfigError``, ``InputError``), 1 when the work failed. By base class, so every
    subclass a package adds is said the same way."""
    from incsync.errors import ConfigError, InputError

    if isinstance(exc, ConfigError):
        return [f"error: {line}" for line in config_problem_lines(exc)], 2
    return [f"error: {exc}"], 2 if isinstance(exc, InputError) else 1


def to_json(value: Any) -> str:
    def default(obj: Any) -> Any:
        if isinstance(obj, datetime):
            return obj.isoformat()
        if isinstance(obj, Path):
            return str(obj)
        return str(obj)

    return json.dumps(value, default=default, sort_keys=False)


def print_json(value: Any) -> None:
    print(to_json(value), flush=True)


def log_dir(config_file: Path) -> Path:
    """``$INCSYNC_LOG_DIR``, else ``logs`` in the Dagster instance's folder of this config."""
    from incsync.paths import dagster_home

    env = os.environ.get(LOG_DIR_ENV_VAR)
    return Path(env) if env else dagster_home(config_file) / "logs"


class Chatter:
    """Sends what Dagster, Spark and Python's warnings print to a log file, not to the terminal.

    Python warnings (Dagster's BetaWarnings), library logging, and, when standard error is the
    process's own (a real command line, not a test capturing it), file descriptor 2 itself, so the
    JVM that Spark starts writes its banner and log4j lines there too. ``incsync`` WARNING lines still
    reach the terminal. The file is removed when nothing was written to it.
    """

    def __init__(self, directory: Path, command: str) -> None:
        self.directory = directory
        self.path = directory / f"incsync-{command}-{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{os.getpid()}.log"
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> Chatter:
        import tempfile

        # Written in the temporary folder first, moved beside the instance only when something was said:
        # a command that says nothing creates no folder.
        fd, temporary = tempfile.mkstemp(prefix="incsync-", suffix=".log")
        self._temporary = Path(temporary)
        self.file = open(fd, "a", buffering=1, encoding="utf-8")
        stack = self._stack
        stack.callback(self.file.close)
        # Warnings: formatted into the file.
        saved_show = warnings.showwarning
        warnings.showwarning = lambda message, category, filename, lineno, file=None, line=None: self.file.write(
            warnings.formatwarning(message, category, filename, lineno, line)
        )
        stack.callback(setattr, warnings, "showwarning", saved_show)
        # Logging: everything chatty to the file; incsync's warnings to the terminal as they were.
        handler = logging.StreamHandler(self.file)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        root.addHandler(handler)
        stack.callback(root.removeHandler, handler)
        for name in CHATTY_LOGGERS:
            logger = logging.getLogger(name)
            if logger.level == logging.NOTSET or logger.level > logging.INFO:
                stack.callback(logger.setLevel, logger.level)
                logger.setLevel(logging.INFO)
        terminal = _TerminalWarnings()
        ours = logging.getLogger("incsync")
        ours.addHandler(terminal)
        stack.callback(ours.removeHandler, terminal)
        # File descriptor 2: the JVM's banner and log4j lines.
        if sys.stderr is sys.__stderr__ and sys.__stderr__ is not None:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.flush()
                saved_fd = os.dup(2)
                os.dup2(self.file.fileno(), 2)
                terminal_err = io.TextIOWrapper(os.fdopen(saved_fd, "wb", buffering=0), write_through=True)
                sys.stderr = terminal_err

                def restore() -> None:
                    sys.stderr.flush()
                    os.dup2(saved_fd, 2)
                    sys.stderr = sys.__stderr__
                    terminal_err.close()

                stack.callback(restore)
        return self

    def __exit__(self, *exc: object) -> None:
        import shutil

        self._stack.close()
        self.has_output = self._temporary.stat().st_size > 0
        if not self.has_output:
            self._temporary.unlink()
            return
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            shutil.move(self._temporary, self.path)  # a rename on one filesystem: a JVM still writing keeps its file
        except OSError:
            self.path = self._temporary
            return
        self._prune()

    def _prune(self) -> None:
        logs = sorted(self.directory.glob("incsync-*.log"), key=lambda p: p.stat().st_mtime)
        for old in logs[:-KEEP_LOGS]:
            with contextlib.suppress(OSError):
                old.unlink()


class _TerminalWarnings(logging.Handler):
    """incsync's own WARNING lines on the terminal (what Python printed before any handler existed)."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            print(f"warning: {record.getMessage()}", file=sys.stderr, flush=True)
        except Exception:  # noqa: BLE001 - logging never raises
            self.handleError(record)


# --- incsync transfers ----------------------------------------------------------------------------------


def _seconds(value: float | None) -> str:
    return "-" if value is None else (f"{value:.1f}s" if value < 60 else duration(value))


def transfers_lines(transfers: list[Any]) -> list[str]:
    """The table of ``incsync transfers``: one line per run; under a failed one, its error's first line and
    whose it is to fix (the blamed party and its reason)."""
    lines = [f"{'created (UTC)':<20} {'status':<16} {'blamed':<10} {'mode':<12} {'model(s)':<16} {'recipient(s)':<20} {'windows':>7} "
             f"{'rows':>9} {'delta':>9} {'duration':>8}  {'owner(s)':<20} run      tags"]
    for t in transfers:
        tags = ",".join(f"{k}={v}" for k, v in sorted(t.tags.items()))
        lines.append(
            f"{t.created_at:%Y-%m-%d %H:%M:%S}  {t.status.value:<16} {t.blamed or '-':<10} {t.mode or '-':<12} {','.join(t.models):<16} "
            f"{','.join(t.recipients):<20} {t.partitions_committed:>7} {t.rows_transferred:>9} "
            f"{t.delta_rows_transferred:>9} {_seconds(t.duration_seconds):>8}  {','.join(t.owners) or '-':<20} "
            f"{t.run_id[:8]} {tags}".rstrip()
        )
        if t.error:
            lines.append(f"    error: {t.error}")
        if t.blamed:
            lines.append(f"    blamed {t.blamed}: {t.blame_reason}")
    return lines
