"""Prometheus metrics every agent reports about itself (registry passed in)."""

from __future__ import annotations

import logging
import threading
import weakref

from prometheus_client import CollectorRegistry, Counter, Gauge

log = logging.getLogger(__name__)

NAMESPACE = "kmon"
SUBSYSTEM = "agent"


class _Families:
    """The metric families, created once per registry and shared by every agent in it."""

    def __init__(self, registry: CollectorRegistry):
        self.records = Counter("records", "Records an agent published, by stream and outcome "
                               "(published or quarantined)", ["agent", "stream", "outcome"],
                               namespace=NAMESPACE, subsystem=SUBSYSTEM, registry=registry)
        self.dropped = Counter("dropped_records", "Records an agent could not keep, by reason; "
                               "a lost span of a file (rotated_away, truncated) "
                               "counts 1, its size in lines being unknown",
                               ["agent", "reason"], namespace=NAMESPACE, subsystem=SUBSYSTEM,
                               registry=registry)
        self.flush_failures = Counter("flush_failures", "Flushes to the sink that failed; the "
                                      "source position was kept", ["agent"], namespace=NAMESPACE,
                                      subsystem=SUBSYSTEM, registry=registry)
        self.last_flush = Gauge("last_successful_flush_timestamp_seconds",
                                "Unix time of the last flush that made records durable",
                                ["agent"], namespace=NAMESPACE, subsystem=SUBSYSTEM,
                                registry=registry)
        self.lag_bytes = Gauge("source_lag_bytes", "Bytes of a source file not yet published",
                               ["agent", "source"], namespace=NAMESPACE, subsystem=SUBSYSTEM,
                               registry=registry)
        self.skipped = Counter("skipped_records", "Valid source records an agent does not "
                               "publish on purpose (e.g. group metadata in __consumer_offsets), "
                               "by source and reason", ["agent", "source", "reason"],
                               namespace=NAMESPACE, subsystem=SUBSYSTEM, registry=registry)
        self.lag_records = Gauge("source_lag_records", "Records of a source topic not yet "
                                 "published (high watermark minus saved position)",
                                 ["agent", "source"], namespace=NAMESPACE, subsystem=SUBSYSTEM,
                                 registry=registry)
        self.source_errors = Counter("source_errors", "Errors reading a source (fetch, metadata, "
                                     "offset listing), by kind; the agent retries",
                                     ["agent", "kind"], namespace=NAMESPACE, subsystem=SUBSYSTEM,
                                     registry=registry)
        self.scrape_failures = Counter("scrape_failures", "Scrapes of a metrics endpoint that "
                                       "failed (refused, timed out, HTTP error), by source; "
                                       "nothing is published for them", ["agent", "source"],
                                       namespace=NAMESPACE, subsystem=SUBSYSTEM,
                                       registry=registry)
        self.parser_exceptions = Counter("parser_exceptions", "Inputs whose parsing or record "
                                         "building raised instead of returning a record or a "
                                         "reason; each is quarantined (reason parser_exception) "
                                         "and the agent goes on, by source and exception type",
                                         ["agent", "source", "exception"], namespace=NAMESPACE,
                                         subsystem=SUBSYSTEM, registry=registry)


_FAMILIES: "weakref.WeakKeyDictionary[CollectorRegistry, _Families]" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


class AgentMetrics:
    """One agent's view of the families: the agent name is the `agent` label.

    Several agents can share one registry (`kmon run` serves them all on one endpoint);
    each gets the same families and labels its own series.
    """

    def __init__(self, registry: CollectorRegistry, agent: str):
        self.agent = agent
        with _LOCK:
            fam = _FAMILIES.get(registry)
            if fam is None:
                fam = _FAMILIES[registry] = _Families(registry)
        self.__dict__.update(vars(fam))
        self._exceptions_logged: set[tuple[str, str]] = set()
        self._lost_spans: set[str] = set()
        self.flush_failures.labels(agent)  # present at 0 from the start, for alerts

    def published(self, stream: str, n: int = 1) -> None:
        self.records.labels(self.agent, stream, "published").inc(n)

    def quarantined(self, stream: str, n: int = 1) -> None:
        self.records.labels(self.agent, stream, "quarantined").inc(n)

    def parser_exception(self, source: str, error: BaseException) -> None:
        """Count an input whose parser raised; log it, with the traceback the first time."""
        kind = type(error).__name__
        self.parser_exceptions.labels(self.agent, source, kind).inc()
        first = (source, kind) not in self._exceptions_logged
        self._exceptions_logged.add((source, kind))
        log.warning("%s: the %s parser raised %s on one input: %.200s; the input is quarantined "
                    "and the agent goes on%s", self.agent, source, kind, error,
                    "" if first else " (traceback logged the first time)",
                    exc_info=error if first else None)

    def lost_span(self, span_id: str, cause: str, what: str, records: int | None = None) -> None:
        """Count and log input the agent skipped because it could not read it back, once per
        span: a rewind after a failed flush finds the same span again (and sends its
        quarantine row again, same record_id), which must not count twice. `records` is
        how many were lost when known (offsets of a topic); a file span counts 1."""
        if span_id in self._lost_spans:
            return
        self._lost_spans.add(span_id)
        self.dropped.labels(self.agent, cause).inc(records if records else 1)
        log.warning("%s: input lost (%s): %s; quarantined as lost_span:%s, the agent goes on",
                    self.agent, cause, what, cause)
