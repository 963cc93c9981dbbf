"""A slow client: one consumer that reads its fetch responses slowly, so the broker's
ResponseSend for its fetches takes seconds while every other client is served at once.

The broker writes a response into the socket until the socket's buffers are full, then
waits for the client to read; the request log's sendTimeMs (ResponseSend) is that wait.
A consumer that drains its socket slowly (a small receive buffer, a busy or starved
process, a thin link) makes its own responses slow to send: the broker is fine, only that
client is. A correct monitor names the client (slow_client on client:<client.id>, cause
client_slow_read), and blames no broker: the slow reader is a small share of the leader's
requests (a few per cent), its fetches are slow only in ResponseSend, and no other
client of that broker is slow.

How: `threads` connections from one client.id to the leader of the topic slow-reads (one
partition, RF 3, leader `broker`), each a hand-encoded Fetch (matrix.mechanisms.fetch_wire)
of up to `fetch_bytes`, its response read `chunk` bytes at a time at `read_bytes_per_s`,
through a socket whose SO_RCVBUF is `chunk` (set before connect: the TCP window stays
small). Raw sockets rather than a client library: librdkafka (confluent-kafka, the
project's client) drains its sockets in background threads whatever the application
does, and a pure-Python client (kafka-python) would be a dependency for one fault; a Fetch
v4 request and the few fields of its response are ~80 lines. The backlog it reads (a few
MB of 10 kB values) is produced in prepare; readers loop over it from offset 0.

With the defaults (1 MB responses read at 256 kB/s, the broker's ~200 kB send buffer
absorbing the rest) each send takes ~3.5 s. Measured on the demo workload (leader broker 1,
45 s): the reader's 22 fetches logged sendTimeMs 3,342-3,606 ms, every other client's send
p99 1.0 ms; it made 1.8% of broker 1's requests, enough to lift broker 1's Fetch TP99 from
502 to 3,528 ms (the trap: a slow broker it is not).
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time

from demo.faults.base import FaultContext, FaultRun, now_ms, wait_for
from matrix.fault import MatrixFault
from matrix.mechanisms.fetch_wire import fetch_request, parse_fetch_response
from matrix.truth import Expect

log = logging.getLogger(__name__)


class SlowReader(MatrixFault):
    name = "slow_reader"
    title = "slow client (a consumer that reads its fetch responses slowly)"
    fault_class = "slow_client"

    def __init__(self, broker: int = 1, client_id: str = "slow-reader",
                 topic: str = "slow-reads", backlog_mb: float = 4.0, value_bytes: int = 10_000,
                 fetch_bytes: int = 1 << 20, read_bytes_per_s: int = 256 << 10,
                 chunk: int = 4096, threads: int = 2):
        self.broker, self.client_id, self.topic = broker, client_id, topic
        self.backlog_mb, self.value_bytes = backlog_mb, value_bytes
        self.fetch_bytes, self.read_bytes_per_s, self.chunk = fetch_bytes, read_bytes_per_s, chunk
        self.threads = threads
        self._stop = threading.Event()
        self._readers: list[threading.Thread] = []
        self._prepared = False
        self.stats = {"responses": 0, "bytes": 0, "errors": 0, "read_s": 0.0}
        self._lock = threading.Lock()

    def expect(self) -> tuple[Expect, ...]:
        return (Expect(f"slow reader {self.client_id}", "slow_client",
                       f"client:{self.client_id}", ("client_slow_read",)),)

    # -- the backlog ----------------------------------------------------------------------

    def replicas(self, ctx: FaultContext) -> list[int]:
        ids = sorted(n.node_id for n in ctx.cluster.nodes)
        return [self.broker] + [b for b in ids if b != self.broker][:2]

    def prepare(self, ctx: FaultContext) -> None:
        """Create slow-reads with its leader on `broker` and fill it with the backlog."""
        from confluent_kafka import Producer
        from confluent_kafka.admin import NewTopic

        admin = ctx.admin()
        if self.topic not in admin.list_topics(timeout=10).topics:
            fs = admin.create_topics([NewTopic(self.topic, 1, replica_assignment=[self.replicas(ctx)])])
            fs[self.topic].result(60)
        wait_for(f"a leader for {self.topic}", lambda: self.leader_address(ctx) is not None, 30, ctx)
        count = int(self.backlog_mb * 1e6 / self.value_bytes)
        producer = Producer({"bootstrap.servers": ctx.bootstrap, "acks": "all",
                             "linger.ms": 20, "client.id": f"{self.client_id}-loader"})
        value = b"x" * self.value_bytes
        for i in range(count):
            while True:
                try:
                    producer.produce(self.topic, value=value, key=str(i).encode())
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
        left = producer.flush(60)
        if left:
            raise RuntimeError(f"{left} backlog messages for {self.topic} not delivered")
        self._prepared = True
        ctx.say(f"{self.topic}: {count} messages of {self.value_bytes} bytes, leader "
                f"broker {self.broker}")

    def leader_address(self, ctx: FaultContext) -> tuple[str, int] | None:
        md = ctx.admin().list_topics(topic=self.topic, timeout=5)
        leader = md.topics[self.topic].partitions[0].leader
        if leader < 0:
            return None
        b = md.brokers[leader]
        return b.host, b.port

    # -- the slow reader ------------------------------------------------------------------

    def inject(self, ctx: FaultContext, run: FaultRun) -> None:
        if not self._prepared:
            self.prepare(ctx)
        self._stop.clear()
        for i in range(self.threads):
            t = threading.Thread(target=self._read_loop, args=(ctx, i), daemon=True,
                                 name=f"{self.client_id}-{i}")
            t.start()
            self._readers.append(t)
        run.fault_ms = now_ms()
        run.notes.update(client_id=self.client_id, broker=self.broker, topic=self.topic,
                         connections=self.threads, fetch_bytes=self.fetch_bytes,
                         read_bytes_per_s=self.read_bytes_per_s, chunk=self.chunk)
        ctx.say(f"{self.client_id}: {self.threads} connections to broker {self.broker}, "
                f"reading {self.fetch_bytes >> 10} kB fetches at "
                f"{self.read_bytes_per_s >> 10} kB/s")

    def _read_loop(self, ctx: FaultContext, index: int) -> None:
        offset, corr = 0, index * 1_000_000
        while not self._stop.is_set():
            try:
                addr = self.leader_address(ctx)
                if addr is None:
                    raise ConnectionError(f"{self.topic} has no leader")
                with self._connect(addr) as sock:
                    while not self._stop.is_set():
                        corr += 1
                        sock.sendall(fetch_request(corr, self.client_id, self.topic, 0, offset,
                                                   max_bytes=self.fetch_bytes,
                                                   partition_max_bytes=self.fetch_bytes))
                        started = time.monotonic()
                        body = self._read_slowly(sock)
                        got = parse_fetch_response(body)
                        if got.error_code:
                            raise ConnectionError(f"fetch error {got.error_code}")
                        with self._lock:
                            self.stats["responses"] += 1
                            self.stats["bytes"] += len(body)
                            self.stats["read_s"] += time.monotonic() - started
                        offset = got.next_offset if got.next_offset is not None else 0
                        if offset >= got.high_watermark:
                            offset = 0
            except (OSError, ValueError, struct.error) as e:
                with self._lock:
                    self.stats["errors"] += 1
                log.info("%s reader %d: %s; reconnecting", self.client_id, index, e)
                self._stop.wait(1.0)
            except Exception as e:  # noqa: BLE001 - metadata while brokers come and go
                log.info("%s reader %d: %s", self.client_id, index, e)
                self._stop.wait(1.0)

    def _connect(self, addr: tuple[str, int]) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.chunk)  # before connect
        sock.settimeout(30)
        sock.connect(addr)
        return sock

    def _read_exact(self, sock: socket.socket, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            part = sock.recv(min(self.chunk, n - len(buf)))
            if not part:
                raise ConnectionError("broker closed the connection")
            buf += part
        return bytes(buf)

    def _read_slowly(self, sock: socket.socket) -> bytes:
        """One response, at most `chunk` bytes per chunk/read_bytes_per_s seconds."""
        (size,) = struct.unpack(">i", self._read_exact(sock, 4))
        buf, pause = bytearray(), self.chunk / self.read_bytes_per_s
        while len(buf) < size:
            if self._stop.is_set():
                raise ConnectionError("stopping")
            buf += self._read_exact(sock, min(self.chunk, size - len(buf)))
            time.sleep(pause)
        return bytes(buf)

    def heal(self, ctx: FaultContext) -> None:
        """Stop the readers (their sockets close with them). Idempotent."""
        self._stop.set()
        for t in self._readers:
            t.join(timeout=10)
        self._readers = [t for t in self._readers if t.is_alive()]
        ctx.say(f"{self.client_id} stopped: {self.stats['responses']} responses, "
                f"{self.stats['bytes'] >> 20} MB")
