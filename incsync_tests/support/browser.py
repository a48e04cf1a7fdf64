"""Headless Chromium over a Dagster webserver: start the server on a free port, read a page's DOM and text."""

from __future__ import annotations

import html
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from incsync_tests.support.host import free_port, in_ci

REPO = Path(__file__).resolve().parents[2]
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def chromium() -> str:
    """The Chromium binary; fails under CI=true when it is missing, skips otherwise."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        assert not in_ci(), "Debian chromium is missing: run scripts/system-deps.sh test"
        pytest.skip("chromium is not installed (scripts/system-deps.sh test installs it)")
    return found


def stop_group(proc: subprocess.Popen) -> None:
    """End a process that leads its own session, and its children; SIGKILL when SIGTERM is ignored."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def wait_for_http(url: str, proc: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            assert proc.poll() is None, f"the server exited ({proc.returncode}):\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"{url} did not answer in {timeout:.0f} s:\n{log.read_text()[-3000:]}"
            time.sleep(0.3)


@contextmanager
def webserver(workdir: Path, env: dict[str, str]) -> Iterator[str]:
    """``dagster-webserver`` over the repository's workspace.yaml (no daemon), on a free port; yields its URL."""
    port = free_port()
    log = workdir / "webserver.log"
    server = str(Path(sys.executable).parent / "dagster-webserver")
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [server, "-w", str(REPO / "workspace.yaml"), "-h", "127.0.0.1", "-p", str(port)],
            cwd=workdir, env={**os.environ, "DAGSTER_DISABLE_TELEMETRY": "yes", **env},
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for_http(f"{url}/server_info", proc, log, timeout=60)
        yield url
    finally:
        stop_group(proc)


def dump_dom(url: str, profile: Path) -> str:
    """The page's DOM after its scripts ran (Chromium's virtual time: the GraphQL answers are in)."""
    page = subprocess.run(
        [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=20000", "--dump-dom", url],
        capture_output=True, text=True, timeout=90, start_new_session=True,
    )
    assert page.returncode == 0 and page.stdout, page.stderr[-2000:]
    return page.stdout


def page_text(dom: str) -> str:
    """The text a reader sees: no scripts or styles, tags removed, whitespace collapsed."""
    body = re.sub(r"<(script|style)[^>]*>.*?</\1>", " ", dom, flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", body))).strip()
