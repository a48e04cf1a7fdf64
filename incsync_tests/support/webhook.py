"""A webhook for the alert tests: a local HTTP server that keeps each body POSTed to it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Webhook:
    """The bodies it accepted, in order; ``refuse`` holds the numbers (from 0) of the requests it answers
    503 instead, without keeping their body. Its URL carries a token, as webhooks' do."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/hooks/T0KEN-abc"
        self.bodies: list[bytes] = []
        self.refuse: set[int] = set()
        self.requests = 0

    @property
    def posted(self) -> list[dict[str, object]]:
        return [json.loads(body) for body in self.bodies]

    def run_ids(self) -> list[str]:
        return [str(p["run_id"]) for p in self.posted]


@contextmanager
def webhook_server() -> Iterator[Webhook]:
    lock = threading.Lock()
    hook: Webhook

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers["Content-Length"]))
            with lock:
                number, hook.requests = hook.requests, hook.requests + 1
                if number not in hook.refuse:
                    hook.bodies.append(body)
            self.send_response(503 if number in hook.refuse else 204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    hook = Webhook(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hook
    finally:
        server.shutdown()
        server.server_close()
