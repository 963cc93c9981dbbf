"""Compaction that never happens, with no cleaner error to show for it.

A compacted partition stays bounded only while the cleaner cleans it. The cleaner can be
absent, or idle with nothing it is allowed to clean; either way it logs no error, its
gauges say nothing is wrong (or there are none), and the partition only grows. What shows
is the effect: replicas of one partition growing apart, dirty records older than the
topic's max.compaction.lag.ms, a broker hosting compacted partitions that publishes no
cleaner signal at all.

- `CleanerDisabled`: one broker runs with log.cleaner.enable=false, a static setting (the
  default was false before 0.9.0.1, KAFKA-2988; deprecated by KAFKA-13610 and still
  honoured by 4.3.1): a broker with an old or drifted server.properties. It starts no
  cleaner threads and registers no cleaner metrics; its replicas of every compacted
  partition, __consumer_offsets included, grow while the other replicas of the same
  partitions are cleaned. The fault restarts that broker with the setting
  (LocalCluster.node_config; a controlled restart), and `heal` restarts it without.
  Expected: compaction_lag on that broker, with a cause that says its cleaner does not
  run ("cleaner_stalled", or "cleaner_not_running": compaction_lag rule 6). Explained: the compacted partitions it hosts, and what a controlled restart
  leaves (retried commits, its partners loaded).
- `OpenTransaction`: a transactional producer begins a transaction on a compacted topic,
  writes, and neither commits nor aborts (an application stuck or partitioned away with a
  long transaction.timeout.ms, or a transaction left hanging by a broker bug: KIP-664,
  KIP-890, KAFKA-12671). The last stable offset stops at the transaction's first record
  and the cleaner never cleans past it (LogCleanerManager.cleanableOffsets): every
  replica grows and the dirty records age past the topic's promise, while every broker's
  cleaner is idle and well. The fault becomes visible when the first blocked record is
  max.compaction.lag.ms old. `heal` aborts the transaction. Expected: compaction_lag on
  the partition ("compacted_partition_growing", or "cleaning_blocked_by_open_transaction",
  a name the detector does not have yet); a finding that blames a broker's cleaner is
  a wrong cause and stays unexplained. Seen by compaction_lag rule 5c (the topic's
  max.compaction.lag.ms), but later than the target while sizes are sampled once a
  minute and the topic promises one minute.
"""

from __future__ import annotations

import logging
import re

from demo.faults.base import FaultContext, FaultRun, now_ms
from demo.workload import ProducerSpec
from matrix.fault import COMMITS_RETRIED, PARTNERS_LOADED, MatrixFault
from matrix.mechanisms.compaction import compacted_config, delete_topic, stop_producer
from matrix.mechanisms.healthy import bounce
from matrix.mechanisms.healthy_clients import client_logger
from matrix.mechanisms.unclean import check_quorum_survives, replica_bytes
from matrix.truth import Expect

log = logging.getLogger(__name__)

CLEANER_OFF = {"log.cleaner.enable": "false"}
# Causes a correct monitor may give (the second of BLOCKED is not in the detector's
# vocabulary).
NOT_RUNNING = ("cleaner_stalled", "cleaner_not_running")
BLOCKED = ("compacted_partition_growing", "cleaning_blocked_by_open_transaction")


def partitions_on(admin, broker: int) -> list[str]:
    """Every partition with a replica on `broker` ("topic-p")."""
    md = admin.list_topics(timeout=10)
    return sorted(f"{t.topic}-{p.id}" for t in md.topics.values() if t.error is None
                  for p in t.partitions.values() if broker in p.replicas)


def any_of(partitions: list[str]) -> str:
    """Entity regex matching exactly these partitions."""
    return "(?:" + "|".join(re.escape(tp) for tp in partitions) + ")"


class CleanerDisabled(MatrixFault):
    name = "cleaner_disabled"
    title = "one broker runs with its log cleaner off"
    fault_class = "compaction"
    observe_s = 90.0

    def __init__(self, broker: int = 1, topic: str = "accounts",
                 replicas: tuple[int, ...] = (3, 1, 4), rate_per_s: float = 50,
                 keys: int = 100, value_bytes: int = 500, max_compaction_lag_ms: int = 30_000,
                 baseline_s: float = 30.0, visible_after_s: float = 30.0):
        # visible_after_s: after the restart, a scrape or two with no cleaner metric from
        # the broker and its replica growing past the cleaned ones.
        self.broker, self.topic, self.replicas = broker, topic, list(replicas)
        self.baseline_s = baseline_s
        self.max_compaction_lag_ms, self.visible_after_s = max_compaction_lag_ms, visible_after_s
        self.producer = ProducerSpec(f"{topic}-producer", topic, rate_per_s, acks="all",
                                     value_bytes=value_bytes, key_space=keys)
        self.hosted: list[str] = [f"{topic}-0"]
        self._created = self._restarted = False
        self._notes: dict | None = None

    def expect(self) -> tuple[Expect, ...]:
        return (Expect(f"broker {self.broker}'s cleaner never runs", "compaction_lag",
                       f"broker:{self.broker}", NOT_RUNNING),)

    def explained(self) -> tuple[Expect, ...]:
        return (Expect(f"compacted partitions on broker {self.broker}", "compaction_lag",
                       any_of(self.hosted)), COMMITS_RETRIED, PARTNERS_LOADED)

    def prepare(self, ctx: FaultContext) -> None:
        from confluent_kafka.admin import NewTopic

        from demo.workload import create_topics
        if self.broker not in self.replicas:
            raise ValueError(f"broker {self.broker} holds no replica of {self.replicas}")
        create_topics(ctx.bootstrap, [NewTopic(self.topic, 1, replica_assignment=[self.replicas],
                                               config=compacted_config(**{
                                                   "segment.ms": "5000",
                                                   "min.cleanable.dirty.ratio": "0.1",
                                                   "max.compaction.lag.ms":
                                                       str(self.max_compaction_lag_ms)}))])
        self._created = True

    def inject(self, ctx: FaultContext, run: FaultRun) -> None:
        cl = ctx.cluster
        check_quorum_survives(cl, {self.broker})
        ctx.workload.start_producer(self.producer)
        ctx.sleep(self.baseline_s)     # every replica updated and cleaned as usual first
        self.hosted = sorted(set(partitions_on(ctx.admin(), self.broker)) | {f"{self.topic}-0"})
        self._notes = run.notes
        run.notes.update(broker=self.broker, topic=self.topic, replicas=self.replicas,
                         compacted_hosted=len(self.hosted),
                         bytes_before=self.replica_sizes(cl))
        ctx.say(f"restarting broker {self.broker} with log.cleaner.enable=false")
        cl.node_config.setdefault(self.broker, {}).update(CLEANER_OFF)
        self._restarted = True
        run.notes["restart"] = bounce(ctx, self.broker, crash=False, down_s=5)
        run.fault_ms = run.notes["restart"]["restarted_ms"] + int(self.visible_after_s * 1000)

    def replica_sizes(self, cl) -> dict[str, int]:
        return {str(b): replica_bytes(cl.node(b), self.topic) for b in self.replicas}

    def heal(self, ctx: FaultContext) -> None:
        cl = ctx.cluster
        if self._notes is not None:      # what the fault did, before it is undone
            self._notes["bytes_at_heal"] = self.replica_sizes(cl)
            self._notes = None
        for key in CLEANER_OFF:
            cl.node_config.get(self.broker, {}).pop(key, None)
        if self._restarted:
            ctx.say(f"restarting broker {self.broker} with its log cleaner on")
            bounce(ctx, self.broker, crash=False, down_s=5)
            self._restarted = False
        stop_producer(ctx.workload, self.producer.name)
        if self._created:
            delete_topic(ctx.bootstrap, self.topic)
            self._created = False


def stable_and_end(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    """(last stable offset, high watermark) of one partition."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap})
    tp = TopicPartition(topic, partition)
    out = []
    for level in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED):
        futures = admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=level,
                                     request_timeout=10)
        out.append(next(iter(futures.values())).result().offset)
    return out[0], out[1]


class OpenTransaction(MatrixFault):
    name = "open_transaction"
    title = "a transaction left open stops its compacted partition's cleaning"
    fault_class = "compaction"
    observe_s = 90.0

    def __init__(self, topic: str = "carts", rate_per_s: float = 50, keys: int = 100,
                 value_bytes: int = 500, max_compaction_lag_ms: int = 60_000,
                 transaction_timeout_ms: int = 900_000):
        # transaction_timeout_ms: at most the brokers' transaction.max.timeout.ms (15 min):
        # the coordinator aborts the transaction after it, well after the scenario.
        self.topic, self.max_compaction_lag_ms = topic, max_compaction_lag_ms
        self.transaction_timeout_ms = transaction_timeout_ms
        self.producer = ProducerSpec(f"{topic}-producer", topic, rate_per_s, acks="all",
                                     value_bytes=value_bytes, key_space=keys)
        self.txn = None                  # the transactional producer, while its txn is open
        self._created = False
        self._notes: dict | None = None

    def expect(self) -> tuple[Expect, ...]:
        return (Expect(f"{self.topic}-0 never cleaned past the open transaction",
                       "compaction_lag", re.escape(f"{self.topic}-0"), BLOCKED),)

    def prepare(self, ctx: FaultContext) -> None:
        from confluent_kafka.admin import NewTopic

        from demo.workload import create_topics
        # Created before the monitor's first look at the topic configs: it must know the
        # topic is compacted and what it promises.
        create_topics(ctx.bootstrap, [NewTopic(self.topic, 1, min(3, len(ctx.cluster.nodes)),
                                               config=compacted_config(**{
                                                   "segment.ms": "5000",
                                                   "max.compaction.lag.ms":
                                                       str(self.max_compaction_lag_ms)}))])
        self._created = True

    def inject(self, ctx: FaultContext, run: FaultRun) -> None:
        from confluent_kafka import Producer

        ctx.workload.start_producer(self.producer)
        ctx.sleep(10)    # updates on the partition before the transaction, cleaned as usual
        client_id = f"{self.topic}-txn-producer"
        self.txn = Producer({"bootstrap.servers": ctx.bootstrap, "client.id": client_id,
                             "transactional.id": f"{self.topic}-txn",
                             "transaction.timeout.ms": self.transaction_timeout_ms,
                             "logger": client_logger(ctx.workload.log_dir, client_id)})
        self.txn.init_transactions(30)
        self.txn.begin_transaction()
        self.txn.produce(self.topic, key=b"k0", value=b"t" * 100)
        if self.txn.flush(30):
            raise RuntimeError(f"{self.topic}: the transactional record was not delivered")
        started = now_ms()
        ctx.say(f"a transaction on '{self.topic}' is open and will stay so; updates go on at "
                f"{self.producer.rate_per_s:.0f}/s (max.compaction.lag.ms="
                f"{self.max_compaction_lag_ms})")
        self._notes = run.notes
        run.notes.update(topic=self.topic, transaction_started_ms=started,
                         max_compaction_lag_ms=self.max_compaction_lag_ms)
        run.fault_ms = started + self.max_compaction_lag_ms
        ctx.sleep(5)
        self.note_offsets(ctx, "stable_and_end")

    def note_offsets(self, ctx: FaultContext, key: str) -> None:
        """The partition's last stable offset and end, into run.notes (notes only)."""
        try:
            self._notes[key] = stable_and_end(ctx.bootstrap, self.topic)
        except Exception as e:  # noqa: BLE001
            self._notes[f"{key}_error"] = str(e)

    def heal(self, ctx: FaultContext) -> None:
        if self._notes is not None:      # what the fault did, before it is undone
            self.note_offsets(ctx, "stable_and_end_at_heal")
            self._notes["bytes_at_heal"] = {str(n.node_id): replica_bytes(n, self.topic)
                                            for n in ctx.cluster.broker_nodes}
            self._notes = None
        if self.txn is not None:
            try:
                self.txn.abort_transaction(30)
            except Exception:  # noqa: BLE001 - the coordinator aborts it at its timeout
                log.exception("could not abort the open transaction on %s", self.topic)
            self.txn = None
        stop_producer(ctx.workload, self.producer.name)
        if self._created:
            delete_topic(ctx.bootstrap, self.topic)
            self._created = False
