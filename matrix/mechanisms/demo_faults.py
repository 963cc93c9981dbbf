"""The demo's four faults as matrix scenarios: same mechanisms, stated ground truth.

- `FrozenBroker`: demo.faults.slow_broker (SIGSTOP in bursts) with its freeze and thaw
  lengths opened up: long freezes leave the followers' fetch gaps past the holdback floor,
  short ones (0.7 s of every 1 s) do not, and every leader then looks slow at once.
- `ResetAndStaleCommit`: demo.faults.offset_rewind (an operator resets an empty group to
  earliest; a stale process of another group commits remembered offsets).
- `ThrottledCleaner`: demo.faults.compaction_lag (one broker's cleaner I/O throttled).
- `LossyUncleanElection`: demo.faults.unclean_election (RF 2, follower out of the ISR
  elected, the leader-only records lost).
"""

from __future__ import annotations

from demo.faults.compaction_lag import CompactionLag
from demo.faults.offset_rewind import OffsetRewinds
from demo.faults.slow_broker import SlowBroker
from demo.faults.unclean_election import UncleanElection
from matrix.fault import COMMITS_RETRIED, PARTNERS_LOADED, MatrixFault
from matrix.mechanisms.unclean import collateral_expects, collateral_partitions
from matrix.truth import Expect

# What a broker that is itself slow (or slow as a follower) may be blamed for.
BROKER_OWN_CAUSES = ("request_handlers_saturated", "local_disk_or_page_cache",
                     "network_threads_saturated", "leader_replication_stalled",
                     "slow_follower", "slow_unattributed", "response_send_slow",
                     "network_send_slow")


def other_brokers(broker: int) -> str:
    """Entity regex for every broker but `broker` (whole match)."""
    return rf"broker:(?!{broker}$)\d+"


def culprit(broker: int, part: str | None = None) -> Expect:
    """The slow broker itself: slow on its own, or the follower the others wait on."""
    return Expect(part or f"slow broker {broker}", "slow_broker", f"broker:{broker}",
                  BROKER_OWN_CAUSES)


def victims(broker: int, part: str | None = None) -> Expect:
    """Leaders held back by the slow follower, named as such."""
    return Expect(part or f"leaders waiting on {broker}", "slow_broker", other_brokers(broker),
                  ("remote_produce_slow_follower",))


# MatrixFault comes first: its parts and part_of (from expect()) replace the demo's.
class FrozenBroker(MatrixFault, SlowBroker):
    fault_class = "slow_broker"
    runs_until_detected = True

    def expect(self):
        return (culprit(self.broker),)

    def explained(self):
        return (victims(self.broker), COMMITS_RETRIED)



class ResetAndStaleCommit(MatrixFault, OffsetRewinds):
    fault_class = "rewind"

    def expect(self):
        return (Expect(f"reset of {self.reset_group}", "offset_rewind",
                       rf"group:{self.reset_group}/{self.reset_topic}-\d+", ("operator_reset",)),
                Expect(f"stale commit in {self.stale_group}", "offset_rewind",
                       rf"group:{self.stale_group}/{self.stale_topic}-\d+",
                       ("stale_process", "member_commit")))



class ThrottledCleaner(MatrixFault, CompactionLag):
    fault_class = "compaction"

    def expect(self):
        return (Expect(f"cleaner of broker {self.broker}", "compaction_lag",
                       f"broker:{self.broker}",
                       ("cleaner_falling_behind", "cleaner_stalled")),)

    def explained(self):
        # The topic's partitions falling behind their max.compaction.lag.ms promise.
        out = (Expect("its partitions", "compaction_lag", rf"{self.topic}-\d+"),)
        if self.restarted:
            # heal's fallback killed and restarted the broker: the group coordinators it
            # held moved, and a group that then committed an older offset really rewound
            # (seen live: ledger-readers re-read 535 messages after the move).
            out += (Expect("rewinds after the coordinator move", "offset_rewind", r"group:.+",
                           ("stale_offset_after_coordinator_move",)), COMMITS_RETRIED,
                    PARTNERS_LOADED)
        return out

    restarted = False

    def heal(self, ctx):
        node = ctx.cluster.node(self.broker)
        pid = node.pid
        super().heal(ctx)
        self.restarted = self.restarted or (pid is not None and node.pid != pid)



class LossyUncleanElection(MatrixFault, UncleanElection):
    fault_class = "unclean_election"
    effects = ()
    collateral: list[str] = []

    def expect(self):
        return (Expect(f"election of {self.topic}-0", "unclean_election", f"{self.topic}-0",
                       ("unclean_leader_election",), ("critical",)),)

    def explained(self):
        return (Expect("old leader's truncation", "log_truncation", f"{self.topic}-0"),
                Expect("readers reset", "offset_reset", rf"group:{self.group}/{self.topic}-0"),
                Expect("readers rewound", "offset_rewind",
                       rf"group:{self.group}/{self.topic}-0"), COMMITS_RETRIED,
                PARTNERS_LOADED, *collateral_expects(self.collateral))

    def inject(self, ctx, run):
        # Other partitions only on the two brokers it stops go through the same.
        self.collateral = run.notes["collateral"] = collateral_partitions(
            ctx, {self.leader, self.follower}, self.topic)
        super().inject(ctx, run)

