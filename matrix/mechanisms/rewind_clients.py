"""The clients and cluster look-ups the rewind mechanisms (rewinds.py) share.

Each rewind mechanism works on a topic and group of its own, so the workload's groups
(billing, analytics) see nothing of it. This module holds what they have in common: the
topic with its producer, reading a group's committed offsets, the group's coordinator,
which broker may be killed without taking the KRaft quorum down, and `SeekingConsumer`, a
group member that commits its own positions every second and seeks back when asked (the
workload's consumers run in threads that expose no handle to seek with).

Pure helpers (`java_string_hash`, `coordinator_partition`, `seek_back_targets`,
`reset_direction`) are unit-tested in tests/unit/test_matrix_rewinds.py.
"""

from __future__ import annotations

import logging
import threading
import time

from demo.faults.base import FaultContext, now_ms, wait_for

log = logging.getLogger(__name__)


# ---- pure ------------------------------------------------------------------------------

def java_string_hash(s: str) -> int:
    """Java's String.hashCode (32-bit signed), as Kafka hashes a group id."""
    h = 0
    units = s.encode("utf-16-be")   # Java hashes UTF-16 code units
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_partition(group: str, partitions: int = 50) -> int:
    """The __consumer_offsets partition whose leader coordinates `group`
    (Utils.abs(groupId.hashCode) % offsets.topic.num.partitions; Utils.abs maps
    Integer.MIN_VALUE to 0)."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def seek_back_targets(positions: dict[int, int], back: int, low: dict[int, int]) -> dict[int, int]:
    """Where a member seeking `back` messages on each partition lands: never before the
    log start (low watermark), never past where it is."""
    return {p: min(pos, max(pos - back, low.get(p, 0))) for p, pos in positions.items()}


def reset_direction(committed: int, reset_to: int) -> str:
    """An automatic reset from a committed offset to `reset_to`: "rewind" when the group's
    new position is below the committed one (it re-reads, or the offsets it held did not
    exist), "forward" when above (it skips), "none" when equal."""
    return "rewind" if reset_to < committed else "forward" if reset_to > committed else "none"


def killable(broker: int, controllers: list[int]) -> bool:
    """A broker whose crash leaves a KRaft quorum: not a controller, or one of at least
    three (a majority of the rest stays)."""
    return broker not in controllers or len(controllers) - 1 > len(controllers) // 2


# ---- the cluster -------------------------------------------------------------------------

def own_topic(ctx: FaultContext, topic: str, partitions: int = 3, rf: int = 3) -> None:
    """Create the mechanism's topic and wait until every partition has a leader."""
    from confluent_kafka.admin import NewTopic

    from demo.workload import create_topics

    rf = min(rf, len(ctx.cluster.nodes))
    create_topics(ctx.bootstrap, [NewTopic(topic, partitions, rf)])

    def led() -> bool:
        md = ctx.admin().list_topics(topic, timeout=5).topics[topic]
        return len(md.partitions) == partitions and all(p.leader >= 0 for p in md.partitions.values())
    wait_for(f"leaders of {topic}", led, 60, ctx)


def start_producer(ctx: FaultContext, topic: str, rate_per_s: float) -> str:
    from demo.workload import ProducerSpec

    name = f"{topic}-producer"
    if name not in ctx.workload.producers:
        ctx.workload.start_producer(ProducerSpec(name, topic, rate_per_s, acks="all"))
    return name


def stop_producer(ctx: FaultContext, name: str) -> None:
    """Workload has no stop_producer: stop one of its producer threads the way stop() does."""
    run = ctx.workload.producers.pop(name, None)
    if run:
        run.stop.set()
        run.thread.join(30)


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offset per partition (-1001: none), read without joining."""
    from demo.faults.offset_rewind import committed as committed_tps

    return {tp.partition: tp.offset for tp in committed_tps(bootstrap, group, topic, partitions)}


def watermarks(bootstrap: str, topic: str, partitions: int,
               retry_s: float = 30.0) -> dict[int, tuple[int, int]]:
    """(log start, high watermark) per partition. A partition whose leader is moving (as
    right after a cluster starts) is asked again for up to `retry_s`."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    moving = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)

    def one(p: int) -> tuple[int, int]:
        deadline = time.monotonic() + retry_s
        while True:
            try:
                return c.get_watermark_offsets(TopicPartition(topic, p), timeout=10,
                                               cached=False)
            except KafkaException as e:
                if e.args[0].code() not in moving or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "kmon-matrix-probe"})
    try:
        return {p: one(p) for p in range(partitions)}
    finally:
        c.close()


def offsets_at(bootstrap: str, topic: str, partitions: int, ts_ms: int) -> dict[int, int]:
    """The first offset at or after `ts_ms` per partition (-1: none yet)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "kmon-matrix-probe"})
    try:
        found = c.offsets_for_times([TopicPartition(topic, p, ts_ms) for p in range(partitions)],
                                    timeout=10)
        return {tp.partition: tp.offset for tp in found}
    finally:
        c.close()


# Answers while a group's coordinator moves (its broker crashed and is not yet fenced, or
# the new one is still loading the group): ask again.
COORDINATOR_MOVING = ("NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE",
                      "COORDINATOR_LOAD_IN_PROGRESS")


def group_state(admin, group: str, retry_s: float = 30.0):
    """(member count, coordinator broker id) of a group, asking again for up to retry_s
    while its coordinator is moving (seen in CI: NOT_COORDINATOR 6 s after a kill -9 of
    the coordinator, before the controller had fenced it; seen here: no answer in 10 s).

    admin is an AdminClient, or a function that makes one for each attempt: after a kill
    of the coordinator, a kept client has the dead broker in its coordinator cache, and
    librdkafka holds a request for a cached coordinator that is down until that broker
    is up again (rdkafka_coord.c: "we'll be re-triggered on broker state broadcast"), so
    it may never learn of the new coordinator while the old one is down."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + retry_s
    while True:
        client = admin() if callable(admin) else admin
        try:
            desc = client.describe_consumer_groups([group])[group].result(10)
            return len(desc.members), desc.coordinator.id
        except (KafkaException, TimeoutError) as e:
            # TimeoutError: no answer in 10 s (the request went to the dead broker)
            code = (e.args[0].name() if isinstance(e, KafkaException) and e.args
                    and hasattr(e.args[0], "name") else "TIMEOUT")
            if code not in (*COORDINATOR_MOVING, "TIMEOUT") or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def fresh_admin(bootstrap: str):
    """A new AdminClient, with no coordinator cached (see group_state)."""
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def wait_group_empty(ctx: FaultContext, group: str, timeout_s: float = 60) -> bool:
    return wait_for(f"group {group} empty", lambda: group_state(ctx.admin(), group)[0] == 0,
                    timeout_s, ctx)


def isr_full(admin) -> bool:
    """Every partition of every topic led and fully in sync (the next scenario's start)."""
    md = admin.list_topics(timeout=5)
    return all(p.leader >= 0 and len(p.isrs) == len(p.replicas)
               for t in md.topics.values() for p in t.partitions.values())


def alter_offsets(admin, group: str, topic: str, offsets: dict[int, int]) -> None:
    """What kafka-consumer-groups.sh --reset-offsets --execute does (an empty group only)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    tps = [TopicPartition(topic, p, o) for p, o in sorted(offsets.items())]
    for fut in admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, tps)]).values():
        fut.result(30)


# ---- a member that seeks ---------------------------------------------------------------

class SeekingConsumer:
    """A live member of `group` on `topic`: reads, commits its positions every second
    (explicit offsets: the next offset to read on each partition, as an application that
    stores after processing does), and, when asked, seeks back on every partition it owns
    and commits the older positions at once, staying in the group (no rebalance)."""

    def __init__(self, bootstrap: str, group: str, topic: str, logger=None,
                 commit_every_s: float = 1.0, auto_offset_reset: str = "earliest"):
        self.bootstrap, self.group, self.topic = bootstrap, group, topic
        self.auto_offset_reset = auto_offset_reset
        self.logger, self.commit_every_s = logger, commit_every_s
        self.positions: dict[int, int] = {}
        self.messages = 0
        self._stop = threading.Event()
        self._request: dict | None = None
        self._done = threading.Event()
        self.result: dict = {}
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"seeking-consumer-{group}")

    def start(self) -> "SeekingConsumer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def seek_back(self, messages: int | None = None, seconds: float | None = None,
                  timeout_s: float = 30) -> dict:
        """Ask the member to seek back `messages` per partition (or to the offsets of
        `seconds` ago) and commit; {"ms", "before", "after"} once committed, {} if not."""
        self._done.clear()
        self._request = {"messages": messages, "seconds": seconds}
        self._done.wait(timeout_s)
        return self.result

    def _run(self) -> None:
        from confluent_kafka import Consumer

        conf = {"bootstrap.servers": self.bootstrap, "group.id": self.group,
                "client.id": f"{self.group}-consumer", "enable.auto.commit": False,
                "auto.offset.reset": self.auto_offset_reset}
        if self.logger is not None:
            conf["logger"] = self.logger
        c = Consumer(conf)
        c.subscribe([self.topic], on_revoke=lambda cons, parts: self._revoked(cons, parts))
        last_commit = time.monotonic()
        try:
            while not self._stop.is_set():
                for m in c.consume(500, timeout=0.5):
                    if m.error() is None:
                        self.positions[m.partition()] = m.offset() + 1
                        self.messages += 1
                if self._request is not None:
                    try:
                        self._seek(c, self._request)
                    except Exception as e:  # noqa: BLE001 - reported as no result
                        log.warning("%s: seek failed: %s", self.group, e)
                        self.result = {}
                    self._request = None
                    self._done.set()
                if time.monotonic() - last_commit >= self.commit_every_s:
                    self._commit(c, dict(self.positions))
                    last_commit = time.monotonic()
        finally:
            try:
                self._commit(c, dict(self.positions))
                c.close()
            except Exception as e:  # noqa: BLE001
                log.debug("closing %s: %s", self.group, e)

    def _commit(self, c, positions: dict[int, int]) -> None:
        from confluent_kafka import TopicPartition

        if not positions:
            return
        try:
            c.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in sorted(positions.items())],
                     asynchronous=False)
        except Exception as e:  # noqa: BLE001 - coordinators come and go during faults
            log.debug("%s commit: %s", self.group, e)

    def _revoked(self, c, parts) -> None:
        revoked = {tp.partition for tp in parts}
        self._commit(c, {p: o for p, o in self.positions.items() if p in revoked})
        for p in revoked:
            self.positions.pop(p, None)

    def _seek(self, c, request: dict) -> None:
        from confluent_kafka import TopicPartition

        owned = {tp.partition for tp in c.assignment()}
        before = {p: o for p, o in self.positions.items() if p in owned}
        if request["seconds"] is not None:
            at = offsets_at(self.bootstrap, self.topic, max(owned, default=-1) + 1,
                            now_ms() - int(request["seconds"] * 1000))
            after = {p: min(before[p], at[p]) for p in before if at.get(p, -1) >= 0}
        else:
            low = {p: c.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10,
                                              cached=False)[0] for p in before}
            after = seek_back_targets(before, request["messages"], low)
        after = {p: o for p, o in after.items() if o < before[p]}
        for p, o in after.items():
            c.seek(TopicPartition(self.topic, p, o))
            self.positions[p] = o
        self._commit(c, after)
        self.result = {"ms": now_ms(), "before": before, "after": after}
        log.info("%s sought back: %s -> %s", self.group, before, after)
