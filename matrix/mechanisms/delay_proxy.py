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
brokers' REPLICATION listeners) slow down together. It runs its own asyncio event loop
in a daemon thread; `set_delay`/`set_bandwidth` are safe from any thread. A target may be
a callable, resolved at each new connection: the proxy's ports must be known before the
cluster is laid out, the brokers' real ports only after.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from typing import Callable, Union

from demo.faults.base import now_ms

log = logging.getLogger(__name__)

Target = Union[tuple[str, int], Callable[[], tuple[str, int]]]
CHUNK = 64 * 1024
QUEUED_CHUNKS = 512          # per direction: beyond it the proxy stops reading (backpressure)


class DelayProxy:
    def __init__(self, delay_ms: float = 0.0, bandwidth_bytes_s: float = 0.0):
        self.delay_s = delay_ms / 1000.0
        self.bandwidth = float(bandwidth_bytes_s)   # 0: no cap
        self._pending: list[tuple[socket.socket, Target]] = []
        self._servers: list[asyncio.AbstractServer] = []
        self._tasks: set[asyncio.Task] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.stats = {"connections": 0, "failed_connects": 0, "bytes_up": 0, "bytes_down": 0}

    # ---- settings (any thread) -----------------------------------------------------------
    @property
    def delay_ms(self) -> float:
        return self.delay_s * 1000.0

    def set_delay(self, delay_ms: float) -> None:
        """Delay of each direction from now on (chunks already held keep theirs)."""
        self.delay_s = max(0.0, delay_ms) / 1000.0

    def set_bandwidth(self, bytes_s: float) -> None:
        self.bandwidth = max(0.0, float(bytes_s))

    # ---- routes ----------------------------------------------------------------------------
    def add_route(self, target: Target, listen_port: int = 0) -> int:
        """Listen on 127.0.0.1:listen_port (0: a free one) and forward to `target`; the
        port is bound at once, so it can be advertised before the proxy starts."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", listen_port))
        sock.listen(128)
        sock.setblocking(False)
        if self._loop is None:
            self._pending.append((sock, target))
        else:
            asyncio.run_coroutine_threadsafe(self._serve(sock, target), self._loop).result(10)
        return sock.getsockname()[1]

    def start(self) -> "DelayProxy":
        if self._thread is not None:
            return self
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=run, name="delay-proxy", daemon=True)
        self._thread.start()
        ready.wait(10)
        self._loop = loop
        for sock, target in self._pending:
            asyncio.run_coroutine_threadsafe(self._serve(sock, target), loop).result(10)
        self._pending.clear()
        return self

    def stop(self) -> None:
        """Close every route and connection and end the thread; safe to call again."""
        for sock, _ in self._pending:
            sock.close()
        self._pending.clear()
        loop, self._loop = self._loop, None
        if loop is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._close(), loop).result(10)
        except Exception as e:  # noqa: BLE001 - stopping anyway
            log.debug("closing the delay proxy: %s", e)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None

    def __enter__(self) -> "DelayProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- the event loop's side -----------------------------------------------------------
    async def _serve(self, sock: socket.socket, target: Target) -> None:
        server = await asyncio.start_server(
            lambda r, w: self._track(self._connection(r, w, target)), sock=sock)
        self._servers.append(server)

    def _track(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _close(self) -> None:
        for s in self._servers:
            s.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._servers.clear()

    async def _connection(self, c_reader, c_writer, target: Target) -> None:
        try:
            host, port = target() if callable(target) else target
            s_reader, s_writer = await asyncio.open_connection(host, port)
        except (OSError, asyncio.TimeoutError, LookupError) as e:
            self.stats["failed_connects"] += 1
            log.debug("delay proxy: cannot reach its target: %s", e)
            c_writer.close()
            return
        self.stats["connections"] += 1
        pipes = [asyncio.ensure_future(self._pipe(c_reader, s_writer, "bytes_up")),
                 asyncio.ensure_future(self._pipe(s_reader, c_writer, "bytes_down"))]
        try:
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for p in pipes:
                p.cancel()
            await asyncio.gather(*pipes, return_exceptions=True)
            for w in (c_writer, s_writer):
                w.close()

    async def _pipe(self, reader, writer, counter: str) -> None:
        """Forward reader -> writer, each chunk held until delay_s after it was read."""
        queue: asyncio.Queue = asyncio.Queue(QUEUED_CHUNKS)

        async def pump() -> None:
            try:
                while True:
                    data = await reader.read(CHUNK)
                    if not data:
                        break
                    await queue.put((time.monotonic() + self.delay_s, data))
            except (ConnectionError, OSError):
                pass
            finally:
                await queue.put(None)

        reading = asyncio.ensure_future(pump())
        line_free = 0.0   # when the (capped) line has sent what it was given
        try:
            while (item := await queue.get()) is not None:
                due, data = item
                now = time.monotonic()
                if self.bandwidth > 0:
                    line_free = max(line_free, now, due) + len(data) / self.bandwidth
                    due = line_free
                if due > now:
                    await asyncio.sleep(due - now)
                writer.write(data)
                await writer.drain()
                self.stats[counter] += len(data)
        except (ConnectionError, OSError):
            pass
        finally:
            reading.cancel()
            await asyncio.gather(reading, return_exceptions=True)


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
