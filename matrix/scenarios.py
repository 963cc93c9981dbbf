"""The scenario catalog: every way the matrix causes a fault, on which topology.

A scenario is a name, a fault class, a topology and a factory for its `MatrixFault`
(with the fault's parameters). Scenarios of one topology run one after another on one
cluster (`kmon matrix run`), in catalog order; each is recorded into the corpus under its
name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from matrix.fault import MatrixFault


@dataclass(frozen=True)
class Topology:
    name: str
    brokers: int
    controllers: int          # nodes that are KRaft controllers too (the highest ids)
    dedicated_controllers: int = 0
    workload: str = ""        # said when it is not the base workload plus the scenarios'
    # Settings of kmon's own sections for this topology's session (and its recordings),
    # e.g. time constants scaled down so that a fault of hours shows in minutes.
    settings: tuple[tuple[str, tuple[tuple[str, object], ...]], ...] = ()
    # server.properties entries of every broker, over the demo's (live.topology_config):
    # static settings its scenarios need that would change any other scenario's cluster.
    broker_config: tuple[tuple[str, str], ...] = ()

    def overrides(self) -> dict:
        cluster = {"brokers": self.brokers, "controllers": self.controllers}
        if self.dedicated_controllers:
            cluster["dedicated_controllers"] = self.dedicated_controllers
        return {"local_cluster": cluster, **{section: dict(keys)
                                             for section, keys in self.settings}}

    def describe(self) -> str:
        ctl = (f"{self.dedicated_controllers} dedicated controller(s)"
               if self.dedicated_controllers else
               f"{self.controllers or self.brokers} combined controller(s)")
        brokers = "".join(f", {k}={v}" for k, v in self.broker_config)
        return (f"{self.brokers} brokers, {ctl}{brokers}"
                + (f", {self.workload}" if self.workload else ""))


# The demo's: node 3 is the one KRaft controller (a broker too).
THREE = Topology("3b-1c", 3, 1)
# More brokers, a three-voter quorum on combined nodes 3-5.
FIVE = Topology("5b-3c", 5, 3)
# Brokers apart from the quorum, as fleets run it.
DEDICATED = Topology("3b+1dc", 3, 0, dedicated_controllers=1)
# FIVE on its own cluster with the demo's base workload alone (orders and clicks): a
# session's traffic is its faults' clients on top of that base, so on FIVE a slow broker
# is judged among the other scenarios' producers; here a broker serves 20-60 Produce
# requests a 10 s window, under min_requests_per_window, with no busier peer to compare.
# Its compaction rule 5 runs on a 2-minute growth window (of 2 h by default) with 3
# samples (the size is read once a minute) and topic configs described every minute (5
# by default): the growth of a new compacted topic shows in minutes, not hours.
FIVE_QUIET = Topology("5b-3c-quiet", 5, 3, workload="the base workload alone",
                      settings=(("compaction_lag", (("growth_window_s", 120.0),
                                                    ("growth_min_samples", 3),
                                                    ("topic_config_refresh_s", 60.0))),))
# THREE for the scenarios whose set-up would change every other scenario on a shared
# cluster: brokers that keep a group's committed offsets one minute after it empties (7
# days by default; a static setting), and a broker behind a proxy for the whole session.
THREE_APART = Topology("3b-1c-apart", 3, 1,
                       broker_config=(("offsets.retention.minutes", "1"),
                                      ("offsets.retention.check.interval.ms", "5000")))


@dataclass(frozen=True)
class Scenario:
    name: str
    fault_class: str
    topology: Topology
    make: Callable[[], MatrixFault]
    summary: str


def _make(module: str, cls: str, **kw):
    def make():
        import importlib
        return getattr(importlib.import_module(f"matrix.mechanisms.{module}"), cls)(**kw)
    return make


def catalog() -> list[Scenario]:
    """Every scenario, grouped by topology, in the order a session runs them."""
    S = Scenario
    return [
        # --- 3 brokers, one combined controller (node 3) ---------------------------------
        S("freeze-long-3b", "slow_broker", THREE,
          _make("demo_faults", "FrozenBroker", broker=2, freeze_s=1.5, thaw_s=0.5),
          "broker 2 frozen 1.5 s of every 2 s (the demo's)"),
        S("freeze-short-3b", "slow_broker", THREE,
          _make("demo_faults", "FrozenBroker", broker=2, freeze_s=0.7, thaw_s=0.3),
          "broker 2 frozen 0.7 s of every 1 s: follower gaps under the holdback floor"),
        S("cpu-starved-3b", "slow_broker", THREE,
          _make("cpu_quota", "CpuStarvedBroker", broker=2, quota_share=0.05),
          "broker 2's JVM held to 5% of a core by a cgroup CPU quota"),
        S("slow-reader-3b", "slow_client", THREE,
          _make("slow_client", "SlowReader", broker=1),
          "one client drains its fetch responses at 256 kB/s: ~2% of broker 1's requests"),
        S("slow-link-3b", "slow_client", THREE, _make("slow_link", "SlowProducerLink"),
          "one producer's own path to every broker delayed 300 ms each way by a TCP proxy"),
        S("app-seek-3b", "rewind", THREE, _make("rewinds", "ApplicationSeekCommit"),
          "a live member seeks back 100 messages and commits, no rebalance"),
        S("stale-process-3b", "rewind", THREE, _make("rewinds", "StaleProcessCommit"),
          "a second process joins the group and commits offsets it remembered"),
        S("reset-and-stale-3b", "rewind", THREE, _make("demo_faults", "ResetAndStaleCommit"),
          "operator resets empty group billing; a stale analytics process commits "
          "remembered offsets (the demo's)"),
        S("auto-reset-rewind-3b", "rewind", THREE,
          _make("rewinds_out_of_range", "AutoResetOutOfRange", direction="rewind"),
          "committed offsets past the log end: the client resets to earliest and re-reads"),
        S("auto-reset-forward-3b", "rewind", THREE,
          _make("rewinds_out_of_range", "AutoResetOutOfRange", direction="forward"),
          "records deleted past a stopped member's committed offset: it resets forward, "
          "skips them and re-reads none (a reset, not a rewind)"),
        S("coordinator-failover-3b", "rewind_healthy", THREE,
          _make("rewinds", "CoordinatorFailover"),
          "kill -9 of a group's coordinator while it commits: no rewind"),
        # Before unclean-noloss: that one stops both of the demo's ledger replicas too (the
        # only brokers of three that may stop), and the ledger's election finding it leaves
        # open would hide this scenario's (same partition) for the rest of the session.
        S("unclean-rf2-3b", "unclean_election", THREE,
          _make("demo_faults", "LossyUncleanElection"),
          "RF 2 ledger: out-of-sync follower elected, leader-only records lost (the demo's)"),
        S("unclean-noloss-3b", "unclean_election", THREE, _make("unclean", "UncleanNoLoss"),
          "unclean election of a replica that had every record: not a data-loss page"),
        S("crash-restart-3b", "healthy", THREE,
          _make("healthy", "BrokerCrashRestart", broker=2),
          "kill -9 of broker 2, restarted 20 s later"),
        S("rolling-restart-3b", "healthy", THREE, _make("healthy", "RollingRestart"),
          "controlled restart of every broker in turn"),
        S("bursty-3b", "healthy", THREE, _make("healthy", "BurstyLoad"),
          "bursts of 800 messages/s for 3 s every 10 s"),
        S("topic-churn-3b", "healthy", THREE, _make("healthy", "TopicChurn"),
          "five topics created, written to for 5 s and deleted, one after another"),
        S("throttled-cleaner-3b", "compaction", THREE,
          _make("demo_faults", "ThrottledCleaner", broker=3),
          "broker 3's log cleaner I/O throttled while customers is updated (the demo's)"),
        # After the scenarios above, so that those run on the cluster as before.
        S("offsets-deleted-3b", "rewind", THREE, _make("vanished_offsets", "OffsetsDeleted"),
          "operator deletes a stopped group 20 s behind (DeleteGroups, kafka-consumer-groups "
          "--delete; KIP-496); it restarts at earliest and re-reads everything"),
        S("reset-to-datetime-3b", "rewind", THREE,
          _make("rewinds", "OperatorResetEmptyGroup", mode="datetime", amount=60),
          "operator resets an empty group to the offsets of 60 s ago "
          "(kafka-consumer-groups --reset-offsets --to-datetime)"),
        S("partition-increase-3b", "healthy", THREE, _make("admin_ops", "PartitionIncrease"),
          "a live topic raised from 3 to 6 partitions while written and read "
          "(kafka-topics --alter --partitions; KAFKA-12261)"),
        S("producer-churn-3b", "healthy", THREE, _make("producer_churn", "ProducerChurn"),
          "4 short-lived idempotent producers a second for 60 s, each InitProducerId, write, "
          "close (KIP-936)"),
        # --- 5 brokers, three combined controllers ----------------------------------------
        S("freeze-short-5b", "slow_broker", FIVE,
          _make("demo_faults", "FrozenBroker", broker=2, freeze_s=0.7, thaw_s=0.3),
          "broker 2 of 5 frozen 0.7 s of every 1 s"),
        S("delayed-broker-5b", "slow_broker", FIVE,
          _make("delayed_broker", "DelayedBroker", broker=2, delay_ms=250.0),
          "every byte to and from broker 2 delayed 250 ms by a TCP proxy"),
        S("unclean-rf3-5b", "unclean_election", FIVE, _make("unclean", "UncleanElection"),
          "RF 3 ledger3: the stale replica elected after the two in sync stop; records lost"),
        S("controller-failover-5b", "healthy", FIVE, _make("healthy", "ControllerFailover"),
          "kill -9 of the active KRaft controller of three"),
        S("rebalances-5b", "healthy", FIVE, _make("healthy", "Rebalances"),
          "members join and leave group billing every ~10 s for a minute"),
        S("cleaner-stopped-5b", "compaction", FIVE, _make("compaction", "CleanerStopped"),
          "a corrupt batch in a follower's segment: its cleaner marks the partition "
          "uncleanable"),
        S("starved-handlers-5b", "slow_broker", FIVE,
          _make("starved_handlers", "StarvedRequestHandlers", broker=1),
          "broker 1's num.io.threads cut to 1 at runtime while it recompresses a load its "
          "topic wants at gzip level 9: slow in its own request queue (dynamic broker "
          "config; KAFKA-14694, KIP-390)"),
        S("unclean-by-config-5b", "unclean_election", FIVE,
          _make("forced_elections", "UncleanEnabledByOperator"),
          "offline RF 2 partition: operator sets unclean.leader.election.enable=true on its "
          "topic; the stale replica leads, leader-only records lost (KAFKA-12670)"),
        S("reassignment-under-load-5b", "healthy", FIVE,
          _make("admin_ops", "ReassignmentUnderLoad"),
          "all 12 partitions of a filled topic reassigned at once, unthrottled, under load: "
          "every broker copies (KIP-455)"),
        S("decommission-5b", "healthy", FIVE, _make("admin_ops", "BrokerDecommission", broker=1),
          "broker 1's replicas moved away under a 10 MB/s replication throttle, then it stops "
          "(KIP-73; Kafka docs, decommissioning brokers)"),
        S("cleaner-disabled-5b", "compaction", FIVE,
          _make("cleaning_blocked", "CleanerDisabled", broker=1),
          "broker 1 restarted with log.cleaner.enable=false while a compacted topic is "
          "updated: its replica grows apart, no cleaner metric (KAFKA-2988, KAFKA-13610)"),
        # --- 5 brokers, three combined controllers, the base workload alone ----------------
        S("freeze-short-quiet-5b", "slow_broker", FIVE_QUIET,
          _make("demo_faults", "FrozenBroker", broker=2, freeze_s=0.7, thaw_s=0.3),
          "broker 2 of 5 frozen 0.7 s of every 1 s on a quiet cluster (too few requests a "
          "window to judge one alone)"),
        S("delayed-broker-quiet-5b", "slow_broker", FIVE_QUIET,
          _make("delayed_broker", "DelayedBroker", broker=2, delay_ms=250.0),
          "every byte to and from broker 2 delayed 250 ms by a TCP proxy, on a quiet cluster"),
        S("key-space-growth-5b", "compaction", FIVE_QUIET,
          _make("compaction", "GrowingCompactedPartition", segment_ms=10_000,
                visible_after_s=180),
          "a compacted topic written with keys that never repeat: cleaned every time its "
          "size doubles, and it keeps growing (2-minute growth window)"),
        S("open-transaction-5b", "compaction", FIVE_QUIET,
          _make("cleaning_blocked", "OpenTransaction"),
          "a transaction left open on a compacted topic: its last stable offset stops and the "
          "cleaner never passes it (KIP-664, KAFKA-12671)"),
        # --- 3 brokers apart from one dedicated controller --------------------------------
        S("unclean-rf3-dc", "unclean_election", DEDICATED, _make("unclean", "UncleanElection"),
          "RF 3 ledger3, quorum on its own node: the stale replica elected after the two in "
          "sync stop; records lost"),
        S("rolling-restart-dc", "healthy", DEDICATED, _make("healthy", "RollingRestart"),
          "controlled restart of the three brokers, then the dedicated controller"),
        S("crash-rf1-dc", "unclean_election", DEDICATED, _make("unclean", "SoleReplicaCrash"),
          "kill -9 of the broker holding every replica of an RF 1 topic written with acks=1, "
          "restarted 20 s later: the controller logs its return as unclean, nothing is lost"),
        S("forced-unclean-dc", "unclean_election", DEDICATED,
          _make("forced_elections", "ForcedUncleanElection"),
          "offline RF 2 partition: operator forces an unclean election (ElectLeaders UNCLEAN, "
          "KIP-460); the stale replica leads, leader-only records lost"),
        # --- 3 brokers, one combined controller, set apart (THREE_APART) -------------------
        S("offsets-expired-3b", "rewind", THREE_APART, _make("vanished_offsets", "OffsetsExpired"),
          "a stopped group's offsets expire (offsets.retention.minutes=1; KIP-211, KAFKA-4682); "
          "it restarts at earliest and re-reads everything"),
        S("follower-fetch-delay-3b", "slow_broker", THREE_APART,
          _make("replication_delay", "DelayedFollowerFetches", broker=1),
          "broker 1's fetches from its leaders delayed 300 ms each way, its clients' path "
          "untouched: the slow follower (KIP-736, KAFKA-6477)"),
    ]


def by_name(names: list[str] | None) -> list[Scenario]:
    scenarios = catalog()
    if not names:
        return scenarios
    known = {s.name for s in scenarios}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown scenario(s) {', '.join(unknown)}; see `kmon matrix list`")
    return [s for s in scenarios if s.name in names]
