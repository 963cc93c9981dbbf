"""The offsets reader agent: follows ``__consumer_offsets`` and publishes every offset commit.

The group coordinator writes each group's commits (and tombstones when offsets are
deleted) to the compacted topic ``__consumer_offsets``. This agent reads all of its
partitions with a confluent-kafka Consumer using ``assign()`` — no group membership, no
commit ever (librdkafka insists on a ``group.id``; it is never joined) — and
``isolation.level=read_committed``, so offsets committed inside an aborted transaction
never show up. Each record goes through `ingest.consumer_offsets.parse_offset_record`:

- an offset commit or tombstone -> stream ``offset_commits``;
- a classic group's metadata (`parse_group_record`: generation, member count and client
  ids after each rebalance, none once the group is empty) -> stream ``group_members``;
- newer group-protocol records (`Skipped`) -> counted in
  ``kmon_agent_skipped_records_total`` by reason, not published;
- damaged bytes (`Malformed`) -> stream ``quarantine`` with the reason;
- a record the parser raises on -> ``quarantine`` too, reason
  ``parser_exception:<type>: <message>``, counted in ``kmon_agent_parser_exceptions_total``;
  the position moves past it like past any other record, so one such record cannot stop
  the agent (without this it would crash, and every restart would read it again).

Every record carries ``record_id = <cluster>:__consumer_offsets:<partition>:<offset>``.
Where the agent got to (the next offset of each partition) lives in a JSON file of its
own, replaced atomically, and is saved only after ``sink.flush()`` succeeded; a failed
flush puts the consumer back at the saved positions, so a crash or an outage of the
monitoring Kafka repeats records (same ``record_id``, dropped by silver) but never loses
one. Without a saved position a partition is read from its beginning: the topic is
compacted, so that is each group's latest commit per partition plus recent history.

No gap is silent. A jump in offsets is normal in a compacted topic; it is a loss when the
records after the reader's position were deleted, so that the partition's log now starts
after it (a log start moved by retention or deleted records, and the consumer reset to the
earliest offset, or a reader that stayed down longer than the retention). The reader then
sends a quarantine row, reason ``lost_span:log_start_moved``, ``raw`` ``{"from": {"offset":
<position>}, "to": {"offset": <log start>}, "lost": <offsets between>}``, with the partition
and the position in ``source_partition`` and ``source_offset``; counts the offsets in
``kmon_agent_dropped_records_total{reason="log_start_moved"}``, logs it once, and goes on.
The row's ``record_id = <cluster>:__consumer_offsets:<partition>:lost_span:<position>`` is
flushed with the records after the gap, before their positions are saved, so a restart or
a failed flush before that sends the same row again, and none after.

The same file remembers every topic-partition seen in a commit, so the partition end
offsets agent (`ingest.partition_offsets_agent`) knows what to poll after a restart. The
partition count of ``__consumer_offsets`` is re-read every ``metadata_refresh_s`` (it can
only grow) and new partitions are added to the assignment.

Connection settings (bootstrap servers, SASL/SSL) pass through unchanged; the settings
that keep the reader read-only are forced (`reader_config`).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from confluent_kafka import (OFFSET_BEGINNING, TIMESTAMP_NOT_AVAILABLE, Consumer, KafkaError,
                             KafkaException, TopicPartition)

from ingest.agent_metrics import AgentMetrics
from ingest.consumer_offsets import (SOURCE, is_group_key, parse_group_record,
                                     parse_offset_record, raw_record_text)
from ingest.malformed import Malformed, Skipped, lost_span, parser_exception
from ingest.repeated_condition import RepeatedCondition
from ingest.sinks import Sink, SinkError

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
STREAM = "offset_commits"
GROUP_STREAM = "group_members"
QUARANTINE = "quarantine"
DEFAULT_GROUP_ID = "kmon-offsets-reader"

# Forced over whatever the caller passes: the reader never commits and never joins a group.
READ_ONLY_SETTINGS = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "isolation.level": "read_committed",
    "auto.offset.reset": "earliest",
    "enable.partition.eof": False,
}


def reader_config(client_config: dict) -> dict:
    """The consumer configuration: the caller's connection settings, read-only settings forced."""
    return {"group.id": DEFAULT_GROUP_ID, **client_config, **READ_ONLY_SETTINGS}


def offsets_record_id(cluster: str, partition: int, offset: int) -> str:
    return f"{cluster}:{OFFSETS_TOPIC}:{partition}:{offset}"


@dataclass
class ReaderState:
    """Next offset to read per __consumer_offsets partition; topic-partitions seen in commits."""

    positions: dict[int, int] = field(default_factory=dict)
    committed: frozenset[tuple[str, int]] = frozenset()


class OffsetsPositionStore:
    """The reader's state in one JSON file, written to a temporary name, fsynced and renamed."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def load(self) -> ReaderState:
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return ReaderState()
        positions = {int(p): int(o) for p, o in raw.get("positions", {}).items()}
        committed = frozenset((t, int(p)) for t, parts in raw.get("committed", {}).items()
                              for p in parts)
        return ReaderState(positions, committed)

    def save(self, state: ReaderState) -> None:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(state.committed):
            by_topic.setdefault(topic, []).append(partition)
        doc = {"positions": {str(p): o for p, o in sorted(state.positions.items())},
               "committed": by_topic}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)


class OffsetsAgent:
    """Read __consumer_offsets, publish commits, then remember where it got to."""

    # The topic read. The integration tests point a subclass at a copy of it: the broker
    # refuses to delete records of an internal topic, which a lost span needs.
    TOPIC = OFFSETS_TOPIC

    def __init__(self, cluster: str, consumer_config: dict, sink: Sink,
                 position_path: str | Path, metrics: AgentMetrics,
                 clock: Callable[[], float] = time.time, *, batch_records: int = 10_000,
                 poll_timeout_s: float = 1.0, metadata_refresh_s: float = 60.0):
        if not cluster:
            raise ValueError("cluster name is empty")
        if not consumer_config.get("bootstrap.servers"):
            raise ValueError("consumer config has no bootstrap.servers")
        self.cluster = cluster
        self.config = reader_config(consumer_config)
        self.sink = sink
        self.store = OffsetsPositionStore(position_path)
        self.metrics = metrics
        # An unreachable cluster fails every poll while it lasts: logged at its start and
        # end, counted in the metrics every time.
        self._conditions = RepeatedCondition(log)
        self._fetch_errors = RepeatedCondition(log)   # by error code
        self.clock = clock
        self.batch_records = batch_records
        self.poll_timeout_s = poll_timeout_s
        self.metadata_refresh_s = metadata_refresh_s
        state = self.store.load()
        self._saved: dict[int, int] = dict(state.positions)
        self._committed: frozenset[tuple[str, int]] = state.committed
        self._consumer: Consumer | None = None
        self._assigned: set[int] = set()
        # The offset each partition must go on from, when its records before are ours (a
        # saved position or a record read): a record after it is checked for a lost span.
        self._reading: dict[int, int] = {}
        self._next_metadata_check = 0.0

    def committed_partitions(self) -> frozenset[tuple[str, int]]:
        """(topic, partition) of every published commit; safe to call from another thread."""
        return self._committed

    def saved_positions(self) -> dict[int, int]:
        return dict(self._saved)

    def _reader(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(self.config)
        return self._consumer

    def _start_offset(self, partition: int) -> int:
        return self._saved.get(partition, OFFSET_BEGINNING)

    def _refresh_assignment(self, consumer: Consumer) -> None:
        """Assign partitions of __consumer_offsets not assigned yet (all of them at first)."""
        now = self.clock()
        if self._assigned and now < self._next_metadata_check:
            return
        self._next_metadata_check = now + self.metadata_refresh_s
        try:
            md = consumer.list_topics(self.TOPIC, timeout=10)
        except KafkaException as e:
            self.metrics.source_errors.labels(self.metrics.agent, "metadata").inc()
            self._conditions.occurred("metadata", "offsets agent %s: metadata of %s: %s",
                                      self.cluster, self.TOPIC, e)
            return
        self._conditions.ended("metadata")
        topic = md.topics.get(self.TOPIC)
        if topic is None or topic.error is not None:
            # No group has used the cluster yet: the coordinator creates the topic lazily.
            log.debug("offsets agent %s: %s not there yet", self.cluster, self.TOPIC)
            return
        new = sorted(set(topic.partitions) - self._assigned)
        if not new:
            return
        tps = [TopicPartition(self.TOPIC, p, self._start_offset(p)) for p in new]
        if self._assigned:
            consumer.incremental_assign(tps)
        else:
            consumer.assign(tps)
        self._assigned.update(new)
        self._reading.update({p: self._saved[p] for p in new if p in self._saved})
        log.info("offsets agent %s: reading %d partitions of %s", self.cluster,
                 len(self._assigned), self.TOPIC)

    def poll_once(self) -> int:
        """Read one batch, publish it, flush, save positions; returns records handled."""
        consumer = self._reader()
        self._refresh_assignment(consumer)
        if not self._assigned:
            return 0
        messages = consumer.consume(self.batch_records, self.poll_timeout_s)
        pending: dict[int, int] = {}
        seen: set[tuple[str, int]] = set()
        fetch_errors: set[int] = set()
        handled = 0
        now_ms = int(self.clock() * 1000)
        try:
            for m in messages:
                err = m.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        self.metrics.source_errors.labels(self.metrics.agent, "fetch").inc()
                        self._fetch_errors.occurred(err.code(), "offsets agent %s: fetch "
                                                    "error: %s", self.cluster, err)
                        fetch_errors.add(err.code())
                    continue
                self._check_continuity(consumer, m.partition(), m.offset(), now_ms)
                self._reading[m.partition()] = m.offset() + 1
                topic_partition = self._publish(m.partition(), m.offset(), m.key(), m.value(),
                                                m.timestamp(), now_ms)
                if topic_partition is not None:
                    seen.add(topic_partition)
                pending[m.partition()] = m.offset() + 1
                handled += 1
            for code in self._fetch_errors.holding() - fetch_errors:
                self._fetch_errors.ended(code)
            if pending:
                self.sink.flush()
                self._conditions.ended("flush")
        except SinkError as e:
            self.metrics.flush_failures.labels(self.metrics.agent).inc()
            self._conditions.occurred("flush", "offsets agent %s: %s", self.cluster, e)
            self._rewind(consumer)
            return 0
        if pending:
            self._saved.update(pending)
            if not seen <= self._committed:
                self._committed = self._committed | seen
            self.store.save(ReaderState(self._saved, self._committed))
            self.metrics.last_flush.labels(self.metrics.agent).set(self.clock())
        self._report_lag(consumer)
        return handled

    def _publish(self, partition: int, offset: int, key: bytes | None, value: bytes | None,
                 timestamp: tuple[int, int], now_ms: int) -> tuple[str, int] | None:
        """Send one record; returns the (topic, partition) of a published commit.

        When parsing the record, or building or sending what it gives, raises, the record
        is quarantined instead (`SinkError` excepted: that is the sink failing).
        """
        rid = offsets_record_id(self.cluster, partition, offset)
        # Keyed by source partition: the telemetry topic keeps __consumer_offsets' order,
        # and a group always lives in one source partition, so its commits stay in order.
        sink_key = f"{self.cluster}:{OFFSETS_TOPIC}:{partition}"
        stream = STREAM
        try:
            ts_type, ts = timestamp
            parse, stream = ((parse_group_record, GROUP_STREAM) if is_group_key(key)
                             else (parse_offset_record, STREAM))
            rec = parse(key, value, cluster=self.cluster, source_partition=partition,
                        source_offset=offset,
                        ts_ms=None if ts_type == TIMESTAMP_NOT_AVAILABLE else ts)
            if isinstance(rec, Skipped):
                self.metrics.skipped.labels(self.metrics.agent, rec.source, rec.reason).inc()
                return None
            if not isinstance(rec, Malformed):
                committed = (rec["topic"], rec["partition"]) if stream == STREAM else None
                rec["record_id"] = rid
                self.sink.send(stream, sink_key, rec)
                self.metrics.published(stream)
                return committed
        except SinkError:
            raise
        except Exception as e:  # noqa: BLE001 - no record may stop the agent (module docstring)
            self.metrics.parser_exception(SOURCE, e)
            rec = parser_exception(SOURCE, e, raw_record_text(key, value))
        self._quarantine(rec, rid, partition, offset, now_ms, stream)
        return None

    def _quarantine(self, bad: Malformed, rid: str, partition: int, offset: int, now_ms: int,
                    stream: str) -> None:
        """Send `bad` (the record at `offset` of `partition`, or where a lost span starts) to
        quarantine under `rid`, keyed as the partition's records are."""
        q = bad.to_quarantine_record(cluster=self.cluster, ingest_ts_ms=now_ms,
                                     origin=self.TOPIC, source_partition=partition,
                                     source_offset=offset)
        q["record_id"] = rid
        self.sink.send(QUARANTINE, f"{self.cluster}:{OFFSETS_TOPIC}:{partition}", q)
        self.metrics.quarantined(stream)

    def _check_continuity(self, consumer: Consumer, partition: int, offset: int,
                          now_ms: int) -> None:
        """Quarantine the span between where `partition` was to go on and its log start, when
        the record at `offset` shows that the log now starts after that (module docstring)."""
        expected = self._reading.get(partition)
        if expected is None or offset <= expected:
            return
        start = self._log_start(consumer, partition)
        if start is None or start <= expected:
            return  # compacted away, not deleted (or the log start cannot be told)
        resumed = min(start, offset)
        rid = f"{self.cluster}:{OFFSETS_TOPIC}:{partition}:lost_span:{expected}"
        self.metrics.lost_span(rid, "log_start_moved",
                               f"{self.TOPIC}-{partition}: offsets {expected} to {resumed} were "
                               "deleted before the reader got to them", records=resumed - expected)
        self._quarantine(lost_span(SOURCE, "log_start_moved", {"offset": expected},
                                   {"offset": resumed}, resumed - expected),
                         rid, partition, expected, now_ms, STREAM)

    def _log_start(self, consumer: Consumer, partition: int) -> int | None:
        """The partition's log start offset: as of the last fetch (the broker sends it with
        every fetch response), else asked of the broker; None when it cannot be told."""
        tp = TopicPartition(self.TOPIC, partition)
        try:
            low = consumer.get_watermark_offsets(tp, cached=True)
            if low is None or low[0] < 0:
                low = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
        except KafkaException as e:
            self.metrics.source_errors.labels(self.metrics.agent, "offset_listing").inc()
            log.warning("offsets agent %s: log start offset of %s-%d: %s; a lost span there, "
                        "if any, is not reported", self.cluster, self.TOPIC, partition, e)
            return None
        return low[0] if low is not None and low[0] >= 0 else None

    def _rewind(self, consumer: Consumer) -> None:
        """After a failed flush, read again from the saved positions.

        A fresh assign() with the saved offsets, rather than seek(): seek fails on a
        partition whose fetcher has not started yet, and assign also drops what is
        already fetched and queued beyond the saved positions.
        """
        consumer.assign([TopicPartition(self.TOPIC, p, self._start_offset(p))
                         for p in sorted(self._assigned)])
        self._reading = {p: o for p, o in self._saved.items() if p in self._assigned}

    def _report_lag(self, consumer: Consumer) -> None:
        lag = 0
        for p in self._assigned:
            try:
                wm = consumer.get_watermark_offsets(TopicPartition(self.TOPIC, p), cached=True)
            except KafkaException:
                continue
            if wm is None or wm[1] < 0:
                continue  # nothing fetched from that partition yet
            lag += max(wm[1] - self._saved.get(p, max(wm[0], 0)), 0)
        self.metrics.lag_records.labels(self.metrics.agent, self.TOPIC).set(lag)

    def run(self, stop: threading.Event, interval_s: float = 1.0) -> None:
        """Poll until `stop` is set; a final poll drains what is left."""
        while not stop.is_set():
            if self.poll_once() < self.batch_records:
                stop.wait(interval_s)
        self.poll_once()

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
            self._assigned.clear()
            self._reading.clear()
