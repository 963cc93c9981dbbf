"""Bronze: each telemetry stream as it arrived, raw value plus where it came from.

One Structured Streaming query per stream, from a telemetry topic on the monitoring Kafka
or from the embedded landing folder, into ``bronze.<stream>``. The Delta sink with a
checkpoint is exactly-once across restarts: a micro-batch that was written is never
written again, one that was not is replayed from the same source offsets.
"""

from __future__ import annotations

import re

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.lake import Lake

BRONZE_COLUMNS = ("value", "source", "source_file", "kafka_topic", "kafka_partition",
                  "kafka_offset", "kafka_ts", "ingest_ts", "ingest_date")


def from_landing(spark: SparkSession, lake: Lake, stream: str,
                 max_files_per_trigger: int = 1000) -> DataFrame:
    return (spark.readStream.format("text")
            .option("maxFilesPerTrigger", max_files_per_trigger)
            .load(lake.landing(stream))
            .select(F.col("value"),
                    F.lit("landing").alias("source"),
                    F.col("_metadata.file_path").alias("source_file"),
                    F.lit(None).cast("string").alias("kafka_topic"),
                    F.lit(None).cast("int").alias("kafka_partition"),
                    F.lit(None).cast("long").alias("kafka_offset"),
                    F.lit(None).cast("timestamp").alias("kafka_ts")))


def from_kafka(spark: SparkSession, kafka_options: dict[str, str], topic: str,
               max_offsets_per_trigger: int = 2_000_000) -> DataFrame:
    # A pattern, not `subscribe`: a telemetry topic nobody has written yet (no quarantine
    # records so far, say) does not exist, and `subscribe` fails the query on it; the
    # pattern picks the topic up when it appears.
    reader = (spark.readStream.format("kafka")
              .option("subscribePattern", "^" + re.escape(topic) + "$")
              .option("startingOffsets", "earliest")
              .option("failOnDataLoss", "false")
              .option("maxOffsetsPerTrigger", max_offsets_per_trigger))
    for k, v in kafka_options.items():
        reader = reader.option(k, v)
    return (reader.load()
            .select(F.col("value").cast("string").alias("value"),
                    F.lit("kafka").alias("source"),
                    F.lit(None).cast("string").alias("source_file"),
                    F.col("topic").alias("kafka_topic"),
                    F.col("partition").alias("kafka_partition"),
                    F.col("offset").alias("kafka_offset"),
                    F.col("timestamp").alias("kafka_ts")))


def with_ingest_time(raw: DataFrame) -> DataFrame:
    """A raw source's rows in the bronze shape: stamped with the time they were read."""
    return (raw.withColumn("ingest_ts", F.current_timestamp())
               .withColumn("ingest_date", F.to_date("ingest_ts"))
               .select(*BRONZE_COLUMNS))


def start_bronze(raw: DataFrame, lake: Lake, stream: str, trigger: dict | None = None):
    """Append the raw stream to bronze.<stream>, partitioned by ingest date."""
    out = with_ingest_time(raw)
    writer = (out.writeStream.format("delta")
              .queryName(f"bronze_{stream}")
              .option("checkpointLocation", lake.checkpoint(f"bronze_{stream}"))
              .partitionBy("ingest_date")
              .outputMode("append"))
    writer = writer.trigger(**(trigger or {"processingTime": "5 seconds"}))
    return writer.start(lake.table("bronze", stream))
