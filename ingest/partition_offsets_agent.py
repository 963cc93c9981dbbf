"""The partition end offsets agent: polls earliest and latest offsets of watched partitions.

Committed offsets alone do not say whether a group is behind, ahead of the log (a rewind
target past the end) or below its start (data deleted under it). Every ``interval_s``
(10 s by default) this agent lists, with one AdminClient ``list_offsets`` call per bound,
the earliest (log start) and latest (high watermark) offset of every topic-partition
that appears in offset commits — `ingest.offsets_agent.OffsetsAgent.committed_partitions`
is the usual provider — and, with ``include_all_topics``, of every partition of every
non-internal topic. It sends one record per partition to stream ``partition_offsets``
(schemas/partition_offsets.py) with the leader from the same poll's metadata and
``record_id = <cluster>:<topic>:<partition>:<ts_ms>``.

Each poll is a fresh snapshot, so nothing is saved between polls: a failed flush is
counted and logged and the next poll sends newer values. Partitions of topics that no
longer exist are left out; a partition whose listing fails (an error, a timeout, or an
answer without an offset) is counted in
``kmon_agent_source_errors_total{kind="list_offsets"}`` and tried again next poll. A
partition whose record cannot be built or sent from what the cluster answered goes to
``quarantine`` (source ``partition_offsets``, reason ``parser_exception:<type>: <message>``,
counted in ``kmon_agent_parser_exceptions_total``) and the others are published.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Iterable

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from ingest.agent_metrics import AgentMetrics
from ingest.malformed import parser_exception
from ingest.repeated_condition import RepeatedCondition
from ingest.sinks import Sink, SinkError

log = logging.getLogger(__name__)

STREAM = "partition_offsets"
QUARANTINE = "quarantine"
SOURCE = "partition_offsets"
DEFAULT_INTERVAL_S = 10.0

PartitionsProvider = Callable[[], Iterable[tuple[str, int]]]


def partition_offsets_record(cluster: str, ts_ms: int, topic: str, partition: int,
                             earliest: int, latest: int, leader: int | None) -> dict:
    """One `partition_offsets` record (fields in schema order) with its record_id."""
    return {"cluster": cluster, "ts_ms": ts_ms, "topic": topic, "partition": partition,
            "earliest_offset": earliest, "latest_offset": latest,
            "leader": leader if leader is not None and leader >= 0 else None,
            "record_id": f"{cluster}:{topic}:{partition}:{ts_ms}"}


def is_internal(topic: str) -> bool:
    """Kafka's own topics (__consumer_offsets, __transaction_state, ...) start with "__"."""
    return topic.startswith("__")


class PartitionOffsetsAgent:
    """List earliest/latest offsets of watched partitions, publish a snapshot per poll."""

    def __init__(self, cluster: str, client_config: dict, sink: Sink, metrics: AgentMetrics,
                 partitions: PartitionsProvider = frozenset,
                 clock: Callable[[], float] = time.time, *, include_all_topics: bool = False,
                 request_timeout_s: float = 15.0):
        if not cluster:
            raise ValueError("cluster name is empty")
        if not client_config.get("bootstrap.servers"):
            raise ValueError("client config has no bootstrap.servers")
        self.cluster = cluster
        self.client_config = dict(client_config)
        self.sink = sink
        self.metrics = metrics
        self.partitions = partitions
        self.clock = clock
        self.include_all_topics = include_all_topics
        self.request_timeout_s = request_timeout_s
        self._admin: AdminClient | None = None
        # A partition without a leader fails every poll while it lasts: logged at its
        # start and end, counted in the metrics every time.
        self._conditions = RepeatedCondition(log)

    def _client(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(self.client_config)
        return self._admin

    def _error(self, kind: str, what: str, e: Exception) -> None:
        self.metrics.source_errors.labels(self.metrics.agent, kind).inc()
        self._conditions.occurred((kind, what), "partition offsets agent %s: %s: %s",
                                  self.cluster, what, e)

    def poll_once(self) -> int:
        """One snapshot of every watched partition; returns how many records it published."""
        admin = self._client()
        try:
            md = admin.list_topics(timeout=self.request_timeout_s)
        except KafkaException as e:
            self._error("metadata", "metadata", e)
            return 0
        self._conditions.ended(("metadata", "metadata"))
        leaders: dict[tuple[str, int], int] = {}
        for name, t in md.topics.items():
            if t.error is None:
                for p, pm in t.partitions.items():
                    leaders[(name, p)] = pm.leader
        wanted = set(self.partitions())
        if self.include_all_topics:
            wanted |= {tp for tp in leaders if not is_internal(tp[0])}
        # A topic deleted since its last commit has no metadata: nothing to list.
        wanted &= leaders.keys()
        if not wanted:
            return 0
        ts_ms = int(self.clock() * 1000)
        earliest = self._list(admin, wanted, OffsetSpec.earliest())
        latest = self._list(admin, wanted, OffsetSpec.latest())
        for topic, partition in earliest.keys() & latest.keys():
            self._conditions.ended(("list_offsets", f"{topic}-{partition}"))
        sent = quarantined = 0
        try:
            for topic, partition in sorted(earliest.keys() & latest.keys()):
                if self._send(ts_ms, topic, partition, earliest[(topic, partition)],
                              latest[(topic, partition)], leaders.get((topic, partition))):
                    sent += 1
                else:
                    quarantined += 1
            if sent or quarantined:
                self.sink.flush()
                self._conditions.ended("flush")
        except SinkError as e:
            self.metrics.flush_failures.labels(self.metrics.agent).inc()
            self._conditions.occurred("flush", "partition offsets agent %s: %s", self.cluster, e)
            return 0
        if sent:
            self.metrics.published(STREAM, sent)
        if quarantined:
            self.metrics.quarantined(STREAM, quarantined)
        if sent or quarantined:
            self.metrics.last_flush.labels(self.metrics.agent).set(self.clock())
        return sent

    def _send(self, ts_ms: int, topic: str, partition: int, earliest, latest, leader) -> bool:
        """Send one partition's record (True), or quarantine it when building or sending it
        raises (False); a `SinkError` propagates."""
        key = f"{self.cluster}:{topic}"
        try:
            rec = partition_offsets_record(self.cluster, ts_ms, topic, partition, earliest,
                                           latest, leader)
            self.sink.send(STREAM, key, rec)
            return True
        except SinkError:
            raise
        except Exception as e:  # noqa: BLE001 - one odd answer must not stop the others
            self.metrics.parser_exception(SOURCE, e)
            raw = (f"topic={topic!r} partition={partition!r} earliest={earliest!r} "
                   f"latest={latest!r} leader={leader!r}")
            q = parser_exception(SOURCE, e, raw, ts_ms).to_quarantine_record(
                cluster=self.cluster, ingest_ts_ms=int(self.clock() * 1000),
                origin=topic if isinstance(topic, str) else None)
            q["record_id"] = f"{self.cluster}:{topic}:{partition}:{ts_ms}"
            self.sink.send(QUARANTINE, key, q)
            return False

    def _list(self, admin: AdminClient, wanted: set[tuple[str, int]],
              spec: OffsetSpec) -> dict[tuple[str, int], int]:
        """Offsets of one bound for the wanted partitions; failed ones are left out."""
        try:
            futures = admin.list_offsets({TopicPartition(t, p): spec for t, p in sorted(wanted)},
                                         request_timeout=self.request_timeout_s)
        except (KafkaException, ValueError) as e:
            self._error("list_offsets", "list_offsets", e)
            return {}
        self._conditions.ended(("list_offsets", "list_offsets"))
        out = {}
        wait_s = self.request_timeout_s + 5
        for tp, fut in futures.items():
            try:
                offset = fut.result(timeout=wait_s).offset
            except Exception as e:  # noqa: BLE001 - KafkaException or a timeout, per partition
                self._error("list_offsets", f"{tp.topic}-{tp.partition}", e)
                continue
            if offset < 0:
                # No offset in the answer (librdkafka's OFFSET_INVALID, -1001): seen in the
                # matrix for every partition led by a broker that was restarting. A failed
                # listing, not a record (silver would quarantine it as negative_offset).
                self._error("list_offsets", f"{tp.topic}-{tp.partition}",
                            ValueError(f"no offset in the answer ({offset})"))
                continue
            out[(tp.topic, tp.partition)] = offset
        return out

    def run(self, stop: threading.Event, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        """Poll every `interval_s` until `stop` is set."""
        while not stop.is_set():
            started = self.clock()
            self.poll_once()
            stop.wait(max(interval_s - (self.clock() - started), 0.0))

    def close(self) -> None:
        self._admin = None  # AdminClient has no close(); dropping it stops its threads
