"""The slow-link rule's client side: the producers' round trips (`ClientRttWindow`,
from silver.client_stats; the brokers' side, `ProducerServerWindow`, is
evaluation/inputs/request_windows.py `read_window_producer_times`).

Per window/client/broker, the highest rtt p99 of the producers' statistics documents in
the window, and the rtt p50 of the latest of them (scope broker; librdkafka's rtt window
covers the statistics interval before the document, and a window of no requests has p99
0: left out here). The median is the latest one, not the highest, because a slow path is
a state and a backlog is an episode: a path that delays every round trip still does at
the window's end, while a burst of requests queued behind each other on a connection
(a broker restarting, a controller moving) raises one document's median and is gone by
the next; the highest median would call that burst a slow link.
Consumers are not read: the rule does not judge them by rtt
(detectors/slow_client/links.py). The windows are the stage windows' epoch-aligned
grid, so a client's row meets its brokers' Produce rows. Few rows: one per producer and
broker a window.
"""

from __future__ import annotations

from detectors.slow_broker import SlowBrokerSection
from detectors.slow_client import ClientRttWindow
from infra.lake_sql import LakeSql, range_sql
from evaluation.inputs.tables import TimeRange, sorted_rows


def read_client_rtts(sql: LakeSql, config: SlowBrokerSection,
                     r: TimeRange) -> list[ClientRttWindow]:
    ds = sql.dataset("silver", "client_stats", start_ms=r.start_ms, end_ms=r.end_ms)
    if ds is None:
        return []
    where, params = range_sql(r.start_ms, r.end_ms)
    w = int(config.window_ms)
    rows = sql.rows(
        f"SELECT cluster, ts_ms - ts_ms % {w} AS window_start_ms, client_id, type, node_id, "
        "max(rtt_p99_ms) AS rtt_p99_ms, arg_max(rtt_p50_ms, ts_ms) AS rtt_p50_ms FROM t "
        f"WHERE {where} AND scope = 'broker' AND type = 'producer' AND rtt_p99_ms > 0 "
        "AND client_id IS NOT NULL AND node_id IS NOT NULL "
        "GROUP BY cluster, window_start_ms, client_id, type, node_id", params, t=ds)
    return [ClientRttWindow(cluster=x["cluster"], window_start_ms=int(x["window_start_ms"]),
                            client_id=x["client_id"], client_type=x["type"],
                            broker=int(x["node_id"]), rtt_p99_ms=float(x["rtt_p99_ms"]),
                            rtt_p50_ms=None if x["rtt_p50_ms"] is None
                            else float(x["rtt_p50_ms"]))
            for x in sorted_rows(rows, ("cluster", "window_start_ms", "client_id", "node_id"))]
