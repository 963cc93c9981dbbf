"""The JMX scraper: reads each broker's Prometheus JMX exporter and publishes ``broker_metrics``.

Every interval (10 s by default) it GETs each broker's ``/metrics`` (the exporter java
agent, rules in infra/resources/jmx-exporter.yaml; `infra.local_cluster.Node.metrics_url`),
drops the lines of series it does not keep (`kept_lines`: a cheap check of the name,
before any parsing), parses the rest with `prometheus_client.parser`, and keeps only the series
kmon uses (`schemas.broker_metrics.METRICS`: the request stage quantiles and counts of
the request types in `KEPT_REQUESTS`, handler and network idle, request queue size, partition health, the
unclean election counter, bytes and messages in/out, the log cleaner gauges, each
partition replica's log size with ``topic`` and ``labels['partition']``). One record
per kept sample goes to the ``broker_metrics`` stream (schemas/broker_metrics.py), with
``ts_ms`` the time the scrape round started (the exporter gives no sample times) and
``record_id = <cluster>:<broker>:<ts_ms>:<metric>:<sorted labels>``.

What is not published, and where it is counted:

- a scrape that fails (connection refused, timeout, HTTP error, a paused broker): no
  record; ``kmon_agent_scrape_failures_total{agent,source}``, and a log line when a
  broker starts failing and when it recovers;
- a sample whose value is NaN or infinite, a series kmon does not keep, and the quantiles
  of a request type the broker has not served yet (its ``_count`` is 0, so they are all
  0): ``kmon_agent_skipped_records_total{agent,source,reason}`` (non_finite_value,
  not_kept, empty_histogram);
- exposition text that cannot be parsed at all (or is empty, or not UTF-8): the whole
  scrape goes to ``quarantine`` (source ``jmx``) with the reason and the text, nothing of
  it is published; a sample whose ``quantile`` label is not a number goes to quarantine
  alone;
- a scrape whose parsing raises (a parser bug, or text no test foresaw): the whole scrape
  goes to quarantine too, reason ``parser_exception:<type>: <message>``, counted in
  ``kmon_agent_parser_exceptions_total``; the other brokers' scrapes are published and
  the scraper goes on.

Exporter 1.x appends ``_total`` to counters (``..._count_total``); both spellings are
accepted and the record says ``..._count``.

Positions: there are none. A scrape reads the broker's current values and cannot be
replayed, so unlike the file agents this one saves nothing and a restart simply scrapes
again. A failed flush keeps the records it could not make durable and sends them again
(same ``record_id``s) with the next round, up to ``max_unflushed_records``; beyond that
the oldest are dropped and counted (``kmon_agent_dropped_records_total``, reason
``sink_unavailable``).
"""

from __future__ import annotations

import http.client
import logging
import math
import re
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from prometheus_client.parser import text_string_to_metric_families

from ingest.agent_metrics import AgentMetrics
from ingest.malformed import Malformed, parser_exception
from ingest.repeated_condition import RepeatedCondition
from ingest.sinks import Sink, SinkError
from schemas.broker_metrics import KEPT_REQUESTS, METRICS, REQUEST_METRICS, SIGNED_METRICS
from schemas.plausible import MAX_TS_MS, MIN_TS_MS

log = logging.getLogger(__name__)

SOURCE = "jmx"
STREAM = "broker_metrics"
QUARANTINE = "quarantine"
INTERVAL_S = 10.0
TIMEOUT_S = 5.0
MAX_BODY_BYTES = 64 * 1024 * 1024  # a broker with many topics exports a lot, but not this

RECORD_FIELDS = ("cluster", "broker", "ts_ms", "metric", "request", "quantile", "topic",
                 "labels", "value")


@dataclass(frozen=True)
class JmxSource:
    cluster: str
    broker: int
    url: str       # the exporter's /metrics, e.g. http://127.0.0.1:9404/metrics

    @property
    def name(self) -> str:
        return f"{self.cluster}/{self.broker}"


@dataclass
class ParsedScrape:
    """What one exposition holds for kmon."""
    records: list[dict] = field(default_factory=list)
    malformed: list[Malformed] = field(default_factory=list)   # single bad samples
    skipped: Counter = field(default_factory=Counter)           # reason -> samples


# ---- the exposition into records ----------------------------------------------------------

def metric_name(sample_name: str) -> str:
    """The name kmon stores: ``x_count_total`` (exporter 1.x counters) becomes ``x_count``."""
    return sample_name[:-len("_total")] if sample_name.endswith("_count_total") else sample_name


# A sample line's metric name, and the whole line's shape (name, labels, value, optional
# timestamp): enough to tell a well-formed line of a series kmon does not keep from text
# that does not parse.
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_SHAPE = re.compile(r'[a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?[ \t]+(\S+)(?:[ \t]+-?\d+)?[ \t]*')
_REQUEST_LABEL = re.compile(r'[{,]\s*request="([^"]*)"')
# Names in # HELP / # TYPE lines of the families kmon keeps (a summary's family has no
# _count; exporter 1.x counters end in _total).
_KEPT_FAMILIES = frozenset({*METRICS, *(m[:-len("_count")] for m in METRICS if m.endswith("_count")),
                            *(m + "_total" for m in METRICS)})


def _well_formed_value(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def kept_lines(body: str) -> tuple[str, int]:
    """The exposition text kmon parses, and how many samples were left out before parsing.

    A broker exports thousands of series (7,000 lines, 640 KB from a 3-broker test cluster
    with a few topics); kmon keeps a few hundred. Parsing every line with the exposition
    parser cost a quarter of a core per three brokers, so a line is dropped here when its
    metric name (or, for the request metrics, its `request` label) is not kept and the line
    is well formed. Anything that does not look like a sample line is left for the parser,
    so text that does not parse is still rejected whole.
    """
    out = []
    skipped = 0
    for line in body.splitlines():
        if not line or line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE") and parts[2] not in _KEPT_FAMILIES:
                continue
            out.append(line)
            continue
        m = _NAME.match(line)
        if m is not None:
            name = metric_name(m.group())
            keep = name in METRICS
            if keep and name.startswith(REQUEST_METRICS):
                r = _REQUEST_LABEL.search(line, m.end())
                keep = r is None or r.group(1) in KEPT_REQUESTS
            if not keep:
                shape = _SHAPE.fullmatch(line)
                if shape is not None and _well_formed_value(shape.group(1)):
                    skipped += 1
                    continue
        out.append(line)
    return "\n".join(out) + "\n", skipped


def _labels_key(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _quantile(text: str) -> float | None:
    try:
        q = float(text)
    except ValueError:
        return None
    return q if 0 <= q <= 1 else None


def record_id(rec: dict) -> str:
    """``<cluster>:<broker>:<ts_ms>:<metric>:<k=v,... sorted>``, from a record alone.

    The labels are the sample's, as the record holds them (``quantile`` as a number, so
    the exporter's "0.50" reads 0.5).
    """
    labels = dict(rec["labels"])
    labels.update({k: repr(rec[k]) if k == "quantile" else rec[k]
                   for k in ("request", "quantile", "topic") if rec[k] is not None})
    return f"{rec['cluster']}:{rec['broker']}:{rec['ts_ms']}:{rec['metric']}:{_labels_key(labels)}"


def parse_exposition(body: str | bytes, *, cluster: str, broker: int,
                     ts_ms: int) -> ParsedScrape | Malformed:
    """A whole ``/metrics`` answer -> the kept samples as records, or Malformed for the text."""
    if isinstance(body, (bytes, bytearray)):
        try:
            body = bytes(body).decode("utf-8")
        except UnicodeDecodeError:
            return Malformed(SOURCE, "not_utf8", bytes(body), ts_ms)
    if not body.strip():
        return Malformed(SOURCE, "empty_exposition", body, ts_ms)
    if not MIN_TS_MS <= ts_ms <= MAX_TS_MS:  # the scrape time: the agent's clock is wrong
        return Malformed(SOURCE, "implausible_event_time", body, ts_ms)
    if broker < 0:
        return Malformed(SOURCE, "negative_broker", body, ts_ms)
    text, left_out = kept_lines(body)
    try:
        samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    except (ValueError, IndexError, KeyError, TypeError) as e:
        log.debug("exposition of %s/%s does not parse: %s", cluster, broker, e)
        return Malformed(SOURCE, "invalid_exposition", body, ts_ms)

    out = ParsedScrape()
    if left_out:
        out.skipped["not_kept"] += left_out
    kept = []
    served: dict[tuple[str, str | None], float] = {}  # (stage metric, request) -> count
    for s in samples:
        name = metric_name(s.name)
        if name not in METRICS or (name.startswith(REQUEST_METRICS)
                                   and s.labels.get("request") not in KEPT_REQUESTS):
            out.skipped["not_kept"] += 1
            continue
        try:
            value = float(s.value)
        except OverflowError:  # an integer sample beyond the float range
            value = math.inf
        if not math.isfinite(value):
            out.skipped["non_finite_value"] += 1
            continue
        kept.append((name, s.labels, value))
        if name.startswith(REQUEST_METRICS) and name.endswith("_count"):
            served[(name[:-len("_count")], s.labels.get("request"))] = value

    for name, labels, value in kept:
        other = dict(labels)
        request = other.pop("request", None)
        quantile_text = other.pop("quantile", None)
        topic = other.pop("topic", None)
        quantile = None
        if value < 0 and name not in SIGNED_METRICS:
            raw = f"{name}{{{_labels_key(labels)}}} {value!r}"
            out.malformed.append(Malformed(SOURCE, "negative_value", raw, ts_ms))
            continue
        if quantile_text is not None:
            quantile = _quantile(quantile_text)
            if quantile is None:
                raw = f"{name}{{{_labels_key(labels)}}} {value!r}"
                out.malformed.append(Malformed(SOURCE, "bad_label:quantile", raw, ts_ms))
                continue
            if served.get((name, request)) == 0:
                out.skipped["empty_histogram"] += 1
                continue
        out.records.append(dict(zip(RECORD_FIELDS, (cluster, broker, ts_ms, name, request,
                                                    quantile, topic, other, value))))
    return out


# ---- the scraper ----------------------------------------------------------------------------

# Like Prometheus, scrape directly: an http_proxy set for the agent's other traffic must not
# route broker scrapes.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def fetch_metrics(url: str, timeout_s: float) -> bytes:
    """The body of one GET; raises OSError or http.client.HTTPException on any failure."""
    with _OPENER.open(url, timeout=timeout_s) as r:
        if r.status != 200:
            raise urllib.error.HTTPError(url, r.status, r.reason, r.headers, None)
        body = r.read(MAX_BODY_BYTES + 1)
    if len(body) > MAX_BODY_BYTES:
        raise OSError(f"more than {MAX_BODY_BYTES} bytes")
    return body


class JmxScraper:
    """Scrape every broker each interval, publish what kmon keeps."""

    def __init__(self, sources: list[JmxSource], sink: Sink, metrics: AgentMetrics,
                 clock: Callable[[], float] = time.time, timeout_s: float = TIMEOUT_S,
                 max_unflushed_records: int = 200_000, max_parallel: int = 8):
        self.sources = sources
        self.sink = sink
        self.metrics = metrics
        self.clock = clock
        self.timeout_s = timeout_s
        self.max_unflushed_records = max_unflushed_records
        # Scrapes run in parallel so one hung broker (paused, GC) does not delay the others.
        self._pool = ThreadPoolExecutor(max_workers=max(1, min(max_parallel, len(sources))),
                                        thread_name_prefix="jmx-scrape")
        self._unflushed: list[tuple[str, str, dict]] = []  # (stream, key, record)
        # A broker down (or a sink that cannot flush) fails every round while it lasts:
        # logged at its start and end, counted in the metrics every time.
        self._conditions = RepeatedCondition(log)

    def _scrape(self, src: JmxSource) -> bytes | Exception:
        try:
            return fetch_metrics(src.url, self.timeout_s)
        except (OSError, http.client.HTTPException, ValueError) as e:
            return e

    def poll_once(self) -> int:
        """One scrape of every broker; returns how many samples it published."""
        ts_ms = int(self.clock() * 1000)
        batch: list[tuple[str, str, dict]] = []
        for src, body in zip(self.sources, self._pool.map(self._scrape, self.sources)):
            if isinstance(body, Exception):
                self._scrape_failed(src, body)
                continue
            self._conditions.ended(("scrape", src.name))
            batch.extend(self._records(src, body, ts_ms))
        pending = self._unflushed + batch
        if not pending:
            return 0
        for stream, key, rec in pending:
            self.sink.send(stream, key, rec)
        try:
            self.sink.flush()
        except SinkError as e:
            self.metrics.flush_failures.labels(self.metrics.agent).inc()
            self._conditions.occurred("flush", "%s: %s; %d records kept to send again",
                                      self.metrics.agent, e,
                                      min(len(pending), self.max_unflushed_records))
            self._keep_unflushed(pending)
            return 0
        self._conditions.ended("flush")
        self._unflushed = []
        published = sum(1 for stream, _, _ in pending if stream == STREAM)
        self.metrics.published(STREAM, published)
        if len(pending) > published:
            self.metrics.quarantined(STREAM, len(pending) - published)
        self.metrics.last_flush.labels(self.metrics.agent).set(self.clock())
        return published

    def _records(self, src: JmxSource, body: bytes, ts_ms: int) -> list[tuple[str, str, dict]]:
        try:
            return self._parsed_records(src, body, ts_ms)
        except Exception as e:  # noqa: BLE001 - no answer may stop the scraper
            self.metrics.parser_exception(SOURCE, e)
            return [self._quarantine_record(src, parser_exception(SOURCE, e, body, ts_ms),
                                            f"{src.cluster}:{src.broker}:{ts_ms}:exposition")]

    def _parsed_records(self, src: JmxSource, body: bytes,
                        ts_ms: int) -> list[tuple[str, str, dict]]:
        parsed = parse_exposition(body, cluster=src.cluster, broker=src.broker, ts_ms=ts_ms)
        if isinstance(parsed, Malformed):
            log.warning("%s: %s answered with exposition text that does not parse (%s); "
                        "quarantined", self.metrics.agent, src.url, parsed.reason)
            return [self._quarantine_record(src, parsed, f"{src.cluster}:{src.broker}:{ts_ms}:"
                                                         f"exposition")]
        for reason, n in parsed.skipped.items():
            self.metrics.skipped.labels(self.metrics.agent, src.name, reason).inc(n)
        out = [(STREAM, src.name, {**rec, "record_id": record_id(rec)})
               for rec in parsed.records]
        out += [self._quarantine_record(src, bad, f"{src.cluster}:{src.broker}:{ts_ms}:{bad.raw}")
                for bad in parsed.malformed]
        return out

    def _quarantine_record(self, src: JmxSource, bad: Malformed,
                           rid: str) -> tuple[str, str, dict]:
        q = bad.to_quarantine_record(cluster=src.cluster, ingest_ts_ms=int(self.clock() * 1000),
                                     broker=src.broker, origin=src.url)
        q["record_id"] = rid
        return QUARANTINE, src.name, q

    def _scrape_failed(self, src: JmxSource, error: Exception) -> None:
        self.metrics.scrape_failures.labels(self.metrics.agent, src.name).inc()
        self._conditions.occurred(("scrape", src.name), "%s: scraping %s failed: %s",
                                  self.metrics.agent, src.url, error)

    def _keep_unflushed(self, pending: list[tuple[str, str, dict]]) -> None:
        over = len(pending) - self.max_unflushed_records
        if over > 0:
            self.metrics.dropped.labels(self.metrics.agent, "sink_unavailable").inc(over)
            pending = pending[over:]
        self._unflushed = pending

    def run(self, stop: threading.Event, interval_s: float = INTERVAL_S) -> None:
        """Scrape every `interval_s` (measured from the start of each round) until `stop`."""
        while not stop.is_set():
            started = time.monotonic()
            self.poll_once()
            stop.wait(max(0.0, interval_s - (time.monotonic() - started)))

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
