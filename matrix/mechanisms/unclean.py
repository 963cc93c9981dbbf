"""Unclean elections beyond the demo's RF 2 one (fault_class "unclean_election").

`UncleanElection` (RF 3): topic ``ledger3``, one partition on [leader, insync, stale]
with unclean.leader.election.enable=true, an acks=all producer and a reading group. The
fault stops `stale` (controlled shutdown: the controller takes it out of the ISR at
once); writes go on to leader and insync, both in the ISR, so they are committed (acked
by the whole ISR) until the readers have committed `leader_only_read` records past the
stale replica's end; then it stops `insync` and `leader` and restarts `stale`: the only
live replica, out of sync, is elected uncleanly and every record past its end is gone.
(Kafka 4.3.1, seen: while no replica is up the controller logs "Cannot trigger unclean
leader election ... ELIGIBLE_LEADERS_NOT_AVAILABLE" with ELR [leader]; once `stale` is back,
"UNCLEAN partition change for ledger3-0 ... isr: [] -> [2], leader: -1 -> 2".)
`leader` and `insync` come back and truncate to the new leader's end (below their high
watermark), the readers, past that end, reset or rewind. Expected: unclean_election on
"<topic>-0" (critical); explained: log_truncation on it, offset_reset / offset_rewind of
the readers' group.

Which clusters can run it: two of the three replicas must be down at the election while
the third, out of sync, is up, and the controller quorum must stay up. On the demo's three
brokers with one combined controller (node 3), node 3 holds a replica of any RF 3
partition: stopping it stops the quorum, and a live node 3 stays in the ISR (a running
in-sync follower is never throttled out: Kafka throttles only replicas already out of
sync), so it would be elected cleanly. It runs on three brokers with a dedicated
controller (local_cluster.dedicated_controllers = 1: every broker may stop), or on five
brokers with controllers 3, 4, 5 (the defaults stop 1 and 3: one controller of three).
`inject` refuses any layout that would stop a majority of the controllers.

`SoleReplicaCrash` (RF 1): topic ``solo``, its partitions all on one broker, written
(acks=1) and read by a group. The fault kills that broker (kill -9) and restarts it after
`down_s`: the partitions are offline meanwhile. Kafka 4.3 (eligible leader replicas) takes
the replica out of the ISR into the ELR when its broker is fenced, and, since the broker
shut down uncleanly, into the last known ELR when it registers again; the controller then
elects it from there and logs the change as UNCLEAN (seen on topic-churn's RF 1 topics).
It was the partitions' last in-sync replica: nothing acknowledged is lost. Expected, per
partition: an unclean_election that names that (cause last_in_sync_replica_elected) and is
not a data-loss page (warning). The fault time is the election, when the broker leads its
partitions again: it registers, catches up and is unfenced first (22 s after the restart
in the first live run), and until then nothing the controller logs is an election.

`UncleanNoLoss` (RF 2): topic ``ledger-quiet`` on [leader, follower], written once
(`records`, acks=all) and then left alone. The fault stops the follower (out of the ISR,
with every record), stops the leader with nothing new written, and restarts the
follower: the controller elects it uncleanly (it is not in the ISR) and logs the
election as unclean, but its log ends where the leader's did: nothing committed is lost.
Expected: an unclean_election finding that is not critical (warning or info: a correct
monitor checks what was lost); the old leader truncates to its own end, not below its
high watermark, so no log_truncation. Explained: what the same two stops do to the other
partitions that live only on those two brokers (the demo's ledger, written all the time
with unclean election allowed, seen losing 175 records in a live run): their unclean
elections, truncations and their readers' resets and rewinds are real, and a correct
monitor reports them. `inject` lists those partitions in run.notes["collateral"]; so do
`UncleanElection` (the two replicas it stops together) and the demo's
`LossyUncleanElection` (matrix/mechanisms/demo_faults.py).
"""

from __future__ import annotations

import re

from demo.faults.base import (FaultContext, FaultRun, leader_and_isr, now_ms,
                              wait_committed_past, wait_for)
from demo.workload import ConsumerSpec, ProducerSpec
from matrix.fault import COMMITS_RETRIED, PARTNERS_LOADED, MatrixFault
from matrix.mechanisms.cluster_ops import wait_healthy
from matrix.mechanisms.compaction import stop_producer
from matrix.truth import Expect

UNCLEAN_CONFIG = {"unclean.leader.election.enable": "true", "min.insync.replicas": "1"}


def end_offset(bootstrap: str, topic: str, partition: int = 0) -> int:
    """The partition's log end (its high watermark) as its leader reports it."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.list_offsets({TopicPartition(topic, partition): OffsetSpec.latest()},
                                 request_timeout=10)
    return next(iter(futures.values())).result().offset


def bootstrap_without(cluster, *down: int) -> str:
    """The brokers' bootstrap list but the stopped ones (dedicated controllers have no
    client listener)."""
    nodes = getattr(cluster, "broker_nodes", cluster.nodes)
    return ",".join(n.bootstrap for n in nodes if n.node_id not in down)


def check_quorum_survives(cluster, stopped: set[int]) -> None:
    """Refuse to stop a majority of the KRaft controllers at once."""
    controllers = set(cluster.controller_ids())
    down = controllers & stopped
    if len(down) * 2 >= len(controllers):
        raise RuntimeError(f"stopping brokers {sorted(stopped)} would stop controllers "
                           f"{sorted(down)} of {sorted(controllers)}: the quorum would be lost "
                           f"(run it with a dedicated controller, or five brokers "
                           f"with three controllers: see matrix/mechanisms/unclean.py)")


def wait_replicas_back(ctx: FaultContext, topic: str, replicas: list[int]) -> bool:
    return wait_for(f"{replicas} back in the ISR of {topic}",
                    lambda: leader_and_isr(ctx.admin(), topic)[1] == sorted(replicas), 120, ctx)


def wait_whole_again(ctx: FaultContext, topic: str, replicas: list[int]) -> bool:
    """A heal's last step: the fault's replicas back in its topic's ISR, then every other
    ISR full too (the restarted brokers also follow __consumer_offsets and the workload's
    topics, and catch up on them later; seen in CI: __consumer_offsets still [1, 3] when the
    next check ran)."""
    own = wait_replicas_back(ctx, topic, replicas)
    return wait_healthy(ctx, "every ISR full after the unclean election") and own


def replica_bytes(node, topic: str, partition: int = 0) -> int:
    """Bytes of records the broker's replica of the partition holds on disk."""
    return sum(f.stat().st_size for f in (node.data_dir / f"{topic}-{partition}").glob("*.log"))


def _partition(topic: str) -> str:
    return re.escape(f"{topic}-0")


def collateral_partitions(ctx: FaultContext, stopped: set[int], own_topic: str) -> list[str]:
    """The other partitions whose every replica is on the brokers a fault stops together:
    they go offline and through the same election and truncation as the fault's own."""
    md = ctx.admin().list_topics(timeout=10)
    return sorted(f"{name}-{p.id}" for name, t in md.topics.items() if name != own_topic
                  for p in t.partitions.values() if p.replicas and set(p.replicas) <= stopped)


def collateral_expects(collateral: list[str]) -> tuple[Expect, ...]:
    """What a correct monitor reports about those partitions (real, so explained)."""
    if not collateral:
        return ()
    tps = "|".join(re.escape(tp) for tp in collateral)
    return (Expect("other partitions on the stopped brokers: elections", "unclean_election",
                   f"(?:{tps})"),
            Expect("their truncations", "log_truncation", f"(?:{tps})"),
            Expect("their readers reset", "offset_reset", f"group:.+/(?:{tps})"),
            Expect("their readers rewound", "offset_rewind", f"group:.+/(?:{tps})"))


class UncleanElection(MatrixFault):
    name = "unclean_election_rf3"
    title = "unclean election of an RF 3 partition (committed records lost)"
    fault_class = "unclean_election"

    def __init__(self, topic: str = "ledger3", leader: int = 1, insync: int = 3,
                 stale: int = 2, group: str = "ledger3-readers", rate_per_s: float = 50,
                 leader_only_read: int = 100):
        self.topic, self.group = topic, group
        self.leader, self.insync, self.stale = leader, insync, stale
        self.leader_only_read = leader_only_read
        self.collateral: list[str] = []
        self.producer = ProducerSpec(f"{topic}-producer", topic, rate_per_s, acks="all")
        self.consumer = ConsumerSpec(group, (topic,), "earliest")

    @property
    def replicas(self) -> list[int]:
        return [self.leader, self.insync, self.stale]

    def expect(self) -> tuple[Expect, ...]:
        return (Expect("unclean election", "unclean_election", _partition(self.topic),
                       ("unclean_leader_election",), ("critical",)),)

    def explained(self) -> tuple[Expect, ...]:
        readers = rf"group:{re.escape(self.group)}/{re.escape(self.topic)}-0"
        return (Expect("truncation", "log_truncation", _partition(self.topic)),
                Expect("readers reset", "offset_reset", readers),
                Expect("readers rewound", "offset_rewind", readers), COMMITS_RETRIED,
                PARTNERS_LOADED, *collateral_expects(self.collateral))

    def prepare(self, ctx: FaultContext) -> None:
        from confluent_kafka.admin import NewTopic

        from demo.workload import create_topics
        create_topics(ctx.bootstrap, [NewTopic(self.topic, 1, replica_assignment=[self.replicas],
                                               config=dict(UNCLEAN_CONFIG))])
        ctx.workload.start_producer(self.producer)
        ctx.workload.start_consumer(self.consumer)

    def inject(self, ctx: FaultContext, run: FaultRun) -> None:
        cl = ctx.cluster
        check_quorum_survives(cl, {self.leader, self.insync})
        # The stale replica must have fetched something, or the unclean leader starts
        # from an empty log (seen: a topic created 3 s before, the follower had not
        # fetched yet, and the new leader ended at 0).
        wait_for(f"records on replica {self.stale}", lambda: replica_bytes(
            cl.node(self.stale), self.topic) > 10_000, 60, ctx)
        ctx.say(f"stopping replica {self.stale} of '{self.topic}'; leader {self.leader} and "
                f"{self.insync} keep the ISR")
        cl.stop_node(self.stale)
        up = bootstrap_without(cl, self.stale)
        run.notes["isr_shrank"] = wait_for(
            f"ISR {sorted([self.leader, self.insync])}",
            lambda: leader_and_isr(ctx.admin(up), self.topic)
            == (self.leader, sorted([self.leader, self.insync])), 60, ctx)
        # The high watermark once the stale replica is out: at least its end (it may have
        # lagged a little; seen: 215 here, 80 in the stale log), so the readers' target
        # below is past what it had.
        stale_end = end_offset(up, self.topic)
        target = stale_end + self.leader_only_read
        run.notes["stale_end"] = stale_end
        ctx.say(f"waiting for '{self.group}' to commit past {target:,} (replica {self.stale} "
                f"ends at {stale_end:,})")
        run.notes["readers_past_stale_end"] = wait_committed_past(
            ctx, up, self.group, self.topic, target)
        self.collateral = run.notes["collateral"] = collateral_partitions(
            ctx, {self.leader, self.insync}, self.topic)
        ctx.say(f"stopping {self.insync} and leader {self.leader}; restarting the stale "
                f"replica {self.stale}")
        cl.stop_node(self.insync)
        run.notes["committed_end"] = end_offset(bootstrap_without(cl, self.stale, self.insync),
                                                self.topic)
        cl.stop_node(self.leader)
        cl.restart(self.stale)
        run.fault_ms = now_ms()
        survivors = bootstrap_without(cl, self.leader, self.insync)
        run.notes["elected"] = wait_for(
            f"unclean leader {self.stale}",
            lambda: leader_and_isr(ctx.admin(survivors), self.topic)[0] == self.stale, 120, ctx)
        if run.notes["elected"]:
            run.notes["new_leader_end"] = end_offset(survivors, self.topic)
        ctx.say(f"restarting {self.insync} and {self.leader}: they truncate to the new "
                f"leader's end")
        cl.restart(self.insync)
        cl.restart(self.leader)
        run.notes["isr_full"] = wait_replicas_back(ctx, self.topic, self.replicas)

    def heal(self, ctx: FaultContext) -> None:
        for b in self.replicas:
            if not _alive(ctx.cluster, b):
                ctx.cluster.restart(b)
        stop_producer(ctx.workload, self.producer.name)
        ctx.workload.stop_consumer(self.group)
        # The topic stays (as the demo's ledger does): deleting it while any client still
        # knows it lets that client's next metadata request create it again, with the
        # broker's defaults (seen: ledger-quiet back with 3 partitions).
        wait_whole_again(ctx, self.topic, self.replicas)


class SoleReplicaCrash(MatrixFault):
    name = "sole_replica_crash"
    title = "the broker of an RF 1 topic crashes and restarts"
    fault_class = "unclean_election"
    observe_s = 120.0   # as the healthy crash: late truncation lines, windows after it

    def __init__(self, topic: str = "solo", broker: int = 2, partitions: int = 2,
                 group: str = "solo-readers", rate_per_s: float = 20, down_s: float = 20):
        self.topic, self.broker, self.partitions = topic, broker, partitions
        self.group, self.down_s = group, down_s
        self.producer = ProducerSpec(f"{topic}-producer", topic, rate_per_s, acks="1")
        self.consumer = ConsumerSpec(group, (topic,), "earliest")

    def expect(self) -> tuple[Expect, ...]:
        return (Expect("sole replica back: not a data-loss page", "unclean_election",
                       rf"{re.escape(self.topic)}-\d+", ("last_in_sync_replica_elected",),
                       ("warning",)),)

    def explained(self) -> tuple[Expect, ...]:
        # The same for each of the topic's other partitions; a coordinator on the killed
        # broker makes commits land out of order.
        return (*self.expect(), COMMITS_RETRIED, PARTNERS_LOADED)

    def prepare(self, ctx: FaultContext) -> None:
        """Nothing at the session's start (as UncleanNoLoss): the session's other
        scenarios stop this broker too, and the topic is made when this one starts."""

    def inject(self, ctx: FaultContext, run: FaultRun) -> None:
        from confluent_kafka.admin import NewTopic

        from demo.workload import create_topics
        from matrix.mechanisms.healthy import bounce

        cl = ctx.cluster
        check_quorum_survives(cl, {self.broker})
        create_topics(ctx.bootstrap, [NewTopic(
            self.topic, self.partitions,
            replica_assignment=[[self.broker]] * self.partitions)])
        ctx.workload.start_producer(self.producer)
        ctx.workload.start_consumer(self.consumer)
        wait_for(f"records on broker {self.broker}'s replicas of '{self.topic}'",
                 lambda: replica_bytes(cl.node(self.broker), self.topic) > 10_000, 60, ctx)
        run.notes["end_before"] = end_offset(ctx.bootstrap, self.topic)
        ctx.say(f"killing broker {self.broker} (kill -9), the only replica of "
                f"'{self.topic}'; restarting it in {self.down_s:.0f}s")
        run.notes.update(bounce(ctx, self.broker, crash=True, down_s=self.down_s,
                                after_restart=lambda: self._await_election(ctx)))
        run.fault_ms = run.notes.get("elected_ms") or run.notes["restarted_ms"]
        run.notes["end_after"] = end_offset(ctx.bootstrap, self.topic)

    def _await_election(self, ctx: FaultContext) -> dict:
        """Until the broker leads every partition of the topic again (elected)."""
        led = wait_for(f"broker {self.broker} leading '{self.topic}' again", lambda: all(
            leader_and_isr(ctx.admin(), self.topic, p)[0] == self.broker
            for p in range(self.partitions)), 120, ctx, interval_s=0.5)
        return {"elected": led, **({"elected_ms": now_ms()} if led else {})}

    def heal(self, ctx: FaultContext) -> None:
        if not _alive(ctx.cluster, self.broker):
            ctx.cluster.restart(self.broker)
        stop_producer(ctx.workload, self.producer.name)
        ctx.workload.stop_consumer(self.group)
        # The topic stays (see UncleanElection.heal).
        wait_whole_again(ctx, self.topic, [self.broker])


def _alive(cluster, node_id: int) -> bool:
    from infra.local_cluster import _pid_alive

    return _pid_alive(cluster.node(node_id).pid)


class UncleanNoLoss(MatrixFault):
    name = "unclean_election_no_loss"
    title = "an unclean election in which nothing was lost"
    fault_class = "unclean_election"

    def __init__(self, topic: str = "ledger-quiet", leader: int = 1, follower: int = 2,
                 records: int = 500):
        self.topic, self.leader, self.follower, self.records = topic, leader, follower, records
        self.collateral: list[str] = []

    def expect(self) -> tuple[Expect, ...]:
        return (Expect("unclean election, nothing lost", "unclean_election",
                       _partition(self.topic), (), ("warning", "info")),)

    def explained(self) -> tuple[Expect, ...]:
        return (COMMITS_RETRIED, PARTNERS_LOADED, *collateral_expects(self.collateral))

    def interim(self) -> tuple[Expect, ...]:
        """Critical until the old leader is back: the topic is made when the scenario
        starts (below), so no end offset of it was sampled before the election, and until
        the old leader's own start line shows its log end nothing bounds what it had
        acknowledged (detectors/lost_range.py). A loss that cannot be ruled out pages."""
        return (Expect("unclean election, loss not ruled out yet", "unclean_election",
                       _partition(self.topic), ("unclean_leader_election",), ("critical",)),)

    def prepare(self, ctx: FaultContext) -> None:
        """Nothing at the session's start: the topic is made when the scenario starts. Made
        here, it lived through the session's earlier scenarios, and one that stopped both
        its brokers (the demo's unclean election, unclean-rf2-3b) elected its replica
        uncleanly too; that finding, rightly open for minutes, was this scenario's finding
        (same partition, same type) and hid it."""

    def _create(self, ctx: FaultContext) -> None:
        from confluent_kafka.admin import NewTopic

        from demo.workload import create_topics
        create_topics(ctx.bootstrap, [NewTopic(
            self.topic, 1, replica_assignment=[[self.leader, self.follower]],
            config=dict(UNCLEAN_CONFIG))])

    def _write(self, ctx: FaultContext) -> None:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": ctx.bootstrap, "acks": "all", "linger.ms": 20})
        for i in range(self.records):
            p.produce(self.topic, key=str(i).encode(), value=b"q" * 100)
        if p.flush(60):
            raise RuntimeError(f"{self.topic}: records still unacknowledged after 60 s")

    def inject(self, ctx: FaultContext, run: FaultRun) -> None:
        cl = ctx.cluster
        check_quorum_survives(cl, {self.leader, self.follower})
        self._create(ctx)
        self._write(ctx)   # acks=all: every record is on both replicas
        wait_replicas_back(ctx, self.topic, [self.leader, self.follower])
        run.notes["end_before"] = end_offset(ctx.bootstrap, self.topic)
        self.collateral = run.notes["collateral"] = collateral_partitions(
            ctx, {self.leader, self.follower}, self.topic)
        ctx.say(f"'{self.topic}' ends at {run.notes['end_before']} on both replicas; stopping "
                f"follower {self.follower}, then leader {self.leader} (no writes)")
        cl.stop_node(self.follower)
        up = bootstrap_without(cl, self.follower)
        run.notes["isr_shrank"] = wait_for(
            f"ISR [{self.leader}]", lambda: leader_and_isr(ctx.admin(up), self.topic)[1]
            == [self.leader], 60, ctx)
        run.notes["leader_end"] = end_offset(up, self.topic)
        cl.stop_node(self.leader)
        cl.restart(self.follower)
        run.fault_ms = now_ms()
        survivors = bootstrap_without(cl, self.leader)
        run.notes["elected"] = wait_for(
            f"unclean leader {self.follower}",
            lambda: leader_and_isr(ctx.admin(survivors), self.topic)[0] == self.follower,
            120, ctx)
        if run.notes["elected"]:
            run.notes["end_after"] = end_offset(survivors, self.topic)
        cl.restart(self.leader)
        run.notes["isr_full"] = wait_replicas_back(ctx, self.topic, [self.leader, self.follower])

    def heal(self, ctx: FaultContext) -> None:
        for b in (self.leader, self.follower):
            if not _alive(ctx.cluster, b):
                ctx.cluster.restart(b)
        wait_whole_again(ctx, self.topic, [self.leader, self.follower])
