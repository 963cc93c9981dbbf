"""An Alertmanager webhook receiver for tests: records every notification it is sent."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class WebhookReceiver:
    """An HTTP server on a free loopback port that records every Alertmanager webhook
    notification as (request path, JSON body); `url` + a path is a receiver's URL."""

    def __init__(self) -> None:
        self.notifications: list[tuple[str, dict]] = []
        lock = threading.Lock()
        received = self.notifications

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with lock:
                    received.append((self.path, json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def find(self, path: str, predicate) -> dict | None:
        """The first notification sent to `path` that `predicate` accepts, or None."""
        for p, n in list(self.notifications):
            if p == path and predicate(n):
                return n
        return None

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
