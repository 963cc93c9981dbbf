"""A TCP proxy on loopback that delays every byte it forwards: network delay without netem.

This machine's kernel has no sch_netem, so "the network to broker 2 is slow" is made in
user space: a broker advertises a proxy's port instead of its own (see
`infra.cluster_layout.Routes`), clients and the other brokers connect to the proxy, and the
proxy forwards to the broker's real port, holding each chunk it reads `delay_ms` before
writing it on (one way: a request/response round trip gains twice the delay), optionally
at no more than `bandwidth_bytes_s`. With delay 0 and no cap it is a pass-through, so it
can sit in front of a broker for a whole run and be switched on and off at runtime.

One proxy serves several routes (listening port -> target) with one setting, so a broker's
inbound path and its outbound replication (through proxies in front of the other
brokers' REPLICATION listeners) slow down together. The forwarding runs in a process of
its own (matrix/mechanisms/delay_proxy_process.py says why: as a thread of the matrix
runner it waited for the runner's interpreter, hundreds of milliseconds at p99 on a
loaded host); this is its handle, and `set_delay`/`set_bandwidth` (which return once the
engine applies them) are safe from any thread. A target may be a callable, resolved here
at each new connection: the proxy's ports must be known before the cluster is laid out,
the brokers' real ports only after.
"""

from __future__ import annotations

import itertools
import json
import logging
import socket
import subprocess
import sys
import threading
import time
from typing import Callable, Union

from demo.faults.base import now_ms

log = logging.getLogger(__name__)

Target = Union[tuple[str, int], Callable[[], tuple[str, int]]]
REPLY_TIMEOUT_S = 10


class DelayProxy:
    def __init__(self, delay_ms: float = 0.0, bandwidth_bytes_s: float = 0.0):
        self.delay_s = delay_ms / 1000.0
        self.bandwidth = float(bandwidth_bytes_s)   # 0: no cap
        self._routes: dict[int, Target] = {}
        self._pending: list[tuple[int, socket.socket]] = []
        self._process: subprocess.Popen | None = None
        self._control: socket.socket | None = None
        self._reader: threading.Thread | None = None
        self._send_lock = threading.Lock()
        self._replies: dict[int, dict] = {}
        self._replied = threading.Condition()
        self._closed = False      # the engine's side of the control socket closed
        self._requests = itertools.count(1)
        self._stats = {"connections": 0, "failed_connects": 0, "bytes_up": 0, "bytes_down": 0}

    # ---- settings (any thread) -----------------------------------------------------------
    @property
    def delay_ms(self) -> float:
        return self.delay_s * 1000.0

    def set_delay(self, delay_ms: float) -> None:
        """Delay of each direction from now on (chunks already held keep theirs)."""
        self.delay_s = max(0.0, delay_ms) / 1000.0
        self._ask({"op": "delay", "s": self.delay_s})

    def set_bandwidth(self, bytes_s: float) -> None:
        self.bandwidth = max(0.0, float(bytes_s))
        self._ask({"op": "bandwidth", "bytes_s": self.bandwidth})

    @property
    def stats(self) -> dict:
        """What the engine forwarded: connections, failed_connects, bytes_up, bytes_down
        (the last figures it gave when it no longer answers)."""
        reply = self._ask({"op": "stats"})
        if reply is not None:
            self._stats = dict(reply["stats"])
        return dict(self._stats)

    # ---- routes ----------------------------------------------------------------------------
    def add_route(self, target: Target, listen_port: int = 0) -> int:
        """Listen on 127.0.0.1:listen_port (0: a free one) and forward to `target`; the
        port is bound at once, so it can be advertised before the proxy starts."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", listen_port))
        sock.listen(128)
        port = sock.getsockname()[1]
        route = len(self._routes) + 1
        self._routes[route] = target
        if self._process is None:
            self._pending.append((route, sock))
        else:
            self._hand_over(route, sock)
        return port

    def start(self) -> "DelayProxy":
        if self._process is not None:
            return self
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._process = subprocess.Popen(
            [sys.executable, "-m", "matrix.mechanisms.delay_proxy_process",
             str(theirs.fileno())], pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL)
        theirs.close()
        self._control, self._closed = mine, False
        self._reader = threading.Thread(target=self._read, name="delay-proxy-control",
                                        daemon=True)
        self._reader.start()
        if self._ask({"op": "delay", "s": self.delay_s}) is None:
            code = self._process.poll()
            self.stop()
            raise RuntimeError(f"the delay proxy's engine did not start (exit code {code}; "
                               f"its error is above)")
        self._ask({"op": "bandwidth", "bytes_s": self.bandwidth})
        for route, sock in self._pending:
            self._hand_over(route, sock)
        self._pending.clear()
        return self

    def stop(self) -> None:
        """Close every route and connection and end the engine; safe to call again."""
        for _, sock in self._pending:
            sock.close()
        self._pending.clear()
        process, self._process = self._process, None
        if process is None:
            return
        self._ask({"op": "stop"}, process=process)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        if self._control is not None:
            self._control.close()
            self._control = None
        if self._reader is not None:
            self._reader.join(10)
            self._reader = None

    def __enter__(self) -> "DelayProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- the control socket ----------------------------------------------------------------
    def _send(self, msg: dict, fds: list[int] = ()) -> None:
        data = (json.dumps(msg) + "\n").encode()
        with self._send_lock:
            if fds:
                socket.send_fds(self._control, [data], list(fds))
            else:
                self._control.sendall(data)

    def _ask(self, msg: dict, fds: list[int] = (), process=None) -> dict | None:
        """Send a request and wait for its answer (None: no engine, or no answer)."""
        if (process or self._process) is None or self._control is None:
            return None
        req = next(self._requests)
        try:
            self._send({**msg, "req": req}, fds)
        except OSError as e:
            log.debug("delay proxy: engine not reachable: %s", e)
            return None
        with self._replied:
            self._replied.wait_for(lambda: req in self._replies or self._closed,
                                   REPLY_TIMEOUT_S)
            reply = self._replies.pop(req, None)
        if reply is None and not self._closed:
            log.warning("delay proxy: no answer to %s within %d s", msg["op"], REPLY_TIMEOUT_S)
        return reply

    def _hand_over(self, route: int, sock: socket.socket) -> None:
        """Give the engine the route's listening socket (it keeps its own copy)."""
        target = self._routes[route]
        fixed = None if callable(target) else list(target)
        self._ask({"op": "route", "route": route, "target": fixed}, fds=[sock.fileno()])
        sock.close()

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                data = self._control.recv(65536)
            except (OSError, AttributeError):
                data = b""
            if not data:
                break
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                self._on_message(json.loads(line))
        with self._replied:
            self._closed = True
            self._replied.notify_all()

    def _on_message(self, msg: dict) -> None:
        if msg["op"] == "resolve":
            target = self._routes.get(msg["route"])
            try:
                where = list(target()) if callable(target) else list(target)
            except (LookupError, OSError, TypeError) as e:
                log.debug("delay proxy: route %s has no target yet: %s", msg["route"], e)
                where = None
            self._send({"op": "resolved", "ask": msg["ask"], "target": where})
            return
        with self._replied:
            self._replies[msg.get("req")] = msg
            self._replied.notify_all()


def hold_delay(ctx, run, proxy: DelayProxy, duration_s: float, until, heal: Callable[[], None]
               ) -> None:
    """Keep a delay the caller turned on (at run.fault_ms) until `until()` is true (the
    finding arrived), duration_s has passed or the run is stopping; then note how long it
    was on and what the proxy forwarded, and `heal()` (also when this raises)."""
    deadline = time.monotonic() + duration_s
    try:
        while time.monotonic() < deadline and not ctx.stopping():
            if until is not None and until():
                break
            ctx.sleep(1.0)
    finally:
        run.notes["delayed_s"] = round((now_ms() - run.fault_ms) / 1000, 1)
        run.notes["proxy"] = dict(proxy.stats)
        heal()
