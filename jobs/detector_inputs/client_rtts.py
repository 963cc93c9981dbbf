"""The slow-link rule's `ClientRttWindow` input, from silver.client_stats.

Per window/client/broker, the highest rtt p99 of the producers' statistics documents in
the window (scope broker; librdkafka's rtt window covers the statistics interval before
the document, and a window of no requests has p99 0: left out here). Consumers are not
read: the rule does not judge them by rtt (detectors/slow_broker/client_links.py). The
windows are the stage windows' epoch-aligned grid, so a client's row meets its brokers'
Produce rows. Few rows: one per producer and broker a window.
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from detectors.slow_broker import ClientRttWindow, SlowBrokerSection
from infra.lake import Lake
from jobs.detector_inputs.slow_broker import _window_start
from jobs.detector_inputs.tables import TimeRange, silver_range, sorted_rows, table


def read_client_rtts(spark: SparkSession, lake: Lake, config: SlowBrokerSection,
                     r: TimeRange) -> list[ClientRttWindow]:
    df = table(spark, lake, "silver", "client_stats")
    if df is None:
        return []
    rows = (silver_range(df, r)
            .where((F.col("scope") == "broker") & (F.col("type") == "producer")
                   & (F.col("rtt_p99_ms") > 0) & F.col("client_id").isNotNull()
                   & F.col("node_id").isNotNull())
            .withColumn("window_start_ms", _window_start(config.window_ms))
            .groupBy("cluster", "window_start_ms", "client_id", "type", "node_id")
            .agg(F.max("rtt_p99_ms").alias("rtt_p99_ms"))
            .collect())
    return [ClientRttWindow(cluster=x["cluster"], window_start_ms=int(x["window_start_ms"]),
                            client_id=x["client_id"], client_type=x["type"],
                            broker=int(x["node_id"]), rtt_p99_ms=float(x["rtt_p99_ms"]))
            for x in sorted_rows(rows, ("cluster", "window_start_ms", "client_id", "node_id"))]
