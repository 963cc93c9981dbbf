"""The Prometheus face of kmon: open findings and pipeline health, for alerts and dashboards.

Alertmanager pages from these series (alerts/kmon-rules.yml), Grafana draws them. The
registry is passed in, never the global one, so each test builds a fresh exporter.

Findings (`set_findings`, called after every detector evaluation with the current findings):

- ``kmon_findings_open{cluster, type, severity, entity_kind, entity, incident, finding,
  cause, action}`` = 1 for each open finding. The whole label set is replaced by each call
  (resolved findings disappear) as one atomic swap, so a scrape never sees a half-written
  set and an alert never flaps because a scrape fell between "clear" and "set". A finding
  correlation linked to nothing gets its own id as ``incident``: it is an incident of one,
  and Alertmanager, which groups notifications by cluster and incident, sends it alone
  rather than bundled with unrelated findings of the same cluster. ``cause`` and
  ``action`` are the detector's cause and suggested action (small fixed vocabularies);
  ``finding`` is the finding_id to look up in gold.anomalies.
- ``kmon_findings_open_count{cluster, type, severity}``: open findings per combination,
  with an explicit 0 for every anomaly type and severity of every cluster ever seen (or
  named at construction), so dashboards and ``== 0`` / ``> 0`` rules see zeros, not gaps.
- ``kmon_finding_detection_latency_seconds{type}``: a histogram observed once per
  finding id, the first time an open finding reaches the exporter: detection time minus
  the finding's first_seen (when the condition started). Detection time is the finding's
  ``detected_ms`` when the model carries one, else the ``now_ms`` of that call; after an
  exporter restart the still-open findings count as newly seen once more, unless the
  exporter keeps its state (below).

Across a restart (`state_path`): each `set_findings` also writes the open-findings
snapshot, the clusters seen and the open finding ids to a small JSON file (written whole
to a temporary file, then renamed over the old one: a kill -9 leaves the old or the new,
never half of one). An exporter built with that path serves it from its first scrape, so
a `kmon run` killed and restarted is back on /metrics with the same findings within
seconds, before Spark has started (its detectors re-evaluate a minute or two later and
replace them), and Prometheus's alerts neither resolve nor fire again; their latency is
not observed a second time. A file older than `restore_within_s` (10 minutes) is left
out: findings that old may have ended while kmon was down, and re-serving them would page
again for what is over. An unreadable file is logged (with its path and why) and left
out too: the exporter then starts empty, as without one.

Pipeline health (`update_query`, called with each Spark `StreamingQuery.lastProgress`):

- ``kmon_pipeline_query_up{query}``: 1 while the query is active, 0 once it stopped.
- ``kmon_pipeline_batch_duration_seconds{query}``: durationMs.triggerExecution of the last
  progress (batchDuration when that is absent).
- ``kmon_pipeline_input_rows_per_second{query}``, ``..._processed_rows_per_second{query}``:
  rates as Spark reports them (Spark leaves them out when they are NaN: no series then).
- ``kmon_pipeline_last_progress_timestamp_seconds{query}``: the progress ``timestamp``
  (the trigger's start). Spark reports progress after every batch and, while idle, every
  spark.sql.streaming.noDataProgressEventInterval (10 s), so on a healthy query it keeps
  moving even without data.
- ``kmon_pipeline_query_lag_seconds{query}``: now minus that timestamp.
- ``kmon_pipeline_watermark_delay_seconds{query}``: now minus eventTime.watermark, only for
  queries with a watermark that has moved past the epoch (Spark reports 1970-01-01 until
  the first data).
- ``kmon_pipeline_source_offsets_behind_latest{query, source}``: the Kafka source's
  maxOffsetsBehindLatest, when the source reports it.
- ``kmon_pipeline_rows_quarantined_total{stream}`` (`quarantined`): rows a job sent to
  silver.quarantine.
- ``kmon_pipeline_source_clock_lead_seconds{source, stream}`` (`source_leads`): how far a
  source's (``cluster/broker``, ``cluster/client_id``) newest row of a stream in the last
  silver batch ran ahead of its ingest time: a few seconds below zero is the delivery
  delay; above zero the clock that stamped it runs ahead (past ``[pipeline]
  max_event_ahead_s`` its rows are quarantined as future_event_time); far below the same
  stream of its peers, a clock behind or a delivery stuck. Per stream because a broker's
  own clock stamps its logs and request windows, its agent's the JMX scrapes. A series
  not updated for `LEAD_STALE_S` (a source that stopped sending, or was removed) goes, so
  a lead from before never stands for a clock now.

Agent health (``kmon_agent_*``) comes from ingest/agent_metrics.py on the same registry.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric

from core.findings import AnomalyType, Finding, Severity, Status

log = logging.getLogger(__name__)

NAMESPACE = "kmon"
STATE_VERSION = 1
RESTORE_WITHIN_S = 600.0
LEAD_STALE_S = 600.0    # a clock-lead series not updated this long is dropped


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000
OPEN_LABELS = ("cluster", "type", "severity", "entity_kind", "entity", "incident", "finding",
               "cause", "action")
COUNT_LABELS = ("cluster", "type", "severity")
LATENCY_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600)
SEEN_IDS_KEPT = 100_000  # finding ids remembered for "observe latency once" (oldest forgotten)


@dataclass(frozen=True)
class _Snapshot:
    open_series: tuple[tuple[str, ...], ...] = ()
    counts: tuple[tuple[tuple[str, str, str], int], ...] = ()


class _FindingsCollector:
    """Serves the last snapshot of open findings; a new snapshot replaces it in one step."""

    def __init__(self) -> None:
        self.snapshot = _Snapshot()

    def describe(self) -> list[Metric]:
        return [self._open_family(), self._count_family()]

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot  # one read: the two families always come from the same call
        opened = self._open_family()
        for labels in snap.open_series:
            opened.add_metric(labels, 1)
        counts = self._count_family()
        for labels, n in snap.counts:
            counts.add_metric(labels, n)
        yield opened
        yield counts

    @staticmethod
    def _open_family() -> GaugeMetricFamily:
        return GaugeMetricFamily(f"{NAMESPACE}_findings_open", "1 for each open kmon finding",
                                 labels=OPEN_LABELS)

    @staticmethod
    def _count_family() -> GaugeMetricFamily:
        return GaugeMetricFamily(f"{NAMESPACE}_findings_open_count",
                                 "Open kmon findings per cluster, anomaly type and severity "
                                 "(0 when none)", labels=COUNT_LABELS)


def open_labels(f: Finding) -> tuple[str, ...]:
    """The kmon_findings_open label values of a finding, in OPEN_LABELS order."""
    return (f.cluster, f.type.value, f.severity.value, f.entity_kind.value, f.entity,
            f.incident_id or f.finding_id, f.finding_id, str(f.cause),
            f.suggested_action.value)


def parse_spark_time(text: Any) -> float | None:
    """Epoch seconds of a progress timestamp ("2026-01-02T03:04:05.678Z"), None if unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _number(value: Any) -> float | None:
    """A finite float from a progress field (numbers, or the strings source metrics use)."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def batch_duration_s(progress: Mapping[str, Any]) -> float | None:
    durations = progress.get("durationMs") or {}
    ms = _number(durations.get("triggerExecution"))
    if ms is None:
        ms = _number(progress.get("batchDuration"))
    return None if ms is None else ms / 1000.0


def watermark_s(progress: Mapping[str, Any]) -> float | None:
    """The query's watermark in epoch seconds; None without one or while it is still the epoch."""
    ts = parse_spark_time((progress.get("eventTime") or {}).get("watermark"))
    return ts if ts is not None and ts > 0 else None


def source_offsets_behind(progress: Mapping[str, Any]) -> dict[str, float]:
    """Source description -> maxOffsetsBehindLatest, for the sources that report it."""
    out: dict[str, float] = {}
    for source in progress.get("sources") or []:
        behind = _number((source.get("metrics") or {}).get("maxOffsetsBehindLatest"))
        if behind is not None:
            out[str(source.get("description") or "unknown")] = behind
    return out


class KmonExporter:
    """kmon's own metrics on `registry`; `serve` exposes them over HTTP."""

    def __init__(self, registry: CollectorRegistry, *, clusters: Iterable[str] = (),
                 state_path: Path | None = None, restore_within_s: float = RESTORE_WITHIN_S,
                 clock: Callable[[], int] = wall_clock_ms):
        self.registry = registry
        self.state_path = state_path
        self.restore_within_s, self.clock = restore_within_s, clock
        self._save_failing = False
        self._lock = threading.Lock()
        self._clusters: set[str] = set(clusters)
        self._seen_ids: OrderedDict[str, None] = OrderedDict()
        self._last_progress_s: dict[str, float] = {}
        self._sources: dict[str, set[str]] = {}
        self._lead_set_ms: dict[tuple[str, str], int] = {}    # (source, stream) -> last set

        self._findings = _FindingsCollector()
        self._findings.snapshot = _Snapshot(counts=self._counts(()))
        if state_path is not None:
            self._restore(state_path)
        registry.register(self._findings)
        self.detection_latency = Histogram(
            "finding_detection_latency_seconds", "Time from a condition's start (first_seen) "
            "to its finding reaching the exporter, once per finding", ["type"],
            namespace=NAMESPACE, buckets=LATENCY_BUCKETS, registry=registry)

        def gauge(name: str, doc: str, labels: tuple[str, ...] = ("query",)) -> Gauge:
            return Gauge(name, doc, list(labels), namespace=NAMESPACE, subsystem="pipeline",
                         registry=registry)

        self.query_up = gauge("query_up", "1 while the streaming query is active, 0 once stopped")
        self.batch_duration = gauge("batch_duration_seconds",
                                    "Duration of the query's last trigger")
        self.input_rate = gauge("input_rows_per_second",
                                "Rows per second arriving at the query (last progress)")
        self.processed_rate = gauge("processed_rows_per_second",
                                    "Rows per second the query processed (last progress)")
        self.last_progress = gauge("last_progress_timestamp_seconds",
                                   "Unix time of the query's last progress report (trigger start)")
        self.query_lag = gauge("query_lag_seconds",
                               "Seconds since the query's last progress report")
        self.watermark_delay = gauge("watermark_delay_seconds",
                                     "Seconds the query's event-time watermark is behind now")
        self.offsets_behind = gauge("source_offsets_behind_latest",
                                    "Kafka source: most offsets any partition is behind the "
                                    "latest (maxOffsetsBehindLatest)", ("query", "source"))
        self.clock_lead = Gauge("source_clock_lead_seconds", "Newest event time minus ingest "
                                "time of the source's rows of the stream in the last silver "
                                "batch (above 0: the clock that stamped them runs ahead)",
                                ["source", "stream"], namespace=NAMESPACE, subsystem="pipeline",
                                registry=registry)
        self.rows_quarantined = Counter("rows_quarantined", "Rows a pipeline job sent to "
                                        "silver.quarantine, by stream", ["stream"],
                                        namespace=NAMESPACE, subsystem="pipeline",
                                        registry=registry)

    # --- findings ------------------------------------------------------------------------

    def set_findings(self, findings: Iterable[Finding], now_ms: int) -> None:
        """Replace the open-findings series with the open ones among `findings`."""
        findings = list(findings)
        opened = [f for f in findings if f.status is Status.OPEN]
        with self._lock:
            self._clusters.update(f.cluster for f in findings)
            for f in opened:
                if f.finding_id in self._seen_ids:
                    self._seen_ids.move_to_end(f.finding_id)
                    continue
                self._seen_ids[f.finding_id] = None
                if len(self._seen_ids) > SEEN_IDS_KEPT:
                    self._seen_ids.popitem(last=False)
                detected_ms = getattr(f, "detected_ms", None) or now_ms
                latency_s = max(0.0, (detected_ms - f.first_seen_ms) / 1000.0)
                self.detection_latency.labels(f.type.value).observe(latency_s)
            self._findings.snapshot = _Snapshot(
                open_series=tuple(sorted({open_labels(f) for f in opened})),
                counts=self._counts((f.cluster, f.type.value, f.severity.value)
                                    for f in opened))
            if self.state_path is not None:
                self._save(self.state_path, [f.finding_id for f in opened])

    def _save(self, path: Path, open_ids: list[str]) -> None:
        snap = self._findings.snapshot
        doc = {"version": STATE_VERSION, "written_ms": self.clock(),
               "clusters": sorted(self._clusters), "open_ids": sorted(open_ids),
               "open_series": [list(s) for s in snap.open_series]}
        tmp = path.with_name(path.name + ".tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(doc, separators=(",", ":")))
            os.replace(tmp, path)
        except OSError as e:   # the next evaluation tries again; serving goes on
            # Once per run of failures, not at every evaluation.
            (log.debug if self._save_failing else log.warning)(
                "exporter state not saved to %s (tried again at each evaluation): %s",
                path, e)
            self._save_failing = True
            return
        if self._save_failing:
            log.info("exporter state saved to %s again", path)
            self._save_failing = False

    def _restore(self, path: Path) -> None:
        """The snapshot the last run saved (module docstring), if there is a readable one."""
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as e:
            log.warning("exporter state %s not restored (%s): starting with no findings",
                        path, e)
            return
        try:
            if doc.get("version") != STATE_VERSION:
                raise ValueError(f"version {doc.get('version')!r}, expected {STATE_VERSION}")
            series = tuple(tuple(str(v) for v in s) for s in doc["open_series"])
            if any(len(s) != len(OPEN_LABELS) for s in series):
                raise ValueError(f"an open_series entry without the {len(OPEN_LABELS)} labels")
            clusters = {str(c) for c in doc["clusters"]}
            ids = [str(i) for i in doc["open_ids"]]
            written_ms = int(doc["written_ms"])
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            why = f"no key {e.args[0]!r}" if isinstance(e, KeyError) else str(e)
            log.warning("exporter state %s not restored (%s): starting with no findings",
                        path, why)
            return
        age_s = (self.clock() - written_ms) / 1000
        if age_s > self.restore_within_s:
            log.info("exporter state %s is %.0f s old (restored only within %.0f s): "
                     "starting with no findings", path, age_s, self.restore_within_s)
            return
        types, severities = {t.value for t in AnomalyType}, {v.value for v in Severity}
        bad = next((s[:3] for s in series if s[1] not in types or s[2] not in severities), None)
        if bad is not None:
            log.warning("exporter state %s not restored (an unknown type or severity: %s): "
                        "starting with no findings", path, bad)
            return
        self._clusters |= clusters | {s[0] for s in series}
        for fid in ids[-SEEN_IDS_KEPT:]:
            self._seen_ids[fid] = None
        self._findings.snapshot = _Snapshot(open_series=series,
                                            counts=self._counts(s[:3] for s in series))
        log.info("exporter: %d open finding(s) restored from %s (saved %.0f s ago)",
                 len(series), path, age_s)

    def _counts(self, opened: Iterable[tuple[str, str, str]]
                ) -> tuple[tuple[tuple[str, str, str], int], ...]:
        """Open findings per (cluster, type, severity), with a 0 for every combination of
        the clusters seen."""
        counts = {(c, t.value, s.value): 0 for c in self._clusters
                  for t in AnomalyType for s in Severity}
        for key in opened:
            counts[key] += 1
        return tuple(sorted(counts.items()))

    # --- pipeline health -----------------------------------------------------------------

    def update_query(self, name: str, progress: Mapping[str, Any] | None, active: bool,
                     now_ms: int) -> None:
        """Record a streaming query's state from its `lastProgress` (None before the first)."""
        now_s = now_ms / 1000.0
        with self._lock:
            self.query_up.labels(name).set(1 if active else 0)
            if progress:
                self._record_progress(name, progress, now_s)
            last = self._last_progress_s.get(name)
            if last is not None:
                self.query_lag.labels(name).set(max(0.0, now_s - last))

    def _record_progress(self, name: str, progress: Mapping[str, Any], now_s: float) -> None:
        ts = parse_spark_time(progress.get("timestamp"))
        if ts is not None:
            self._last_progress_s[name] = ts
            self.last_progress.labels(name).set(ts)
        for gauge, value in ((self.batch_duration, batch_duration_s(progress)),
                             (self.input_rate, _number(progress.get("inputRowsPerSecond"))),
                             (self.processed_rate,
                              _number(progress.get("processedRowsPerSecond")))):
            if value is not None:
                gauge.labels(name).set(value)
        wm = watermark_s(progress)
        if wm is not None:
            self.watermark_delay.labels(name).set(max(0.0, now_s - wm))
        else:
            _remove(self.watermark_delay, name)
        behind = source_offsets_behind(progress)
        for gone in self._sources.get(name, set()) - behind.keys():
            _remove(self.offsets_behind, name, gone)
        for source, value in behind.items():
            self.offsets_behind.labels(name, source).set(value)
        self._sources[name] = set(behind)

    def quarantined(self, stream: str, n: int = 1) -> None:
        """`n` rows of `stream` went to silver.quarantine (0 just creates the series)."""
        if n < 0:
            raise ValueError(f"quarantined rows cannot be negative: {n}")
        self.rows_quarantined.labels(stream).inc(n)

    def source_leads(self, stream: str, leads_ms: Mapping[str, int]) -> None:
        """The lead (ms) of each source with rows of `stream` in a silver batch."""
        now = self.clock()
        for source, lead in leads_ms.items():
            self.clock_lead.labels(source, stream).set(lead / 1000.0)
            self._lead_set_ms[(source, stream)] = now
        for key, at in list(self._lead_set_ms.items()):
            if now - at > LEAD_STALE_S * 1000:
                del self._lead_set_ms[key]
                _remove(self.clock_lead, *key)

    # --- serving -------------------------------------------------------------------------

    def serve(self, port: int, addr: str = "127.0.0.1"):
        """Serve /metrics from this registry; returns (server, thread). Port 0 picks a free one
        (read it from server.server_port); stop with server.shutdown(); server.server_close()."""
        return start_http_server(port, addr=addr, registry=self.registry)


def _remove(gauge: Gauge, *labels: str) -> None:
    try:
        gauge.remove(*labels)
    except KeyError:
        pass
