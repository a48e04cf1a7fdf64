"""How the `incsync` command talks: one-line errors, JSON, progress, and a log file for the chatter.

Standard library only at import time (`incsync transfer --worker` stays a thin client); rich is
imported when a progress bar is drawn.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

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

    def __init__(self, directory: Path, command: str):
        self.directory = directory
        self.path = directory / f"incsync-{command}-{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{os.getpid()}.log"
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> Chatter:
        import tempfile

        # Written in the temporary folder first, moved beside the instance only when something was said:
        # a command that says nothing creates no folder.
        fd, temporary = tempfile.mkstemp(prefix="incsync-", suffix=".log")
        self._temporary = Path(temporary)
        self.file = open(fd, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - closed in __exit__
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


# --- progress -----------------------------------------------------------------------------------------


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def progress_line(*, done: int, total: int, rows: int, elapsed: float, recipients_done: int = 0, recipients: int = 1) -> str:
    """``windows 12/40 · rows 1,234 · 410 rows/s · ETA 1m05s`` (ETA from the windows' pace so far)."""
    parts = [f"windows {done}/{total}"]
    if recipients > 1:
        parts.append(f"recipients {recipients_done}/{recipients}")
    parts.append(f"rows {rows:,}")
    if elapsed > 0 and done:
        parts.append(f"{rows / elapsed:,.0f} rows/s")
        parts.append(f"ETA {_duration(elapsed / done * (total - done))}" if done < total else f"took {_duration(elapsed)}")
    else:
        parts.append("ETA ?")
    return " · ".join(parts)


@dataclass
class Progress:
    """Counts windows and rows as the transfers commit them; draws a rich status line on a terminal."""

    total: int
    recipients: dict[str, int] = field(default_factory=dict)  # recipient -> its windows
    enabled: bool = True
    started: float = field(default_factory=time.monotonic)
    done: int = 0
    rows: int = 0
    _done_by_recipient: dict[str, int] = field(default_factory=dict)
    _seen: set[tuple[str, str]] = field(default_factory=set)
    _live: Any = None

    def __enter__(self) -> Progress:
        if self.enabled and (self.total > 1 or len(self.recipients) > 1) and _is_terminal(sys.stderr):
            from rich.console import Console
            from rich.live import Live

            # A worker's relay of its client's terminal says how wide that terminal is.
            console = Console(file=sys.stderr, highlight=False, width=getattr(sys.stderr, "columns", None))
            self._live = Live(self.line(), console=console, refresh_per_second=4, transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)
            self._live = None

    def committed(self, recipient: str, window: str, rows: int) -> None:
        if (recipient, window) in self._seen:
            return
        self._seen.add((recipient, window))
        self.done += 1
        self.rows += rows
        self._done_by_recipient[recipient] = self._done_by_recipient.get(recipient, 0) + 1
        if self._live is not None:
            self._live.update(self.line())

    def line(self, *, now: float | None = None) -> str:
        finished = sum(1 for r, n in self.recipients.items() if self._done_by_recipient.get(r, 0) >= n)
        return progress_line(
            done=self.done, total=self.total, rows=self.rows, elapsed=(now or time.monotonic()) - self.started,
            recipients_done=finished, recipients=len(self.recipients),
        )


def recipient_line(lines: Sequence[Any]) -> str:
    """One recipient's windows in one line: the window range, the summed counts, the newest high watermark
    and how many windows failed (``lines`` are ``orchestration.runs.TransferLine``, in window order)."""
    if len(lines) == 1:
        return str(lines[0])
    first, ok = lines[0], [line for line in lines if line.ok]
    windows = f"{lines[0].window} .. {lines[-1].window} ({len(lines)} windows)"
    if not ok:
        return f"{first.model:<12} {first.recipient:<12} {windows} FAILED"
    hw = max((line.high_watermark for line in ok if line.high_watermark), default=None)
    kinds = "+".join(dict.fromkeys(line.transfer_type for line in ok if line.transfer_type))
    failed = f" FAILED {len(lines) - len(ok)} of {len(lines)} windows" if len(ok) < len(lines) else ""
    return (
        f"{first.model:<12} {first.recipient:<12} {windows} rows_transferred={sum(line.rows_transferred or 0 for line in ok)} "
        f"delta_rows_transferred={sum(line.delta_rows_transferred or 0 for line in ok)} high_watermark={hw} {kinds}{failed}"
    )


class RecipientLines:
    """Prints one line per recipient as soon as every one of its windows has reported (``recipient_line``)."""

    def __init__(self, windows: dict[str, int], emit: Callable[[str], None]):
        self._expected = windows
        self._lines: dict[str, list[Any]] = {}
        self._emit = emit

    def add(self, line: Any) -> None:
        lines = self._lines.setdefault(line.recipient, [])
        lines.append(line)
        if len(lines) == self._expected.get(line.recipient, 1):
            self._emit(recipient_line(sorted(self._lines.pop(line.recipient), key=lambda x: x.window)))

    def flush(self) -> None:
        """The recipients whose windows did not all report (a run that failed before it recorded them)."""
        for recipient in sorted(self._lines):
            lines = sorted(self._lines.pop(recipient), key=lambda x: x.window)
            self._emit(f"{recipient_line(lines)} ({len(lines)} of {self._expected.get(recipient, 1)} windows reported)")


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


# --- incsync transfers ----------------------------------------------------------------------------------


def _seconds(value: float | None) -> str:
    return "-" if value is None else (f"{value:.1f}s" if value < 60 else _duration(value))


def transfers_lines(transfers: list[Any]) -> list[str]:
    """The table of ``incsync transfers``: one line per run, its error's first line under a failed one."""
    lines = [f"{'created (UTC)':<20} {'status':<16} {'mode':<12} {'model(s)':<16} {'recipient(s)':<20} {'windows':>7} "
             f"{'rows':>9} {'delta':>9} {'duration':>8}  {'owner(s)':<20} run      tags"]
    for t in transfers:
        tags = ",".join(f"{k}={v}" for k, v in sorted(t.tags.items()))
        lines.append(
            f"{t.created_at:%Y-%m-%d %H:%M:%S}  {t.status.value:<16} {t.mode or '-':<12} {','.join(t.models):<16} "
            f"{','.join(t.recipients):<20} {t.partitions_committed:>7} {t.rows_transferred:>9} "
            f"{t.delta_rows_transferred:>9} {_seconds(t.duration_seconds):>8}  {','.join(t.owners) or '-':<20} "
            f"{t.run_id[:8]} {tags}".rstrip()
        )
        if t.error:
            lines.append(f"    error: {t.error}")
    return lines
