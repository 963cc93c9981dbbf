"""silver.quarantine: telemetry no parser or validation could trust, kept with the reason.

Written by the edge agents (from `ingest.malformed.Malformed.to_quarantine_record`) and by
silver jobs for rows that fail validation. Nothing is dropped silently: a bad line, record
or row lands here, its raw text bounded, with where it came from so it can be replayed.
"""

from __future__ import annotations

from pyspark.sql.types import (BooleanType, IntegerType, LongType, StringType, StructField,
                               StructType, TimestampType)

from schemas.table import SHARED_COLUMNS

SCHEMA = StructType([
    StructField("cluster", StringType()),
    StructField("broker", IntegerType()),
    StructField("source", StringType()),
    StructField("reason", StringType()),
    StructField("raw", StringType()),
    StructField("raw_encoding", StringType()),
    StructField("raw_bytes_len", LongType()),
    StructField("raw_truncated", BooleanType()),
    StructField("ts_ms", LongType()),
    StructField("ingest_ts_ms", LongType()),
    StructField("origin", StringType()),
    StructField("source_partition", IntegerType()),
    StructField("source_offset", LongType()),
])

# Ingest time is always known (the event time may not be), so it is the table's timestamp.
DERIVED = {"ingest_ts": "timestamp_millis(ingest_ts_ms)"}
SILVER_SCHEMA = StructType([*SCHEMA.fields, StructField("ingest_ts", TimestampType())])

# The reason of a row whose event time is further ahead of the clock that read it than
# MAX_EVENT_AHEAD_S: a clock that runs ahead (or one wrong line) must not move any window or
# watermark, or every honest row after it would look late. The edge agents compare with
# their host's clock, silver with the ingest time ([pipeline] max_event_ahead_s). A minute:
# a row's lead is normally a few seconds below zero, and the gold queries' watermarks (one
# per query, Spark's) must not be moved ahead by more than their lateness bounds.
FUTURE_EVENT_TIME = "future_event_time"
MAX_EVENT_AHEAD_S = 60

# cluster is not required: a line that is not even JSON names no cluster.
REQUIRED = ("source", "reason", "raw", "raw_bytes_len", "ingest_ts_ms")

COLUMNS = {
    "cluster": SHARED_COLUMNS["cluster"],
    "broker": "Broker the input came from, when known",
    "source": "Which parser or job rejected it: request_log, broker_log, client_log, "
              "consumer_offsets, client_stats, jmx, or silver.<stream> for a row that failed "
              "the silver table's validation (or arrived later than the watermark allows)",
    "reason": "Short machine reason, e.g. truncated_json, missing_field:totalTimeMs, "
              "negative_time:local_ms, unknown_api, oversize_line, not_utf8, not_json, "
              "late_beyond_watermark, future_event_time",
    "raw": "The input as text, cut to 16 KB (hex for binary input that is not UTF-8)",
    "raw_encoding": "utf8 or hex",
    "raw_bytes_len": "Size of the whole input in bytes",
    "raw_truncated": "raw holds only the first 16 KB",
    "ts_ms": "Event time, when the parser got that far (else null)",
    "ingest_ts_ms": "When the agent or job quarantined it, epoch ms UTC",
    "origin": "Where it was read: a file path or a topic name",
    "source_partition": "Kafka partition it was read from (null for files)",
    "source_offset": "Kafka offset, or line number in the file",
    "ingest_ts": "ingest_ts_ms as a timestamp (derived)",
}
