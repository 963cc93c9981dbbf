"""Broker drill-down: one broker's request stages, threads, queues and traffic against its peers.

Opened from the fleet overview when a broker stands out (or from a slow_broker finding).
Every panel draws the chosen broker next to the rest of its cluster (the peers' average
and worst), because a stage that is slow everywhere is a fleet-wide or client problem,
while a stage slow on one broker is that broker's: RequestQueue and handler idle point to
CPU or handler saturation, Local to the disk, Remote on Produce to a slow follower (check
the peers' under-replicated partitions), ResponseQueue and network idle to the network
threads, ResponseSend to the network or a client that reads slowly.
"""

from __future__ import annotations

from typing import Any, Callable

from dashboards import metric_names as m
from dashboards.layout import KmonDashboard
from dashboards.panels import OK_UNLESS_ABOVE_ZERO, query, stat_panel, timeseries_panel
from dashboards.variables import BROKERS, CLUSTER, PEERS, REQUEST_VAR, request_variable

UID = "kmon-broker-drilldown"
TITLE = "kmon / Broker drill-down"
REQUESTS = f'request=~"${REQUEST_VAR}"'


def _versus_peers(series: Callable[[str], str], by: str, legend: str,
                  peer_aggs: tuple[str, ...] = ("avg", "max")) -> list:
    """The chosen broker's `series`, then each aggregate of the same series over its peers.

    `series(selector)` is a PromQL expression over the series matching `selector`.
    """
    by_labels = f"cluster, {by}" if by else "cluster"
    suffix = f" {legend}" if legend else ""
    out = [query(f"max by (broker, {by_labels}) ({series(BROKERS)})",
                 f"broker {{{{broker}}}}{suffix}")]
    out += [query(f"{agg} by ({by_labels}) ({series(PEERS)})", f"peers {agg}{suffix}")
            for agg in peer_aggs]
    return out


def _stage_p99(stage: m.Stage) -> Callable[[str], str]:
    return lambda sel: f'{stage.metric}{{{sel}, {REQUESTS}, quantile="0.99"}}'


def _rate(metric: str, extra: str = "") -> Callable[[str], str]:
    return lambda sel: f"rate({metric}{{{sel}{extra}}}[$__rate_interval])"


def _gauge(metric: str) -> Callable[[str], str]:
    return lambda sel: f"{metric}{{{sel}}}"


def build() -> dict[str, Any]:
    d = KmonDashboard(UID, TITLE, "One broker's request stages, threads, queues and traffic "
                      "against the other brokers of its cluster.", single_broker=True,
                      extra_variables=[request_variable()])

    d.row("At a glance")
    d.add(
        stat_panel("Produce TotalTime p99", "JMX p99 of Produce on this broker.",
                   [query(f'max({m.TOTAL.metric}{{{BROKERS}, request="Produce", '
                          f'quantile="0.99"}})')],
                   unit="ms", steps=((None, "green"), (300, "red"))),
        stat_panel("Fetch TotalTime p99", "Includes the purgatory wait (500 ms by default): "
                   "not slowness by itself.",
                   [query(f'max({m.TOTAL.metric}{{{BROKERS}, request="Fetch", '
                          f'quantile="0.99"}})')], unit="ms"),
        stat_panel("Under-replicated partitions", "Partitions this broker leads with a "
                   "shrunken ISR.",
                   [query(f"sum({m.UNDER_REPLICATED}{{{BROKERS}}})")],
                   steps=OK_UNLESS_ABOVE_ZERO),
        stat_panel("Open findings naming this broker", "slow_broker findings for this "
                   "broker (their evidence names the dominant stage and, for Remote time, the "
                   "follower to blame).",
                   [query(f'sum({m.FINDINGS_OPEN}{{{CLUSTER}, '
                          f'entity=~"broker:$broker"}})')],
                   steps=OK_UNLESS_ABOVE_ZERO),
    )

    d.row("Request stages p99 by request type: this broker against its peers")
    for stage in (m.TOTAL, *m.STAGES):
        d.add(timeseries_panel(
            f"{stage.label} time p99", f"{stage.label} time p99 per request type on this "
            "broker, with the average and worst of the other brokers of its cluster.",
            _versus_peers(_stage_p99(stage), "request", "{{request}}"),
            unit="ms", width=24 if stage is m.TOTAL else 12))

    d.row("Threads and queues")
    d.add(
        timeseries_panel("Request handler idle", "Share of time the request handler threads "
                         "are idle (one-minute rate). Near 0: handlers saturated, requests "
                         "wait in RequestQueue.",
                         _versus_peers(_gauge(m.HANDLER_IDLE), "", "", ("avg", "min")),
                         unit="percentunit", width=8),
        timeseries_panel("Network processor idle", "Share of time the network threads are "
                         "idle. Near 0: responses wait in ResponseQueue.",
                         _versus_peers(_gauge(m.NETWORK_IDLE), "", "", ("avg", "min")),
                         unit="percentunit", width=8),
        timeseries_panel("Request queue size", "Requests waiting for a handler thread.",
                         _versus_peers(_gauge(m.REQUEST_QUEUE_SIZE), "", ""), width=8),
    )

    d.row("Traffic")
    d.add(
        timeseries_panel("Bytes in", "Bytes produced to this broker per second (all topics).",
                         _versus_peers(_rate(m.BYTES_IN, ', topic=""'), "", ""),
                         unit="Bps", width=8),
        timeseries_panel("Bytes out", "Bytes fetched from this broker per second (all topics).",
                         _versus_peers(_rate(m.BYTES_OUT, ', topic=""'), "", ""),
                         unit="Bps", width=8),
        timeseries_panel("Requests per second by type", "Requests this broker completed per "
                         "second, per selected request type.",
                         [query(f"sum by (cluster, broker, request) "
                                f"({_rate(m.TOTAL.count, ', ' + REQUESTS)(BROKERS)})",
                                "{{request}}")],
                         unit="reqps", width=8),
    )
    return d.to_json()
