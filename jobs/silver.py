"""Silver: typed rows from bronze, validated; every rejected row goes to quarantine.

For one stream, a streaming query reads ``bronze.<stream>``, decodes each value with the
stream's schema from schemas/ (`from_json`, no Python on the row path), drops repeats of
the same ``record_id`` (an agent re-sends after a crash) within a bounded watermark, and
in each micro-batch splits rows by the validation rules: rows that pass are appended to
``silver.<stream>``, the others to ``silver.quarantine`` with the first rule they broke
and the raw value. Both writes are idempotent per batch (Delta txnAppId/txnVersion), so
a restart that replays a batch writes nothing twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from jobs.lake import Lake

RAW_MAX_CHARS = 16 * 1024
QUARANTINE_TABLE = "quarantine"


@dataclass(frozen=True)
class Rule:
    """A row is valid for this rule when `valid_sql` is true (null counts as broken)."""
    name: str
    valid_sql: str


def rules_for(table: ModuleType, extra: tuple[Rule, ...] = ()) -> tuple[Rule, ...]:
    required = tuple(Rule(f"missing_field:{c}", f"{c} IS NOT NULL") for c in table.REQUIRED)
    return required + tuple(extra)


REQUEST_STAGE_RULES = tuple(
    Rule(f"negative_time:{c}", f"{c} >= 0") for c in
    ("total_ms", "request_queue_ms", "local_ms", "remote_ms", "throttle_ms",
     "response_queue_ms", "send_ms")) + (
    Rule("unknown_api", "api_key BETWEEN 0 AND 1000"),
)


def record_schema(table: ModuleType) -> StructType:
    return StructType([*table.SCHEMA.fields, StructField("record_id", StringType())])


def first_broken_rule(rules: tuple[Rule, ...]) -> Column:
    checks = [F.when(~F.coalesce(F.expr(r.valid_sql), F.lit(False)), F.lit(r.name)) for r in rules]
    return F.coalesce(*checks) if checks else F.lit(None).cast("string")


def decode(bronze: DataFrame, table: ModuleType) -> DataFrame:
    """Bronze rows -> the record's columns, plus the raw value and a dedupe key."""
    parsed = bronze.select(F.from_json("value", record_schema(table)).alias("r"), "value",
                           "ingest_ts", "source_file", "kafka_topic", "kafka_partition",
                           "kafka_offset")
    key = F.coalesce(F.col("r.record_id"),
                     F.sha2(F.concat_ws("|", "source_file", "kafka_topic",
                                        F.col("kafka_partition").cast("string"),
                                        F.col("kafka_offset").cast("string"), "value"), 256))
    return parsed.withColumn("dedupe_key", key)


def split_batch(batch: DataFrame, table: ModuleType, rules: tuple[Rule, ...],
                stream: str) -> tuple[DataFrame, DataFrame]:
    """(valid silver rows, quarantine rows) of one decoded micro-batch."""
    flat = batch.select("r.*", "value", "ingest_ts", "source_file", "kafka_topic",
                        "kafka_partition", "kafka_offset", F.col("r").isNull().alias("_unparsed"))
    reason = F.when(F.col("_unparsed"), F.lit("not_json")).otherwise(first_broken_rule(rules))
    flat = flat.withColumn("_reason", reason)
    derived = [F.expr(e).alias(c) for c, e in table.DERIVED.items()]
    good = (flat.where(F.col("_reason").isNull())
            .select(*[F.col(f.name) for f in table.SCHEMA.fields], *derived, "record_id"))
    bad = (flat.where(F.col("_reason").isNotNull())
           .select(F.get_json_object("value", "$.cluster").alias("cluster"),
                   F.lit(stream).alias("stream"),
                   F.col("_reason").alias("reason"),
                   F.substring("value", 1, RAW_MAX_CHARS).alias("raw"),
                   F.length("value").alias("raw_len"),
                   "record_id", "ingest_ts", "source_file", "kafka_topic", "kafka_partition",
                   "kafka_offset"))
    return good, bad


def _append(df: DataFrame, path: str, app_id: str, batch_id: int, partition_by=()) -> None:
    w = (df.write.format("delta").mode("append")
         .option("txnAppId", app_id).option("txnVersion", batch_id)
         .option("mergeSchema", "true"))
    if partition_by:
        w = w.partitionBy(*partition_by)
    w.save(path)


def start_silver(spark: SparkSession, lake: Lake, stream: str, table: ModuleType,
                 rules: tuple[Rule, ...], trigger: dict | None = None,
                 dedupe_window: str = "10 minutes"):
    bronze = spark.readStream.format("delta").load(lake.table("bronze", stream))
    decoded = (decode(bronze, table)
               .withWatermark("ingest_ts", dedupe_window)
               .dropDuplicatesWithinWatermark(["dedupe_key"]))
    silver_path = lake.table("silver", stream)
    quarantine_path = lake.table("silver", QUARANTINE_TABLE)

    def write_batch(batch: DataFrame, batch_id: int) -> None:
        batch = batch.persist()
        try:
            good, bad = split_batch(batch, table, rules, stream)
            good = good.withColumn("date", F.to_date("ts"))
            _append(good, silver_path, f"silver_{stream}", batch_id, ("date",))
            _append(bad, quarantine_path, f"silver_{stream}_quarantine", batch_id)
        finally:
            batch.unpersist()

    writer = (decoded.writeStream.queryName(f"silver_{stream}")
              .option("checkpointLocation", lake.checkpoint(f"silver_{stream}"))
              .foreachBatch(write_batch))
    return writer.trigger(**(trigger or {"processingTime": "5 seconds"})).start()
