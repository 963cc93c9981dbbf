"""An unclean leader election and what follows it.

Topic ``ledger`` has one partition on brokers 1 and 2 (replicas [1, 2]) with
unclean.leader.election.enable=true, a producer with acks=1 and a consumer group
``ledger-readers`` (auto.offset.reset=earliest). The fault:

1. stops follower 2 (it leaves the ISR); writes go on to leader 1 alone until the
   readers have committed `leader_only_read` records past the follower's end;
2. stops leader 1: the partition has no leader (on a cluster whose every node is a
   controller too, the KRaft quorum is also down to one voter until 2 returns; the demo's
   one controller is node 3, as a fleet keeps its quorum apart from the brokers);
3. restarts 2: the controller elects it although it is not in the ISR (unclean), and the
   records only 1 had are gone;
4. restarts 1: it truncates its log to the new leader's.

The consumers were past the new leader's end: they hit OffsetOutOfRange (or a detected
truncation), reset to the earliest offset and re-read. Expected: an unclean_election
finding with the lost range, linked with the log truncation, the reset and the rewind of
``ledger-readers`` into one incident.
"""

from __future__ import annotations

from demo.faults.base import (Fault, FaultContext, FaultRun, leader_and_isr, now_ms,
                              wait_committed_past, wait_for)
from demo.workload import ConsumerSpec, ProducerSpec

# Brokers settings this fault needs (LocalCluster extra_broker_config): KRaft's controller
# looks for partitions to elect uncleanly every unclean.leader.election.interval.ms
# (5 minutes by default).
# A stopped follower leaves the ISR after replica.lag.time.max.ms (30 s by default; on two
# loaded cores the ISR of `ledger` was still [1, 2] 90 s after the follower stopped): 10 s
# here. The slow-broker fault's freezes (1.5 s) stay well under it.
BROKER_CONFIG = {"unclean.leader.election.interval.ms": "2000",
                 "replica.lag.time.max.ms": "10000"}


class UncleanElection(Fault):
    name = "unclean_election"
    title = "unclean leader election (and its chain)"
    # The chain: the old leader's truncation, the readers' reset or rewind.
    effects = ("truncation", "readers")

    def __init__(self, topic: str = "ledger", leader: int = 1, follower: int = 2,
                 group: str = "ledger-readers", rate_per_s: float = 50,
                 leader_only_read: int = 100):
        self.topic, self.leader, self.follower, self.group = topic, leader, follower, group
        self.leader_only_read = leader_only_read   # records past the follower's end to read
        self.producer = ProducerSpec(f"{topic}-producer", topic, rate_per_s, acks="1")
        self.consumer = ConsumerSpec(group, (topic,), "earliest")

    def prepare(self, ctx: FaultContext) -> None:
        from confluent_kafka.admin import NewTopic

        from demo.workload import create_topics
        create_topics(ctx.bootstrap, [NewTopic(
            self.topic, 1, replica_assignment=[[self.leader, self.follower]],
            config={"unclean.leader.election.enable": "true", "min.insync.replicas": "1"})])
        ctx.workload.start_producer(self.producer)
        ctx.workload.start_consumer(self.consumer)

    def inject(self, ctx: FaultContext, run: FaultRun) -> None:
        cl = ctx.cluster
        others = ",".join(n.bootstrap for n in cl.broker_nodes if n.node_id != self.leader)
        ctx.say(f"stopping follower {self.follower}; '{self.topic}' keeps taking writes on "
                f"leader {self.leader} alone")
        cl.stop_node(self.follower)
        others_than_follower = ",".join(n.bootstrap for n in cl.broker_nodes
                                        if n.node_id != self.follower)
        seen: dict = {}

        def isr_is_leader_alone() -> bool:
            seen["leader"], seen["isr"] = leader_and_isr(ctx.admin(others_than_follower),
                                                         self.topic)
            return seen["isr"] == [self.leader]

        run.notes["isr_shrank"] = wait_for(f"ISR [{self.leader}]", isr_is_leader_alone, 90, ctx)
        if not run.notes["isr_shrank"]:
            ctx.say(f"the ISR of '{self.topic}' did not shrink to [{self.leader}] in 90 s "
                    f"(last seen: leader {seen.get('leader')}, ISR {seen.get('isr')}); going on")
        # Records only the leader has; the readers must have read (and committed) some of
        # them, or the truncation takes nothing they saw and there is no chain to show. On
        # a loaded machine the readers lag: wait for them rather than for a fixed time.
        from remediation.live_cluster import LiveCluster

        live, tp = LiveCluster({"bootstrap.servers": others_than_follower}), (self.topic, 0)
        follower_end = live.log_bounds([tp])[tp][1]
        target = follower_end + self.leader_only_read
        run.notes["follower_end"] = follower_end
        ctx.say(f"waiting for '{self.group}' to commit past offset {target:,} (the stopped "
                f"follower ends at {follower_end:,})")
        run.notes["readers_past_follower_end"] = wait_committed_past(
            ctx, others_than_follower, self.group, self.topic, target)
        ctx.say(f"stopping leader {self.leader}; restarting the stale follower "
                f"{self.follower}")
        cl.stop_node(self.leader)
        cl.restart(self.follower)
        run.fault_ms = now_ms()   # the controller elects the stale follower once it is back
        elected = wait_for(f"unclean leader {self.follower}",
                           lambda: leader_and_isr(ctx.admin(others), self.topic)[0]
                           == self.follower, 120, ctx)
        run.notes["elected"] = elected
        ctx.say(f"broker {self.follower} leads '{self.topic}' uncleanly; restarting "
                f"{self.leader}, which truncates its log")
        cl.restart(self.leader)
        wait_for("both replicas back in the ISR",
                 lambda: leader_and_isr(ctx.admin(), self.topic)[1]
                 == sorted([self.leader, self.follower]), 120, ctx)

    def part_of(self, finding) -> str | None:
        kind = finding.type.value
        if kind == "unclean_election":
            return "finding"
        if kind == "log_truncation" and finding.entity == f"{self.topic}-0":
            return "truncation"
        if kind in ("offset_reset", "offset_rewind") and finding.entity.startswith(
                f"group:{self.group}/{self.topic}-"):
            return "readers"
        return None
