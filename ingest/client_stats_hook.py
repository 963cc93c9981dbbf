"""A ``stats_cb`` for a user's own confluent-kafka client that ships its statistics to kmon.

librdkafka emits a JSON statistics document every ``statistics.interval.ms`` and
confluent-kafka hands it to ``stats_cb`` from the application's poll()/flush(). The hook
turns each document into `client_stats` rows (`ingest.client_stats.parse_client_stats`:
one row per client, broker, partition and group) and sends them to stream
``client_stats``; a document it cannot parse goes to ``quarantine`` with the reason, and
so does one whose parsing raises (reason ``parser_exception:<type>: <message>``, counted in
``kmon_agent_parser_exceptions_total``): one bad document never costs the others.

Usage::

    from confluent_kafka import Producer
    from ingest.client_stats_hook import kmon_stats_hook
    from ingest.sinks import KafkaSink

    hook = kmon_stats_hook(cluster="prod",
                           sink=KafkaSink({"bootstrap.servers": "monitoring-kafka:9092"}))
    producer = Producer({"bootstrap.servers": "prod-kafka:9092",
                         "statistics.interval.ms": 10_000,  # statistics are off without it
                         "stats_cb": hook})
    ...                   # produce and poll() as usual: poll() delivers the statistics
    producer.flush()
    hook.close()          # publishes what is still buffered

The same works for a Consumer (its ``poll()`` delivers the statistics).

The callback runs on the client's own thread, so it never blocks and never raises: it only
appends the document to a bounded buffer (``max_documents`` documents and ``max_chars``
characters; when full, the oldest document is dropped, counted in
``kmon_agent_dropped_records_total{reason="buffer_full"}`` and logged at most once a
minute). A background thread parses and publishes the buffer every ``flush_interval_s``
seconds and flushes the sink; when the flush fails it keeps the documents and tries again
(the sink may see a row twice; its ``record_id`` is the same, so silver drops the repeat).

Event time: librdkafka's ``ts`` is its monotonic clock (CLOCK_MONOTONIC, microseconds),
the clock Python's ``time.monotonic()`` reads on Linux, so the hook dates each document
by when librdkafka emitted it, not when poll() happened to deliver it (a client that
polls rarely receives several documents at once). When the two clocks disagree by more
than `MAX_DELIVERY_DELAY_S` the callback's wall time is used instead.

``record_id = <cluster>:<client name>:<ts>:<scope>[:<node id> | :<topic>:<partition>]``
with the client's librdkafka name (``<client.id>#<type>-<n>``) and ``ts``; a document that
does not parse gets ``<cluster>:client_stats:<sha1 of the document>``.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

from prometheus_client import CollectorRegistry

from ingest.agent_metrics import AgentMetrics
from ingest.client_stats import SOURCE, parse_client_stats
from ingest.malformed import Malformed, parser_exception
from ingest.repeated_condition import RepeatedCondition
from ingest.sinks import Sink, SinkError

log = logging.getLogger(__name__)

STREAM = "client_stats"
QUARANTINE = "quarantine"
AGENT = "client_stats_hook"
MAX_DELIVERY_DELAY_S = 600.0
DROP_LOG_EVERY_S = 60.0

# The top-level "ts" comes before "brokers"/"topics" in every document librdkafka writes;
# a quote inside a JSON string is escaped, so this cannot match inside a client name.
_TS = re.compile(r'"ts"\s*:\s*(\d+)')


def stats_ts_us(payload: str) -> int | None:
    """librdkafka's ``ts`` (monotonic microseconds) of a statistics document, if present."""
    m = _TS.search(payload)
    return int(m.group(1)) if m else None


def emitted_at_ms(ts_us: int | None, wall_now_s: float, monotonic_now_s: float) -> int:
    """Wall time (epoch ms) at which librdkafka emitted a document delivered now."""
    now_ms = int(wall_now_s * 1000)
    if ts_us is None:
        return now_ms
    delay_s = monotonic_now_s - ts_us / 1e6
    if not 0 <= delay_s <= MAX_DELIVERY_DELAY_S:
        return now_ms  # not the same clock (another OS, a container quirk): use delivery time
    return now_ms - int(delay_s * 1000)


def row_record_id(cluster: str, ts_us: int | str, row: dict) -> str:
    """Deterministic id of one row: the client, the document's ts, the row's scope and keys."""
    scope = row["scope"]
    if scope == "broker":
        scope = f"broker:{row['node_id']}"
    elif scope == "partition":
        scope = f"partition:{row['topic']}:{row['partition']}"
    return f"{cluster}:{row['name']}:{ts_us}:{scope}"


@dataclass(frozen=True)
class _Document:
    payload: str
    wall_s: float       # when the callback ran
    monotonic_s: float


class ClientStatsHook:
    """Callable ``stats_cb``: buffers documents; a background thread publishes them."""

    def __init__(self, cluster: str, sink: Sink, metrics: AgentMetrics | None = None, *,
                 flush_interval_s: float = 5.0, max_documents: int = 120,
                 max_chars: int = 64 * 1024 * 1024, clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic):
        if not cluster:
            raise ValueError("cluster name is empty")
        if max_documents < 1 or max_chars < 1:
            raise ValueError("max_documents and max_chars must be positive")
        self.cluster = cluster
        self.sink = sink
        self.metrics = metrics or AgentMetrics(CollectorRegistry(), AGENT)
        self.flush_interval_s = flush_interval_s
        self.max_documents = max_documents
        self.max_chars = max_chars
        self.clock = clock
        self.monotonic = monotonic
        self.dropped = 0              # documents dropped because the buffer was full
        self._buffer: deque[_Document] = deque()
        self._chars = 0
        self._lock = threading.Lock()
        self._publish_lock = threading.Lock()
        # A monitoring Kafka that is down fails every round while it lasts: logged at its
        # start and end, counted in the metrics every time.
        self._conditions = RepeatedCondition(log)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._last_drop_log = float("-inf")

    # ---- the client's thread: never blocks for long, never raises --------------------------

    def __call__(self, stats_json: str) -> None:
        try:
            if not isinstance(stats_json, str):
                stats_json = bytes(stats_json).decode("utf-8", "replace")
            doc = _Document(stats_json, self.clock(), self.monotonic())
            with self._lock:
                self._buffer.append(doc)
                self._chars += len(doc.payload)
                dropped = self._trim()
            if dropped:
                self._count_drops(dropped, "buffer_full")
        except Exception:  # noqa: BLE001 - an exception here would surface in the client's poll()
            log.exception("client stats hook: could not buffer a statistics document")

    def _trim(self) -> int:
        """Drop the oldest documents until the buffer fits (lock held); returns how many."""
        dropped = 0
        while len(self._buffer) > 1 and (len(self._buffer) > self.max_documents
                                         or self._chars > self.max_chars):
            self._chars -= len(self._buffer.popleft().payload)
            dropped += 1
        self.dropped += dropped
        return dropped

    def _count_drops(self, n: int, reason: str) -> None:
        self.metrics.dropped.labels(self.metrics.agent, reason).inc(n)
        now = self.monotonic()
        if now - self._last_drop_log >= DROP_LOG_EVERY_S:
            self._last_drop_log = now
            log.warning("client stats hook: buffer full (%d documents, %d chars max), dropped "
                        "the oldest; %d dropped so far (monitoring sink slow or down?)",
                        self.max_documents, self.max_chars, self.dropped)

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    # ---- the background thread ---------------------------------------------------------------

    def start(self) -> "ClientStatsHook":
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="kmon-client-stats-hook",
                                            daemon=True)
            self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.flush_interval_s):
            try:
                self.publish()
            except Exception:  # noqa: BLE001 - the thread must outlive any one bad round
                log.exception("client stats hook: publishing failed")

    def publish(self) -> int:
        """Parse, send and flush what is buffered; returns documents published.

        On a sink error the documents go back to the front of the buffer for the next
        round (oldest dropped if that overflows it).
        """
        with self._publish_lock:
            with self._lock:
                docs = list(self._buffer)
                self._buffer.clear()
                self._chars = 0
            if not docs:
                return 0
            try:
                for doc in docs:
                    self._send(doc)
                self.sink.flush()
            except SinkError as e:
                self.metrics.flush_failures.labels(self.metrics.agent).inc()
                self._conditions.occurred("flush", "client stats hook: %s; %d documents kept "
                                          "for the next try", e, len(docs))
                with self._lock:
                    self._buffer.extendleft(reversed(docs))
                    self._chars += sum(len(d.payload) for d in docs)
                    dropped = self._trim()
                if dropped:
                    self._count_drops(dropped, "buffer_full")
                return 0
            self._conditions.ended("flush")
            self.metrics.last_flush.labels(self.metrics.agent).set(self.clock())
            return len(docs)

    def _send(self, doc: _Document) -> None:
        """Send one document's rows, or quarantine it: when it does not parse, and when
        parsing it, or building or sending its rows, raises (rows sent before a failed
        send stay sent). A `SinkError` propagates: the sink failed, not the document."""
        try:
            ts_us = stats_ts_us(doc.payload)
            ts_ms = emitted_at_ms(ts_us, doc.wall_s, doc.monotonic_s)
            rows = parse_client_stats(doc.payload, cluster=self.cluster, ts_ms=ts_ms)
            if isinstance(rows, Malformed):
                self._quarantine(doc, rows)
                return
            doc_ts = ts_us if ts_us is not None else f"ms{ts_ms}"
            for row in rows:
                row["record_id"] = row_record_id(self.cluster, doc_ts, row)
            for row in rows:
                self.sink.send(STREAM, f"{self.cluster}:{row['name']}", row)
            self.metrics.published(STREAM, len(rows))
        except SinkError:
            raise
        except Exception as e:  # noqa: BLE001 - one bad document must not cost the others
            self.metrics.parser_exception(SOURCE, e)
            self._quarantine(doc, parser_exception(SOURCE, e, doc.payload))

    def _quarantine(self, doc: _Document, bad: Malformed) -> None:
        q = bad.to_quarantine_record(cluster=self.cluster, ingest_ts_ms=int(self.clock() * 1000),
                                     origin="stats_cb")
        digest = hashlib.sha1(doc.payload.encode("utf-8", "surrogatepass")).hexdigest()
        q["record_id"] = f"{self.cluster}:client_stats:{digest}"
        self.sink.send(QUARANTINE, f"{self.cluster}:client_stats", q)
        self.metrics.quarantined(STREAM)

    def close(self) -> None:
        """Stop the background thread and publish what is left (safe to repeat).

        The sink belongs to the caller and stays open.
        """
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.publish()


def kmon_stats_hook(cluster: str, sink: Sink, metrics: AgentMetrics | None = None,
                    **options) -> ClientStatsHook:
    """A started `ClientStatsHook`, ready to be a client's ``stats_cb``."""
    return ClientStatsHook(cluster, sink, metrics, **options).start()
