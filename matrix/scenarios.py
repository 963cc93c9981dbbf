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
        return f"{self.brokers} brokers, {ctl}" + (f", {self.workload}" if self.workload else "")


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
        # --- 3 brokers apart from one dedicated controller --------------------------------
        S("unclean-rf3-dc", "unclean_election", DEDICATED, _make("unclean", "UncleanElection"),
          "RF 3 ledger3, quorum on its own node: the stale replica elected after the two in "
          "sync stop; records lost"),
        S("rolling-restart-dc", "healthy", DEDICATED, _make("healthy", "RollingRestart"),
          "controlled restart of the three brokers, then the dedicated controller"),
        S("crash-rf1-dc", "unclean_election", DEDICATED, _make("unclean", "SoleReplicaCrash"),
          "kill -9 of the broker holding every replica of an RF 1 topic written with acks=1, "
          "restarted 20 s later: the controller logs its return as unclean, nothing is lost"),
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
