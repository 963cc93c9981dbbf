"""The delaying proxy's forwarding engine, in a process of its own (`python -m
matrix.mechanisms.delay_proxy_process FD`): matrix.mechanisms.delay_proxy starts it and
drives it over the control socket FD.

Why a process: the proxy stands in for a network, and a network does not wait for the
matrix runner's Python. Run as a thread of the runner (whose interpreter also drives the
Spark driver, the detectors, the workload's clients and the exporter), it waited for that
interpreter: on the loaded 3-broker matrix an ApiVersions round trip through it at delay 0
took p99 646-768 ms (max 929 ms), direct to the same brokers p99 51-194 ms (live matrix of
20261201T195748Z, 150 round trips each), and the slow-link rule rightly named the producer
behind it a slow link in a scenario that had nothing to do with it. Here it has an
interpreter to itself, and it asks the kernel for a higher CPU priority (as root; ignored
otherwise), since the host's load is not the network's.

Control protocol (JSON lines over a Unix stream socket; the parent's side is
delay_proxy.DelayProxy):

- parent -> engine: ``{"op": "route", "route": n, "target": [host, port] | null}`` with the
  route's listening socket passed along (SCM_RIGHTS; null: ask for the target at each new
  connection); ``{"op": "delay", "s": x, "req": k}``; ``{"op": "bandwidth", "bytes_s": x,
  "req": k}``; ``{"op": "stats", "req": k}``; ``{"op": "resolved", "ask": a, "target":
  [host, port] | null}``; ``{"op": "stop", "req": k}``.
- engine -> parent: ``{"op": "ack", "req": k}`` (after a route, delay, bandwidth or stop
  took effect), ``{"op": "stats", "req": k, "stats": {...}}``, ``{"op": "resolve", "ask":
  a, "route": n}``.

Each chunk read is held until `delay` after it was read (one way), optionally at no more
than `bandwidth` bytes/s; with delay 0 and no cap it is a pass-through.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import sys
import threading
import time

log = logging.getLogger("kmon.delay_proxy")

CHUNK = 64 * 1024
QUEUED_CHUNKS = 512          # per direction: beyond it the engine stops reading (backpressure)
PRIORITY = -10               # nice value asked for (root only)
RESOLVE_TIMEOUT_S = 10


class Engine:
    def __init__(self, control: socket.socket):
        self.control = control
        self.send_lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        self.delay_s = 0.0
        self.bandwidth = 0.0
        self.stats = {"connections": 0, "failed_connects": 0, "bytes_up": 0, "bytes_down": 0}
        self.servers: list[asyncio.AbstractServer] = []
        self.tasks: set[asyncio.Task] = set()
        self.asks: dict[int, asyncio.Future] = {}
        self.next_ask = 0
        self.stopped = threading.Event()

    # ---- control (a thread reading the socket; effects run on the loop) -------------------
    def send(self, msg: dict) -> None:
        data = (json.dumps(msg) + "\n").encode()
        with self.send_lock:
            self.control.sendall(data)

    def read_control(self) -> None:
        buf = b""
        fds: list[int] = []
        while True:
            try:
                data, got, _, _ = socket.recv_fds(self.control, 65536, 4)
            except OSError:
                data = b""
            if not data:
                break
            fds.extend(got)
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                msg = json.loads(line)
                fd = fds.pop(0) if msg.get("op") == "route" else None
                self.loop.call_soon_threadsafe(self.handle, msg, fd)
        # The parent is gone (or closed the socket): stop.
        self.loop.call_soon_threadsafe(self.begin_stop, None)

    def handle(self, msg: dict, fd: int | None) -> None:
        op = msg["op"]
        if op == "route":
            sock = socket.socket(fileno=fd)
            sock.setblocking(False)
            target = tuple(msg["target"]) if msg.get("target") else None
            self.track(self.serve(sock, msg["route"], target, msg.get("req")))
        elif op == "delay":
            self.delay_s = max(0.0, float(msg["s"]))
            self.send({"op": "ack", "req": msg.get("req")})
        elif op == "bandwidth":
            self.bandwidth = max(0.0, float(msg["bytes_s"]))
            self.send({"op": "ack", "req": msg.get("req")})
        elif op == "stats":
            self.send({"op": "stats", "req": msg.get("req"), "stats": dict(self.stats)})
        elif op == "resolved":
            fut = self.asks.pop(msg["ask"], None)
            if fut is not None and not fut.done():
                fut.set_result(tuple(msg["target"]) if msg.get("target") else None)
        elif op == "stop":
            self.begin_stop(msg.get("req"))

    def begin_stop(self, req) -> None:
        if not self.stopped.is_set():
            self.stopped.set()
            self.track(self.close(req))

    # ---- forwarding ----------------------------------------------------------------------
    def track(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def serve(self, sock: socket.socket, route: int, target, req) -> None:
        server = await asyncio.start_server(
            lambda r, w: self.track(self.connection(r, w, route, target)), sock=sock)
        self.servers.append(server)
        self.send({"op": "ack", "req": req})

    async def close(self, req) -> None:
        for s in self.servers:
            s.close()
        current = asyncio.current_task()
        others = [t for t in self.tasks if t is not current]
        for t in others:
            t.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        try:
            self.send({"op": "ack", "req": req})
        except OSError:
            pass
        self.loop.stop()

    async def resolve(self, route: int):
        """Ask the parent where this route leads now (a broker's port is known late)."""
        ask = self.next_ask = self.next_ask + 1
        fut = self.loop.create_future()
        self.asks[ask] = fut
        self.send({"op": "resolve", "ask": ask, "route": route})
        try:
            return await asyncio.wait_for(fut, RESOLVE_TIMEOUT_S)
        finally:
            self.asks.pop(ask, None)

    async def connection(self, c_reader, c_writer, route: int, target) -> None:
        try:
            where = target if target is not None else await self.resolve(route)
            if where is None:
                raise LookupError(f"route {route} has no target yet")
            s_reader, s_writer = await asyncio.open_connection(*where)
        except (OSError, asyncio.TimeoutError, LookupError) as e:
            self.stats["failed_connects"] += 1
            log.debug("delay proxy: cannot reach its target: %s", e)
            c_writer.close()
            return
        self.stats["connections"] += 1
        pipes = [asyncio.ensure_future(self.pipe(c_reader, s_writer, "bytes_up")),
                 asyncio.ensure_future(self.pipe(s_reader, c_writer, "bytes_down"))]
        try:
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for p in pipes:
                p.cancel()
            await asyncio.gather(*pipes, return_exceptions=True)
            for w in (c_writer, s_writer):
                w.close()

    async def pipe(self, reader, writer, counter: str) -> None:
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

    def run(self) -> None:
        asyncio.set_event_loop(self.loop)
        threading.Thread(target=self.read_control, name="control", daemon=True).start()
        self.loop.run_forever()
        self.loop.close()


def main(argv: list[str]) -> int:
    control = socket.socket(fileno=int(argv[0]))
    try:
        os.nice(PRIORITY)
    except (OSError, AttributeError):   # not root: the default priority
        pass
    Engine(control).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
