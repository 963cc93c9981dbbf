"""Bronze: each telemetry stream as it arrived, raw value plus where it came from.

The raw source of a group of streams is one streaming source: one Kafka source subscribed
to the group's telemetry topics (``<prefix><stream>``), or one file source over the
group's landing folders (``landing/<stream>/``). Each row carries the stream it belongs
to (``stream``, from the topic or the folder). The silver query (jobs/silver.py) reads it,
appends each stream's rows to ``bronze.<stream>`` (when the pipeline keeps bronze
tables) and its typed rows to ``silver.<stream>`` in the same micro-batch, idempotently
per batch: a restart replays a batch from the same source offsets and writes nothing twice.

One source per group, not per stream: every streaming query has a fixed cost per
micro-batch (planning, offset and commit logs, state store), paid once per group.
"""

from __future__ import annotations

import re

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from infra.lake import Lake

BRONZE_COLUMNS = ("value", "source", "source_file", "kafka_topic", "kafka_partition",
                  "kafka_offset", "kafka_ts", "ingest_ts", "ingest_date")
STREAM = "stream"


def landing_glob(lake: Lake, streams: list[str]) -> str:
    """The landing folders of `streams` as one Hadoop glob."""
    names = sorted(streams)
    if not names:
        raise ValueError("no streams to read")
    return lake.landing(names[0] if len(names) == 1 else "{" + ",".join(names) + "}")


def from_landing(spark: SparkSession, lake: Lake, streams: list[str],
                 max_files_per_trigger: int = 1000) -> DataFrame:
    """The JSON-lines files the agents wrote under landing/<stream>/, one row per line."""
    folder = F.regexp_extract(F.col("_metadata.file_path"), r"/landing/([^/]+)/[^/]+$", 1)
    return (spark.readStream.format("text")
            .option("maxFilesPerTrigger", max_files_per_trigger)
            .load(landing_glob(lake, streams))
            .select(F.col("value"),
                    F.lit("landing").alias("source"),
                    F.col("_metadata.file_path").alias("source_file"),
                    F.lit(None).cast("string").alias("kafka_topic"),
                    F.lit(None).cast("int").alias("kafka_partition"),
                    F.lit(None).cast("long").alias("kafka_offset"),
                    F.lit(None).cast("timestamp").alias("kafka_ts"),
                    folder.alias(STREAM)))


def topic_pattern(topic_prefix: str, streams: list[str]) -> str:
    return "^" + re.escape(topic_prefix) + "(" + "|".join(
        re.escape(s) for s in sorted(streams)) + ")$"


def from_kafka(spark: SparkSession, kafka_options: dict[str, str], topic_prefix: str,
               streams: list[str], max_offsets_per_trigger: int = 2_000_000) -> DataFrame:
    # A pattern, not `subscribe`: a telemetry topic nobody has written yet (no quarantine
    # records so far, say) does not exist, and `subscribe` fails the query on it; the
    # pattern picks the topic up when it appears.
    reader = (spark.readStream.format("kafka")
              .option("subscribePattern", topic_pattern(topic_prefix, streams))
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
                    F.col("timestamp").alias("kafka_ts"),
                    F.expr(f"substring(topic, {len(topic_prefix) + 1})").alias(STREAM)))


def with_ingest_time(raw: DataFrame) -> DataFrame:
    """A raw source's rows in the bronze shape (plus `stream`): stamped with the time they
    were read."""
    return (raw.withColumn("ingest_ts", F.current_timestamp())
               .withColumn("ingest_date", F.to_date("ingest_ts"))
               .select(*BRONZE_COLUMNS, STREAM))
