"""Administrative operations on a live cluster that a monitor must sit through.

Operators move, add and retire replicas while the cluster serves its load; each operation
costs every broker involved some work for a while, and none of it is any one broker's
fault. Fault class healthy: a correct monitor reports nothing, or, where the operation
loads every broker at once, cluster_wide_slowness; one broker named slow is a false page.

- `ReassignmentUnderLoad`: a reassignment of many partitions at once, unthrottled (an
  operator rebalancing the cluster or adding brokers with kafka-reassign-partitions,
  KIP-455): every broker copies replicas while it serves the load, and every broker's
  Produce tail rises together. The topic is filled first so there is data to copy (a
  minute at 1 MB/s, in the scenario's time: run.notes["preload"] has when).
- `BrokerDecommission`: every replica moved off one broker under a replication throttle
  (the Kafka docs' "Decommissioning brokers"; KIP-73 replication quotas,
  leader/follower.replication.throttled.rate and .replicas), then the broker stopped.
  `heal` starts it again and moves its replicas back.
- `PartitionIncrease`: a live topic's partition count raised (kafka-topics --alter
  --partitions) while it is written and read: the group rebalances and starts the new
  partitions from their beginning (auto.offset.reset earliest; with latest the records
  written before the group saw them would be skipped, KAFKA-12261 and KAFKA-12478, a
  different scenario). The producer and the group refresh their metadata every few
  seconds (librdkafka's default is five minutes), so the change reaches them within the
  scenario.

Reassignments go through Kafka's Java Admin client (remediation.reassignments: the Python
client has no AlterPartitionReassignments), the throttles through dynamic configs.
run.notes: what was moved, how long it took, the throttle.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from pathlib import Path

from demo.faults.base import FaultContext, FaultRun, now_ms, wait_for
from demo.workload import ProducerSpec
from matrix.fault import COMMITS_RETRIED, MatrixFault
from matrix.mechanisms.cluster_ops import broker_ids, restore_cluster
from matrix.mechanisms.compaction import delete_topic, stop_producer
from matrix.mechanisms.unclean import check_quorum_survives
from matrix.truth import Expect

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

# What every broker slowed by the same operation looks like to a correct monitor.
CLUSTER_WIDE = Expect("every broker slowed together", "cluster_wide_slowness", r"cluster:.+")
# A coordinator that moves with its replicas may serve an older commit once (as when one
# fails over: rewinds.CoordinatorFailover), a real rewind reported with the move as cause.
AFTER_COORDINATOR_MOVE = Expect("rewinds after a coordinator moved", "offset_rewind",
                                r"group:.+", ("stale_offset_after_coordinator_move",))

THROTTLE_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
THROTTLED_REPLICAS = ("leader.replication.throttled.replicas",
                      "follower.replication.throttled.replicas")


# ---- plans (pure) ----------------------------------------------------------------------

def spread(partitions: int, brokers: list[int], rf: int) -> list[list[int]]:
    """Replica lists rotating over the brokers: partition i starts at the i-th."""
    b = sorted(brokers)
    return [[b[(i + k) % len(b)] for k in range(min(rf, len(b)))] for i in range(partitions)]


def rotated(replicas: list[int], brokers: list[int], shift: int) -> list[int]:
    """Each replica moved `shift` brokers on (in broker order, wrapping): with a shift
    under the brokers' count less the replication factor, every replica list changes."""
    b = sorted(brokers)
    return [b[(b.index(r) + shift) % len(b)] for r in replicas]


def without_broker(assignment: dict[TopicPartition, list[int]], broker: int,
                   brokers: list[int]) -> dict[TopicPartition, list[int]]:
    """New replica lists for the partitions on `broker`: it is replaced, in its place in
    the list, by the broker holding the fewest replicas so far among those not already in
    the list. `assignment` is every partition (the load is counted over all)."""
    load = Counter(b for reps in assignment.values() for b in reps)
    out = {}
    for tp in sorted(assignment):
        reps = assignment[tp]
        if broker not in reps:
            continue
        candidates = [b for b in sorted(brokers) if b != broker and b not in reps]
        if not candidates:
            raise ValueError(f"{tp[0]}-{tp[1]}: no broker left to take broker {broker}'s "
                             f"replica of {reps}")
        pick = min(candidates, key=lambda b: (load[b], b))
        load[pick] += 1
        load[broker] -= 1
        out[tp] = [pick if b == broker else b for b in reps]
    return out


def current_assignment(admin) -> dict[TopicPartition, list[int]]:
    md = admin.list_topics(timeout=10)
    return {(t.topic, p.id): list(p.replicas) for t in md.topics.values() if t.error is None
            for p in t.partitions.values()}


def reassigned(admin, plan: dict[TopicPartition, list[int]]) -> bool:
    """Every partition of the plan has its new replica list, all in sync. While a move is
    under way the metadata lists the adding replicas beside the old ones, so the list
    equals the plan's only once the move is over (asking the metadata, not the Java
    client: a JVM start every few seconds would load the brokers it measures)."""
    md = admin.list_topics(timeout=10)
    for (topic, p), target in plan.items():
        t = md.topics.get(topic)
        part = None if t is None else t.partitions.get(p)
        if part is None or list(part.replicas) != list(target) or \
                sorted(part.isrs) != sorted(target):
            return False
    return True


# ---- the cluster -----------------------------------------------------------------------

def java_reassignments(cluster):
    """Kafka's Java Admin client for the local cluster (remediation.reassignments)."""
    from remediation.reassignments import CLASSPATH_JARS, JavaReassignments

    jars = [j for j in cluster.deps.ensure("broker") if Path(j).name.startswith(CLASSPATH_JARS)]
    home = cluster.config.jvm.java_home
    return JavaReassignments({"bootstrap.servers": cluster.bootstrap_servers,
                              "client.id": "kmon-matrix"}, jars,
                             str(Path(home) / "bin" / "java") if home else None)


def reassign(ctx: FaultContext, plan: dict[TopicPartition, list[int]],
             timeout_s: float = 300) -> dict:
    """Start the plan's reassignments and wait until every partition has its new replicas,
    all in sync; what happened (errors per partition, seconds)."""
    started = time.monotonic()
    errors = {f"{t}-{p}": e for (t, p), e in java_reassignments(ctx.cluster).alter(
        {tp: tuple(r) for tp, r in plan.items()}).items() if e}
    done = wait_for(f"{len(plan)} reassignment(s) done", lambda: reassigned(ctx.admin(), plan),
                    timeout_s, ctx, interval_s=2.0)
    return {"partitions": len(plan), "errors": errors, "done": done,
            "seconds": round(time.monotonic() - started, 1)}


def alter_configs(ctx: FaultContext, kind: str, names: list[str], entries: dict[str, str | None]
                  ) -> None:
    """Set (a value) or delete (None) dynamic configs on each BROKER or TOPIC resource."""
    from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource,
                                       ResourceType)

    ops = [ConfigEntry(k, v or "", incremental_operation=(
        AlterConfigOpType.SET if v is not None else AlterConfigOpType.DELETE))
        for k, v in entries.items()]
    for name in names:   # one resource a call: a BROKER resource must go to that broker
        res = ConfigResource(getattr(ResourceType, kind), str(name), incremental_configs=ops)
        for f in ctx.admin().incremental_alter_configs([res]).values():
            f.result(30)


# ---- the operations --------------------------------------------------------------------

class _AdminOperation(MatrixFault):
    fault_class = "healthy"
    observe_s = 90.0

    def explained(self) -> tuple[Expect, ...]:
        return (CLUSTER_WIDE, COMMITS_RETRIED)


class ReassignmentUnderLoad(_AdminOperation):
    name = "reassignment_under_load"
    title = "many partitions reassigned at once on a loaded cluster"

    def __init__(self, topic: str = "moving", partitions: int = 12, shift: int = 2,
                 preload_rate: float = 1000, preload_s: float = 60, rate_per_s: float = 200,
                 value_bytes: int = 1000, steady_s: float = 30):
        self.topic, self.partitions, self.shift = topic, partitions, shift
        self.preload_rate, self.preload_s, self.steady_s = preload_rate, preload_s, steady_s
        self.value_bytes = value_bytes
        self.load = ProducerSpec(f"{topic}-producer", topic, rate_per_s, acks="all",
                                 value_bytes=value_bytes)
        self._created = False

    def inject(self, ctx: FaultContext, run: FaultRun) -> None:
        from confluent_kafka.admin import NewTopic

        from demo.workload import create_topics
        from matrix.mechanisms.healthy_clients import BurstProducer

        brokers = sorted(broker_ids(ctx.cluster))
        before = spread(self.partitions, brokers, min(3, len(brokers)))
        create_topics(ctx.bootstrap, [NewTopic(self.topic, self.partitions,
                                               replica_assignment=before)])
        self._created = True
        ctx.say(f"filling '{self.topic}': {self.preload_rate:.0f} records/s for "
                f"{self.preload_s:.0f}s, then {self.load.rate_per_s:.0f}/s steady")
        filler = BurstProducer(ctx.bootstrap, self.topic, f"{self.topic}-filler",
                               self.value_bytes)
        run.notes["preload"] = filler.burst(self.preload_rate, self.preload_s)
        filler.close()
        ctx.workload.start_producer(self.load)
        ctx.sleep(self.steady_s)
        plan = {(self.topic, p): rotated(r, brokers, self.shift) for p, r in enumerate(before)}
        ctx.say(f"reassigning all {self.partitions} partitions of '{self.topic}' "
                f"({self.shift} of every {len(before[0])} replicas move), unthrottled")
        run.fault_ms = now_ms()
        run.notes.update(topic=self.topic, moved_bytes_approx=self.shift * run.notes[
            "preload"].get("delivered", 0) * self.value_bytes)
        run.notes["reassignment"] = reassign(ctx, plan)

    def heal(self, ctx: FaultContext) -> None:
        stop_producer(ctx.workload, self.load.name)
        if self._created:
            delete_topic(ctx.bootstrap, self.topic)
            self._created = False


class BrokerDecommission(_AdminOperation):
    name = "broker_decommission"
    title = "a broker's replicas moved away under a throttle, then the broker stopped"

    def explained(self) -> tuple[Expect, ...]:
        return (*super().explained(), AFTER_COORDINATOR_MOVE)

    def __init__(self, broker: int = 1, throttle_bytes_s: int = 10_000_000,
                 retired_s: float = 60):
        self.broker, self.throttle, self.retired_s = broker, throttle_bytes_s, retired_s
        self.original: dict[TopicPartition, list[int]] = {}   # to move back in heal
        self._throttled: tuple[list[int], list[str]] | None = None
        self._stopped = False

    def throttle_on(self, ctx: FaultContext, brokers: list[int], topics: list[str]) -> None:
        self._throttled = (brokers, topics)
        alter_configs(ctx, "BROKER", brokers, {k: str(self.throttle) for k in THROTTLE_RATES})
        alter_configs(ctx, "TOPIC", topics, {k: "*" for k in THROTTLED_REPLICAS})

    def throttle_off(self, ctx: FaultContext) -> None:
        if self._throttled is None:
            return
        brokers, topics = self._throttled
        alter_configs(ctx, "TOPIC", topics, {k: None for k in THROTTLED_REPLICAS})
        alter_configs(ctx, "BROKER", brokers, {k: None for k in THROTTLE_RATES})
        self._throttled = None

    def inject(self, ctx: FaultContext, run: FaultRun) -> None:
        cl = ctx.cluster
        check_quorum_survives(cl, {self.broker})
        brokers = sorted(broker_ids(cl))
        everything = current_assignment(ctx.admin())
        plan = without_broker(everything, self.broker, brokers)
        self.original = {tp: everything[tp] for tp in plan}
        topics = sorted({t for t, _ in plan})
        # Internal topics (__consumer_offsets) move unthrottled: small, and their configs
        # are not the operator's to change.
        throttled = [t for t in topics if not t.startswith("__")]
        ctx.say(f"decommissioning broker {self.broker}: {len(plan)} replicas move off it "
                f"({self.throttle / 1e6:.0f} MB/s replication throttle)")
        self.throttle_on(ctx, brokers, throttled)
        run.fault_ms = now_ms()
        run.notes.update(broker=self.broker, throttle_bytes_s=self.throttle, topics=topics,
                         moved=reassign(ctx, plan, timeout_s=600))
        self.throttle_off(ctx)
        ctx.say(f"broker {self.broker} holds no replica now; stopping it")
        cl.stop_node(self.broker)
        self._stopped = True
        run.notes["stopped_ms"] = now_ms()
        ctx.sleep(self.retired_s)

    def heal(self, ctx: FaultContext) -> None:
        try:
            self.throttle_off(ctx)
        except Exception:  # noqa: BLE001 - a stale throttle only slows the move back
            log.exception("could not remove the replication throttle")
        if self._stopped:
            ctx.say(f"bringing broker {self.broker} back")
            ctx.cluster.restart(self.broker)
            wait_for(f"broker {self.broker} registered", lambda: self.broker in
                     ctx.admin().list_topics(timeout=5).brokers, 120, ctx)
            self._stopped = False
        if self.original:
            ctx.say(f"moving {len(self.original)} replicas back to broker {self.broker}")
            reassign(ctx, self.original, timeout_s=600)
            self.original = {}
        restore_cluster(ctx)


class PartitionIncrease(MatrixFault):
    name = "partition_increase"
    title = "a live topic's partition count raised"
    fault_class = "healthy"
    observe_s = 90.0

    def __init__(self, topic: str = "widening", group: str = "widening-g", partitions: int = 3,
                 to: int = 6, rate_per_s: float = 30, refresh_ms: int = 5000):
        self.topic, self.group, self.partitions, self.to = topic, group, partitions, to
        self.refresh_ms = refresh_ms
        self.producer = ProducerSpec(f"{topic}-producer", topic, rate_per_s, acks="all",
                                     metadata_refresh_ms=refresh_ms)
        self.member = None

    def explained(self) -> tuple[Expect, ...]:
        return (COMMITS_RETRIED,)

    def prepare(self, ctx: FaultContext) -> None:
        from demo.workload import ConsumerSpec
        from matrix.mechanisms.healthy_clients import GroupMember
        from matrix.mechanisms.rewind_clients import own_topic

        own_topic(ctx, self.topic, self.partitions)
        ctx.workload.start_producer(self.producer)
        # Entered so the client-log agent follows the member's log (it runs instead of a
        # workload consumer: those refresh their metadata every five minutes).
        ctx.workload.consumer_specs[self.group] = ConsumerSpec(self.group, (self.topic,))
        self.member = GroupMember(ctx.bootstrap, self.group, (self.topic,),
                                  f"{self.group}-consumer", ctx.workload.log_dir,
                                  log_name=self.group,
                                  conf={"topic.metadata.refresh.interval.ms": self.refresh_ms})
        self.member.start()

    def committed(self, ctx: FaultContext, partitions: int) -> dict[int, int]:
        from matrix.mechanisms.rewind_clients import committed
        return committed(ctx.bootstrap, self.group, self.topic, partitions)

    def inject(self, ctx: FaultContext, run: FaultRun) -> None:
        from confluent_kafka.admin import NewPartitions

        wait_for(f"{self.group} committed", lambda: min(
            self.committed(ctx, self.partitions).values()) >= 1, 90, ctx)
        ctx.say(f"raising '{self.topic}' from {self.partitions} to {self.to} partitions")
        for f in ctx.admin().create_partitions([NewPartitions(self.topic, self.to)]).values():
            f.result(30)
        run.fault_ms = now_ms()
        seen: dict[int, int] = {}

        def reading_all() -> bool:
            seen.update(self.committed(ctx, self.to))
            return all(seen.get(p, -1) >= 0 for p in range(self.to))
        run.notes.update(topic=self.topic, group=self.group, partitions=[self.partitions, self.to],
                         reading_all=wait_for(f"{self.group} reading all {self.to}", reading_all,
                                              120, ctx))
        run.notes.update(committed={str(p): o for p, o in sorted(seen.items())},
                         member_assignments=self.member.assignments if self.member else None)

    def heal(self, ctx: FaultContext) -> None:
        if self.member is not None:
            self.member.stop()
            self.member = None
        stop_producer(ctx.workload, self.producer.name)
