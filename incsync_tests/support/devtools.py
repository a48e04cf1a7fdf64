"""Headless Chromium driven over the DevTools protocol: open a page, run a script in it (fill a form, click a
button), wait for the next page, read its text, take a screenshot. A real browser: its own cookies, Origin
headers and form posts."""

from __future__ import annotations

import base64
import itertools
import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from incsync_tests.support.browser import CHROMIUM_FLAGS, chromium, stop_group
from incsync_tests.support.host import free_port


class Tab:
    """One page of the browser."""

    def __init__(self, socket: Any) -> None:  # noqa: ANN401 - a websockets ClientConnection
        self.socket = socket
        self.ids = itertools.count(1)

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """Run ``method``; its result (events arriving meanwhile are dropped, but a load is remembered)."""
        call = next(self.ids)
        self.socket.send(json.dumps({"id": call, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv(timeout=60))
            if message.get("id") == call:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                return message.get("result", {})
            if message.get("method") == "Page.loadEventFired":
                self.loaded = True

    def wait_load(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not getattr(self, "loaded", False):
            message = json.loads(self.socket.recv(timeout=max(0.1, deadline - time.monotonic())))
            if message.get("method") == "Page.loadEventFired":
                break
        self.loaded = False

    def open(self, url: str) -> None:
        self.loaded = False
        self.send("Page.navigate", url=url)
        self.wait_load()

    def run(self, script: str) -> Any:  # noqa: ANN401 - what the script returns
        answer = self.send("Runtime.evaluate", expression=script, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in answer:
            raise AssertionError(f"script failed: {answer['exceptionDetails']}")
        return answer.get("result", {}).get("value")

    def submit(self, script: str) -> None:
        """Run ``script`` (one that posts a form) and wait for the page it leads to."""
        self.loaded = False
        self.run(script)
        self.wait_load()

    def text(self) -> str:
        return str(self.run("document.body.innerText"))

    def screenshot(self, path: Path, *, width: int = 900) -> None:
        """A PNG of the whole page at ``width`` CSS pixels."""
        height = int(self.run("document.documentElement.scrollHeight"))
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        shot = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(shot["data"]))


@contextmanager
def browser(profile: Path) -> Iterator[Tab]:
    """Chromium with a fresh profile and one blank tab."""
    from websockets.sync.client import connect

    port = free_port()
    proc = subprocess.Popen([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--remote-debugging-port={port}",
                             "--remote-allow-origins=*", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2) as answer:
                    pages = [t for t in json.loads(answer.read()) if t.get("type") == "page"]
                if pages:
                    break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "chromium's DevTools did not answer"
            time.sleep(0.2)
        with connect(pages[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=30) as socket:
            tab = Tab(socket)
            tab.send("Page.enable")
            yield tab
    finally:
        stop_group(proc)
