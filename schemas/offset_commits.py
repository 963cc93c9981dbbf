"""silver.offset_commits: every committed offset of every group, from __consumer_offsets.

Produced by ingest/consumer_offsets.py. One row per offset commit record (tombstones
included: a deleted group or expired offset), with the record's coordinates in
__consumer_offsets so the job can order commits exactly and detect rewinds.
"""

from __future__ import annotations

from pyspark.sql.types import (BooleanType, IntegerType, LongType, StringType, StructField,
                               StructType)

from schemas.plausible import MAX_TS_MS, MIN_TS_MS, Bound, checks, event_time
from schemas.table import EVENT_TIME, SHARED_COLUMNS, with_event_time

SCHEMA = StructType([
    StructField("cluster", StringType()),
    StructField("ts_ms", LongType()),
    StructField("group_id", StringType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("leader_epoch", IntegerType()),
    StructField("metadata", StringType()),
    StructField("commit_ts_ms", LongType()),
    StructField("expire_ts_ms", LongType()),
    StructField("topic_id", StringType()),
    StructField("key_version", IntegerType()),
    StructField("value_version", IntegerType()),
    StructField("is_tombstone", BooleanType()),
    StructField("source_partition", IntegerType()),
    StructField("source_offset", LongType()),
])

DERIVED = dict(EVENT_TIME)
SILVER_SCHEMA = with_event_time(SCHEMA)

REQUIRED = ("cluster", "ts_ms", "group_id", "topic", "partition", "is_tombstone")

CHECKS = {
    "negative_partition": "partition >= 0",
    "missing_offset": "is_tombstone OR offset IS NOT NULL",
    **checks(event_time()),
    # -1 is Kafka's "no offset"; the coordinator stores what a client sends, and a client
    # that speaks the protocol itself can send it. Below that nothing means anything.
    "negative_offset": "is_tombstone OR offset >= -1",
    # The coordinator stamps every commit with its own clock.
    "implausible_commit_time": f"is_tombstone OR commit_ts_ms BETWEEN {MIN_TS_MS} AND {MAX_TS_MS}",
    # The parser stores the "none" of these (-1) as null.
    **checks(Bound("negative_epoch", ("leader_epoch",), low=0),
             Bound("negative_time", ("expire_ts_ms",), low=0),
             Bound("negative_source", ("source_partition", "source_offset"), low=0)),
    "unknown_key_version": "key_version IN (0, 1)",
    "unknown_value_version": "value_version IS NULL OR value_version BETWEEN 0 AND 4",
}

COLUMNS = {
    "cluster": SHARED_COLUMNS["cluster"],
    "ts_ms": "Timestamp of the __consumer_offsets record (commit time for commits), epoch ms UTC",
    "group_id": "Consumer group",
    "topic": "Topic the offset is for",
    "partition": "Partition the offset is for",
    "offset": "Committed offset: the next offset the group will read (null for a tombstone)",
    "leader_epoch": "Leader epoch of the last consumed record (null if unknown or -1)",
    "metadata": "Metadata string the client committed with the offset",
    "commit_ts_ms": "Commit time the coordinator recorded, epoch ms",
    "expire_ts_ms": "Expiry time (value version 1 only), epoch ms",
    "topic_id": "Topic id (value version 4 tagged field, Kafka 4.x)",
    "key_version": "Key version (0 or 1 for offset commits)",
    "value_version": "Value version 0..4 (null for a tombstone)",
    "is_tombstone": "The record deletes the group's offset for this partition",
    "source_partition": "Partition of __consumer_offsets the record came from",
    "source_offset": "Offset of the record in that partition",
    "ts": SHARED_COLUMNS["ts"],
}
