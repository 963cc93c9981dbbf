"""Fleet overview: what is wrong now, and which brokers are slow or unsafe.

The first dashboard an on-call engineer opens. Top: kmon's open findings by type and
severity (from the exporter). Then Produce and Fetch TotalTime p99 per broker, with the
slow-node threshold (300 ms, detectors' default) drawn, and the p99 of every stage on the
worst broker, which tells a server problem (RequestQueue, Local) from a replication one
(Remote on Produce) from a client one (ResponseSend). Last: partition safety (under-
replicated, offline, unclean elections).

The percentiles are the JMX exporter's Yammer histograms: smoothed over the last few
minutes and late. The request log's 10-s windows (silver.request_windows) count every
request, with 2 %-exact stage percentiles.
"""

from __future__ import annotations

from typing import Any

from dashboards import metric_names as m
from dashboards.layout import KmonDashboard
from dashboards.panels import (OK_UNLESS_ABOVE_ZERO, query, stat_panel, table_panel,
                               timeseries_panel)
from dashboards.variables import BROKERS, CLUSTER

UID = "kmon-fleet-overview"
TITLE = "kmon / Fleet overview"
SLOW_NODE_MS = 300  # detectors/slow_broker/config.py default threshold


def _p99(stage: m.Stage, request: str, selector: str = BROKERS) -> str:
    return f'{stage.metric}{{{selector}, request="{request}", quantile="0.99"}}'


def _total_p99_by_broker(request: str) -> str:
    return f"max by (cluster, broker) ({_p99(m.TOTAL, request)})"


def _stage_breakdown(request: str) -> list:
    """p99 of each stage on the worst selected broker (p99s do not add up to Total's p99)."""
    return [query(f"max by (cluster) ({_p99(stage, request)})", f"{{{{cluster}}}} {stage.label}")
            for stage in m.ALL_STAGES]


def build() -> dict[str, Any]:
    d = KmonDashboard(UID, TITLE, "Open kmon findings, request latency per broker and stage, "
                      "partition safety, across the selected clusters.")

    d.row("Open findings")
    d.add(
        stat_panel("Open findings", "Findings kmon's detectors hold open now.",
                   [query(f"sum({m.FINDINGS_OPEN_COUNT}{{{CLUSTER}}})")],
                   steps=OK_UNLESS_ABOVE_ZERO, width=6),
        stat_panel("Open findings by severity", "Critical: data lost or about to be; high: "
                   "users hurt now; warning: degraded; info: for the record.",
                   [query(f"sum by (severity) ({m.FINDINGS_OPEN_COUNT}{{{CLUSTER}}})",
                          "{{severity}}")],
                   steps=OK_UNLESS_ABOVE_ZERO, width=18),
        timeseries_panel("Open findings by type", "Open findings over time, per anomaly type.",
                         [query(f"sum by (type) ({m.FINDINGS_OPEN_COUNT}{{{CLUSTER}}})",
                                "{{type}}")], width=8),
        table_panel("Open findings, one per row", "One row per open finding; look the finding id up in "
                    "gold.anomalies for its evidence. Findings of one incident share an "
                    "incident id.",
                    [query(f"{m.FINDINGS_OPEN}{{{CLUSTER}}}", instant=True, table_format=True)],
                    hide=("Time", "Value", "__name__", "job", "instance"), width=16),
    )

    d.row("Request latency (JMX p99)")
    slow = ((None, "green"), (SLOW_NODE_MS, "red"))
    d.add(
        timeseries_panel("Produce TotalTime p99 by broker", "Time from a Produce request's "
                         f"arrival to its response sent. Above {SLOW_NODE_MS} ms the slow-broker "
                         "detector takes note. With acks=all, Remote time is the slowest "
                         "in-sync follower's.",
                         [query(_total_p99_by_broker("Produce"), "{{cluster}}/{{broker}}")],
                         unit="ms", steps=slow),
        timeseries_panel("Fetch TotalTime p99 by broker", "Fetch requests wait in purgatory "
                         "on purpose until data arrives or fetch.max.wait.ms / "
                         "replica.fetch.wait.max.ms (500 ms) runs out: near 500 ms on a quiet "
                         "cluster is healthy.",
                         [query(_total_p99_by_broker("Fetch"), "{{cluster}}/{{broker}}")],
                         unit="ms"),
        timeseries_panel("Produce stage breakdown p99 (worst broker)", "RequestQueue: waiting "
                         "for a handler thread; Local: leader work (disk); Remote: waiting for "
                         "followers (acks=all); Throttle: quota; ResponseQueue: waiting for a "
                         "network thread; ResponseSend: network or a slow client.",
                         _stage_breakdown("Produce"), unit="ms"),
        timeseries_panel("Fetch stage breakdown p99 (worst broker)", "Remote time here is "
                         "mostly the purgatory wait (see Fetch TotalTime).",
                         _stage_breakdown("Fetch"), unit="ms"),
    )

    d.row("Partition safety")
    d.add(
        stat_panel("Under-replicated partitions", "Partitions led by the selected brokers whose "
                   "ISR is smaller than their replica set.",
                   [query(f"sum({m.UNDER_REPLICATED}{{{BROKERS}}})")],
                   steps=OK_UNLESS_ABOVE_ZERO),
        stat_panel("Offline partitions", "Partitions without a leader (reported by the active "
                   "controller).",
                   [query(f"max by (cluster) ({m.OFFLINE_PARTITIONS}{{{CLUSTER}}})",
                          "{{cluster}}")],
                   steps=OK_UNLESS_ABOVE_ZERO),
        stat_panel("Unclean leader elections (time range)", "An out-of-sync replica became "
                   "leader: records past its end were lost. The unclean_election finding "
                   "names the partitions and the groups that read there.",
                   [query(f"sum(increase({m.UNCLEAN_ELECTIONS}{{{CLUSTER}}}[$__range]))",
                          "elections", instant=True),
                    query(f'sum({m.FINDINGS_OPEN_COUNT}{{{CLUSTER}, type="unclean_election"}})',
                          "open findings", instant=True)],
                   steps=OK_UNLESS_ABOVE_ZERO, width=12),
        timeseries_panel("Under-replicated partitions by broker", "A broker that keeps "
                         "partitions under-replicated is often the slow follower behind Produce "
                         "Remote time.",
                         [query(f"max by (cluster, broker) ({m.UNDER_REPLICATED}{{{BROKERS}}})",
                                "{{cluster}}/{{broker}}"),
                          query(f"max by (cluster) ({m.OFFLINE_PARTITIONS}{{{CLUSTER}}})",
                                "{{cluster}} offline")], width=24),
    )
    return d.to_json()
