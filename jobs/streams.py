"""The telemetry streams: one entry per stream, naming its table module and how it lands.

A stream is what one kind of agent publishes: a telemetry topic ``<topic_prefix><name>``
on the monitoring Kafka, or ``<storage_root>/landing/<name>/`` in the embedded mode. Each
stream has a bronze table ``bronze.<name>`` and a typed silver table ``silver.<name>``
declared by the module ``schemas/<name>.py``; the quarantine stream's rows go to
``silver.quarantine`` as they are.

Adding a stream means adding a schema module and one line here; the bronze and silver
jobs, the Delta constraints, the great-expectations suite and the README table reference
all come from this registry.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

QUARANTINE = "quarantine"


@dataclass(frozen=True)
class Stream:
    name: str
    description: str
    # How late (event time behind the newest row seen from the same source) a row may be
    # and still count; later rows go to quarantine as late_beyond_watermark. None: no
    # lateness bound (commits and quarantine records are kept whenever they arrive).
    lateness_s: int | None = 120

    @property
    def table(self) -> ModuleType:
        return importlib.import_module(f"schemas.{self.name}")

    @property
    def source_columns(self) -> tuple[str, ...]:
        """What one clock stamps: a broker's rows (cluster, broker), a client's (cluster,
        client_id), else the cluster's. Silver keeps the lateness bound per source, so one
        source's clock cannot make another's rows late."""
        fields = set(self.table.SCHEMA.fieldNames())
        return ("cluster",) + tuple(c for c in ("broker", "client_id") if c in fields)[:1]

    @property
    def time_column(self) -> str:
        return "ingest_ts" if self.name == QUARANTINE else "ts"


STREAMS: tuple[Stream, ...] = (
    Stream("request_stages", "broker request log: the requests kept whole (OffsetCommit and "
           "TxnOffsetCommit, and every request of request_log.full_brokers)"),
    Stream("broker_metrics", "broker JMX metrics scraped from the Prometheus exporter"),
    Stream("log_events", "broker server, controller, state-change and log-cleaner logs"),
    Stream("client_offset_events", "client log lines about offset resets and out-of-range"),
    Stream("client_stats", "librdkafka client statistics"),
    Stream("offset_commits", "__consumer_offsets commits and tombstones", lateness_s=None),
    Stream("group_members", "__consumer_offsets group metadata: members after each change",
           lateness_s=None),
    Stream("partition_offsets", "partition earliest/latest offsets polled from the brokers"),
    Stream(QUARANTINE, "inputs the agents could not parse, with the reason", lateness_s=None),
    # The request-log agent's edge aggregation (ingest/request_windows.py). A window's
    # late delta can come up to the aggregator's retain_ms (300 s) after its start.
    Stream("request_windows", "broker request log aggregated at the edge: per key and 10-s "
           "window, counts and stage histograms", lateness_s=330),
    Stream("follower_fetch_windows", "per leader, follower and 10-s window: fetches and gaps",
           lateness_s=330),
    Stream("client_send_windows", "per broker, key, client and 10-s window: send times",
           lateness_s=330),
    Stream("request_exemplars", "requests the edge kept whole (slow, slowest, errors, a "
           "sample)", lateness_s=330),
)

BY_NAME = {s.name: s for s in STREAMS}


def stream(name: str) -> Stream:
    try:
        return BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown stream {name!r}; streams: {', '.join(BY_NAME)}") from None
