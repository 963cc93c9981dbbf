"""The slow-link rule's inputs: the producers' round trips (`ClientRttWindow`, from
silver.client_stats) and what the brokers took for their own Produce requests
(`ProducerServerWindow`, from silver.request_stages).

Round trips:

Per window/client/broker, the highest rtt p99 of the producers' statistics documents in
the window, and the rtt p50 of the latest of them (scope broker; librdkafka's rtt window
covers the statistics interval before the document, and a window of no requests has p99
0: left out here). The median is the latest one, not the highest, because a slow path is
a state and a backlog is an episode: a path that delays every round trip still does at
the window's end, while a burst of requests queued behind each other on a connection
(a broker restarting, a controller moving) raises one document's median and is gone by
the next; the highest median would call that burst a slow link.
Consumers are not read: the rule does not judge them by rtt
(detectors/slow_broker/client_links.py). The windows are the stage windows' epoch-aligned
grid, so a client's row meets its brokers' Produce rows. Few rows: one per producer and
broker a window.

Own requests: per window, broker and producer (the producers with round trips only), the
count and TotalTime p99 and p50 of its Produce requests, the broker's side of its round
trips, and the share of them that had waited in the socket (read within QUEUED_GAP_MS of
the broker finishing the request before on the same connection, remote_addr; none where
the address is not known): time the client's round trip holds and no TotalTime does. In
the request-log windows mode the agents count the same per client at the edge
(silver.client_send_windows, Produce rows): jobs/detector_inputs/request_windows.py
`read_window_producer_times`. A producer the edge folded into its window's "other" row
(not among the busiest, no slow send) has none there, and the rule takes the broker's TP99
for it (client_links.py).
"""

from __future__ import annotations

from typing import Iterable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from detectors.slow_broker import ClientRttWindow, ProducerServerWindow, SlowBrokerSection
from infra.lake import Lake
from infra.lake_sql import LakeSql, range_sql
from jobs.detector_inputs.slow_broker import _stages_in, _window_start, gap_after_previous
from jobs.detector_inputs.tables import TimeRange, sorted_rows
from schemas.client_send_windows import QUEUED_GAP_MS


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


def read_producer_times(spark: SparkSession, lake: Lake, config: SlowBrokerSection,
                        r: TimeRange, producers: Iterable[str],
                        stages: DataFrame | None = None) -> list[ProducerServerWindow]:
    """The given producers' own Produce requests per window (whole windows of the range),
    broker and client: how many, and their TotalTime p99. `stages`: silver.request_stages
    already read for (at least) the range; None reads it here."""
    wanted = sorted(set(producers))
    df = _stages_in(spark, lake, r, stages) if wanted else None
    if df is None:
        return []
    win = config.window_ms
    # The request before each one on its connection (any API: the broker reads one
    # request of a connection at a time), within the same window, so a window's share does
    # not depend on what else was read with it (the window cache reads new windows alone).
    gap = gap_after_previous("cluster", "broker", "client_id", "remote_addr", "window_start_ms")
    rows = (df.where(F.col("client_id").isin(*wanted))
            .withColumn("window_start_ms", _window_start(win))
            .where((F.col("window_start_ms") >= r.start_ms)
                   & (F.col("window_start_ms") + win <= r.end_ms))
            .withColumn("gap_ms", F.when(F.col("remote_addr").isNotNull(), gap))
            .where(F.col("api") == "Produce")
            .groupBy("cluster", "window_start_ms", "broker", "client_id")
            .agg(F.count(F.lit(1)).alias("requests"),
                 F.percentile_approx("total_ms", [0.5, 0.99], 10_000).alias("total_p"),
                 F.count("gap_ms").alias("followed"),
                 F.sum(F.when(F.col("gap_ms") <= QUEUED_GAP_MS, 1).otherwise(0))
                 .alias("queued"))
            .collect())
    return producer_windows_from(rows)


def producer_windows_from(rows: Iterable) -> list[ProducerServerWindow]:
    """Collected rows of (cluster, window_start_ms, broker, client_id, requests, total_p
    [p50, p99], followed, queued) as ProducerServerWindows, in window order; the windows
    mode's read (request_windows.py) gives the same columns."""
    return [ProducerServerWindow(cluster=x["cluster"], window_start_ms=int(x["window_start_ms"]),
                                 broker=int(x["broker"]), client_id=x["client_id"],
                                 requests=int(x["requests"]),
                                 total_p99_ms=float(x["total_p"][1] or 0.0),
                                 total_p50_ms=float(x["total_p"][0] or 0.0),
                                 queued_share=(x["queued"] / x["followed"] if x["followed"]
                                               else None))
            for x in sorted_rows(rows, ("cluster", "window_start_ms", "broker", "client_id"))]
