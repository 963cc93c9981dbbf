"""Gold: per cluster / broker / API / window stage percentiles from silver.request_stages.

A streaming aggregation over event time (``ts``) with a watermark that bounds its state:
for each window it keeps the request count and p50/p99/p999 of every stage
(`percentile_approx`, relative error about 1/accuracy), and emits the window once the
watermark passes its end. Quorum traffic on the controller listener is left out: it is
not client traffic.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.lake import Lake

STAGES = ("total_ms", "request_queue_ms", "local_ms", "remote_ms", "throttle_ms",
          "response_queue_ms", "send_ms")
QUANTILES = (("p50", 0.5), ("p99", 0.99), ("p999", 0.999))
PERCENTILE_ACCURACY = 10_000


def stage_percentiles(silver: DataFrame, window: str = "1 minute",
                      watermark: str = "2 minutes") -> DataFrame:
    """Windowed stage percentiles (works on a batch or a streaming DataFrame)."""
    qs = F.array(*[F.lit(q) for _, q in QUANTILES])
    aggs = [F.count(F.lit(1)).alias("requests")]
    aggs += [F.percentile_approx(s, qs, PERCENTILE_ACCURACY).alias(f"_{s}") for s in STAGES]
    if silver.isStreaming:
        silver = silver.withWatermark("ts", watermark)
    agg = (silver.where(~F.coalesce(F.col("is_controller_traffic"), F.lit(False)))
           .groupBy(F.window("ts", window).alias("w"), "cluster", "broker", "api")
           .agg(*aggs))
    cols = [F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"),
            "cluster", "broker", "api", "requests"]
    for s in STAGES:
        name = s[:-3]
        cols += [F.col(f"_{s}")[i].alias(f"{name}_{label}_ms") for i, (label, _) in enumerate(QUANTILES)]
    return agg.select(*cols)


def start_gold_stage_percentiles(spark: SparkSession, lake: Lake, window: str = "1 minute",
                                 watermark: str = "2 minutes", table: str = "request_stages_1m",
                                 trigger: dict | None = None):
    silver = spark.readStream.format("delta").load(lake.table("silver", "request_stages"))
    out = stage_percentiles(silver, window, watermark)
    writer = (out.writeStream.format("delta").queryName(f"gold_{table}")
              .option("checkpointLocation", lake.checkpoint(f"gold_{table}"))
              .outputMode("append"))
    return writer.trigger(**(trigger or {"processingTime": "10 seconds"})).start(
        lake.table("gold", table))
