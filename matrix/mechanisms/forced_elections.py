"""An offline partition brought back by an operator who accepts an unclean election.

The partition's leader is down and its one other replica, out of sync, cannot be elected
cleanly; the topic does not allow unclean elections, so the partition stays offline. To
get it back without waiting for the leader an operator elects the out-of-sync replica
anyway, and every record only the old leader had is lost (the old leader truncates when
it returns). The two ways an operator does it:

- `ForcedUncleanElection`: the ElectLeaders API with election type UNCLEAN (KIP-460,
  kafka-leader-election --election-type unclean; in KRaft since KAFKA-12670).
- `UncleanEnabledByOperator`: unclean.leader.election.enable=true set on the topic at
  runtime (kafka-configs --alter --entity-type topics); the KRaft controller looks for
  leaderless partitions it may now elect uncleanly every
  unclean.leader.election.interval.ms (KAFKA-12670; 2 s in the demo's brokers).

Set-up, made when the fault starts (the session's other scenarios stop these brokers
too): topic ``<topic>`` with one partition on [leader, follower], unclean elections off,
min.insync.replicas 1, an acks=1 producer and a reading group. The fault stops the
follower (out of the ISR), lets the leader take records alone until the readers have
read `leader_only_read` past the follower's end, stops the leader (the partition is
offline), restarts the follower, and then the operator acts; run.fault_ms is when the
follower leads. The old leader is restarted and truncates. `heal` restores whatever is
still down and the topic's config.

Expected: unclean_election on "<topic>-0", cause unclean_leader_election, critical
(records were lost). Explained: the old leader's truncation, the readers' reset or
rewind, what the two stops do to other partitions only on those brokers
(unclean.collateral_expects), retried commits and partners loaded by the outage.
"""

from __future__ import annotations

import re

from demo.faults.base import (FaultContext, FaultRun, leader_and_isr, now_ms,
                              wait_committed_past, wait_for)
from demo.workload import ConsumerSpec, ProducerSpec
from matrix.fault import COMMITS_RETRIED, PARTNERS_LOADED, MatrixFault
from matrix.mechanisms.compaction import stop_producer
from matrix.mechanisms.unclean import (_alive, bootstrap_without, check_quorum_survives,
                                       collateral_expects, collateral_partitions, end_offset,
                                       replica_bytes, wait_replicas_back, wait_whole_again)
from matrix.truth import Expect

UNCLEAN_KEY = "unclean.leader.election.enable"


class OfflinePartitionRecovery(MatrixFault):
    fault_class = "unclean_election"
    observe_s = 60.0

    def __init__(self, topic: str, leader: int = 1, follower: int = 2, group: str = "",
                 rate_per_s: float = 50, leader_only_read: int = 100):
        self.topic, self.leader, self.follower = topic, leader, follower
        self.group = group or f"{topic}-readers"
        self.leader_only_read = leader_only_read
        self.producer = ProducerSpec(f"{topic}-producer", topic, rate_per_s, acks="1")
        self.consumer = ConsumerSpec(self.group, (topic,), "earliest")
        self.collateral: list[str] = []
        self._started = False

    @property
    def tp(self):
        from confluent_kafka import TopicPartition
        return TopicPartition(self.topic, 0)

    def expect(self) -> tuple[Expect, ...]:
        return (Expect(f"unclean election of {self.topic}-0 by an operator", "unclean_election",
                       re.escape(f"{self.topic}-0"), ("unclean_leader_election",),
                       ("critical",)),)

    def explained(self) -> tuple[Expect, ...]:
        readers = rf"group:{re.escape(self.group)}/{re.escape(self.topic)}-0"
        return (Expect("old leader's truncation", "log_truncation", re.escape(f"{self.topic}-0")),
                Expect("readers reset", "offset_reset", readers),
                Expect("readers rewound", "offset_rewind", readers), COMMITS_RETRIED,
                PARTNERS_LOADED, *collateral_expects(self.collateral))

    def recover(self, ctx: FaultContext, run: FaultRun, survivors: str) -> None:
        """The operator's act that elects the out-of-sync follower."""
        raise NotImplementedError

    def undo(self, ctx: FaultContext) -> None:
        """Put back what `recover` changed besides the election."""

    def inject(self, ctx: FaultContext, run: FaultRun) -> None:
        from confluent_kafka.admin import NewTopic

        from demo.workload import create_topics
        cl = ctx.cluster
        check_quorum_survives(cl, {self.leader, self.follower})
        create_topics(ctx.bootstrap, [NewTopic(
            self.topic, 1, replica_assignment=[[self.leader, self.follower]],
            config={UNCLEAN_KEY: "false", "min.insync.replicas": "1"})])
        self._started = True
        ctx.workload.start_producer(self.producer)
        ctx.workload.start_consumer(self.consumer)
        wait_for(f"records on replica {self.follower}", lambda: replica_bytes(
            cl.node(self.follower), self.topic) > 10_000, 60, ctx)
        ctx.say(f"stopping follower {self.follower} of '{self.topic}'")
        cl.stop_node(self.follower)
        up = bootstrap_without(cl, self.follower)
        run.notes["isr_shrank"] = wait_for(
            f"ISR [{self.leader}]", lambda: leader_and_isr(ctx.admin(up), self.topic)
            == (self.leader, [self.leader]), 60, ctx)
        follower_end = end_offset(up, self.topic)
        target = follower_end + self.leader_only_read
        run.notes.update(topic=self.topic, follower_end=follower_end)
        ctx.say(f"waiting for '{self.group}' to commit past {target:,} (the follower ends at "
                f"{follower_end:,})")
        run.notes["readers_past_follower_end"] = wait_committed_past(
            ctx, up, self.group, self.topic, target)
        self.collateral = run.notes["collateral"] = collateral_partitions(
            ctx, {self.leader, self.follower}, self.topic)
        run.notes["leader_end"] = end_offset(up, self.topic)
        ctx.say(f"stopping leader {self.leader}: '{self.topic}' is offline; restarting "
                f"follower {self.follower}, out of sync")
        cl.stop_node(self.leader)
        cl.restart(self.follower)
        survivors = bootstrap_without(cl, self.leader)
        run.notes["offline"] = wait_for(
            f"{self.topic}-0 leaderless with broker {self.follower} back",
            lambda: self.follower in ctx.admin(survivors).list_topics(timeout=5).brokers
            and leader_and_isr(ctx.admin(survivors), self.topic)[0] < 0, 120, ctx)
        self.recover(ctx, run, survivors)
        elected = wait_for(f"broker {self.follower} leads {self.topic}-0",
                           lambda: leader_and_isr(ctx.admin(survivors), self.topic)[0]
                           == self.follower, 120, ctx)
        run.notes["elected"] = elected
        if elected:
            run.fault_ms = now_ms()
            run.notes["new_leader_end"] = end_offset(survivors, self.topic)
            run.notes["lost"] = run.notes["leader_end"] - run.notes["new_leader_end"]
        ctx.say(f"restarting the old leader {self.leader}: it truncates to the new leader's end")
        cl.restart(self.leader)
        run.notes["isr_full"] = wait_replicas_back(ctx, self.topic, [self.leader, self.follower])

    def heal(self, ctx: FaultContext) -> None:
        if not self._started:
            return
        for b in (self.leader, self.follower):
            if not _alive(ctx.cluster, b):
                ctx.cluster.restart(b)
        self.undo(ctx)
        stop_producer(ctx.workload, self.producer.name)
        ctx.workload.stop_consumer(self.group)
        # The topic stays (see unclean.UncleanElection.heal): a client that still knows it
        # would create it again with the broker's defaults.
        wait_whole_again(ctx, self.topic, [self.leader, self.follower])
        self._started = False


class ForcedUncleanElection(OfflinePartitionRecovery):
    name = "forced_unclean_election"
    title = "an operator forces an unclean election (ElectLeaders UNCLEAN)"

    def __init__(self, topic: str = "ledger-forced", **kw):
        super().__init__(topic, **kw)

    def recover(self, ctx: FaultContext, run: FaultRun, survivors: str) -> None:
        from confluent_kafka import ElectionType

        ctx.say(f"operator: elect_leaders(UNCLEAN, {self.topic}-0)")
        answers: list[str] = []

        def elected() -> bool:
            result = ctx.admin(survivors).elect_leaders(ElectionType.UNCLEAN, [self.tp]).result(30)
            error = next(iter(result.values()), None)
            answers.append("ok" if error is None else str(error))
            return error is None

        # Refused while the follower is still fenced (it registers and catches up first).
        run.notes["election_accepted"] = wait_for("the unclean election accepted", elected,
                                                  60, ctx, interval_s=2.0)
        run.notes["election_answers"] = answers[-5:]


class UncleanEnabledByOperator(OfflinePartitionRecovery):
    name = "unclean_enabled_by_operator"
    title = "an operator allows unclean elections on an offline partition's topic"

    def __init__(self, topic: str = "ledger-optin", **kw):
        super().__init__(topic, **kw)
        self._enabled = False

    def _set(self, ctx: FaultContext, value: str, bootstrap: str | None = None) -> None:
        from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource,
                                           ResourceType)

        res = ConfigResource(ResourceType.TOPIC, self.topic, incremental_configs=[
            ConfigEntry(UNCLEAN_KEY, value, incremental_operation=AlterConfigOpType.SET)])
        for f in ctx.admin(bootstrap).incremental_alter_configs([res]).values():
            f.result(30)

    def recover(self, ctx: FaultContext, run: FaultRun, survivors: str) -> None:
        ctx.say(f"operator: {UNCLEAN_KEY}=true on topic '{self.topic}'")
        self._set(ctx, "true", survivors)
        self._enabled = True
        run.notes["enabled_ms"] = now_ms()

    def undo(self, ctx: FaultContext) -> None:
        if self._enabled:
            self._set(ctx, "false")
            self._enabled = False
