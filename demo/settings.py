"""The demo's timings and the configuration it runs under (its own cluster and lake)."""

from __future__ import annotations

from dataclasses import dataclass

from kmon.config import Config

DEMO_CLUSTER = "demo"


@dataclass(frozen=True)
class DemoSettings:
    warmup_s: float = 150.0          # healthy period before the first fault
    catch_up_s: float = 240.0        # after it, most time to wait for silver to keep up
    detect_timeout_s: float = 300.0  # per fault
    settle_s: float = 20.0           # after a fault is healed, before the next
    effects_wait_s: float = 90.0     # after a detection, most time to wait for its effects
    clear_wait_s: float = 120.0      # before a fault, most time to wait for open findings
                                     # that would show it to resolve
    exporter_port: int = 9464
    rate_per_s: float = 40.0         # messages/s per workload producer
    client_stats: bool = False       # the workload's clients ship librdkafka statistics


SHORT = DemoSettings(warmup_s=90.0, detect_timeout_s=240.0, settle_s=5.0)


def demo_config(config: Config) -> Config:
    """The demo's cluster and lake: its own names and folders, broker settings the faults
    need, and a pipeline trimmed for one machine (no bronze copy: the landing files are
    the raw copy)."""
    from demo.faults.unclean_election import BROKER_CONFIG

    root = config.work_dir / "demo"
    brokers = {**BROKER_CONFIG, "log.cleaner.backoff.ms": "1000",
               **config.local_cluster.extra_broker_config}
    return config.with_overrides(
        # One KRaft controller (node 3, a broker too), as a fleet runs its quorum apart
        # from the brokers it watches: the unclean election stops brokers 1 and 2, which
        # as controllers too took the quorum down with them, and the election waited for
        # the quorum's return as well as for the stale follower (11, 16 and 30 s after
        # the restart in the three runs timed; 4-20 s with node 3 as the one controller).
        local_cluster={"name": DEMO_CLUSTER, "brokers": 3, "controllers": 1,
                       "extra_broker_config": brokers},
        spark={"storage_root": str(root / "lake")},
        # The default triggers (silver 10 s, detectors 20 s). Two cores hold three
        # brokers, the workload, the agents and Spark: no bronze copy.
        pipeline={"bronze_tables": False},
        # Faults follow each other within minutes: a finding left open by one (a cleaner
        # frozen with its broker) must resolve before the next fault of its kind, or that
        # fault's finding is an update of the old one (the demo waits, clear_wait_s).
        findings={"resolve_after_s": 60.0},
        # The brokers' cleaners look for work every second (log.cleaner.backoff.ms above),
        # so a second without a look already means a pass is running.
        compaction_lag={"cleaner_backoff_s": int(brokers["log.cleaner.backoff.ms"]) / 1000},
        remediation={"enabled_actions": ["move_leadership", "restore_group_offsets",
                                         "page_human"], "dry_run": True})
