"""silver.group_members: a classic consumer group's membership after every change.

Produced by ingest/offsets_agent.py from the GroupMetadata records of __consumer_offsets
(ingest/consumer_offsets.py `parse_group_record`): the coordinator writes one after each
rebalance and one with no members when the last member leaves. No polling: the rows are
as fresh as the coordinator's own state. The offset-rewind detector reads it to tell an
admin tool's commit (group empty) from a member's commit.
"""

from __future__ import annotations

from pyspark.sql.types import (ArrayType, BooleanType, IntegerType, LongType, StringType,
                               StructField, StructType)

from schemas.plausible import MAX_TS_MS, MIN_TS_MS, Bound, checks, event_time
from schemas.table import EVENT_TIME, SHARED_COLUMNS, with_event_time

SCHEMA = StructType([
    StructField("cluster", StringType()),
    StructField("ts_ms", LongType()),
    StructField("group_id", StringType()),
    StructField("protocol_type", StringType()),
    StructField("generation", IntegerType()),
    StructField("protocol", StringType()),
    StructField("leader", StringType()),
    StructField("member_count", IntegerType()),
    StructField("client_ids", ArrayType(StringType())),
    StructField("state_ts_ms", LongType()),
    StructField("value_version", IntegerType()),
    StructField("is_tombstone", BooleanType()),
    StructField("source_partition", IntegerType()),
    StructField("source_offset", LongType()),
])

DERIVED = dict(EVENT_TIME)
SILVER_SCHEMA = with_event_time(SCHEMA)

REQUIRED = ("cluster", "ts_ms", "group_id", "member_count", "is_tombstone")

CHECKS = {
    "negative_member_count": "member_count >= 0",
    **checks(event_time()),
    # A classic group's generation starts at 0 and only grows; a tombstone has none.
    "negative_generation": "is_tombstone OR generation >= 0",
    "implausible_state_time": f"state_ts_ms IS NULL OR state_ts_ms BETWEEN {MIN_TS_MS} AND "
                              f"{MAX_TS_MS}",
    "unknown_value_version": "value_version IS NULL OR value_version BETWEEN 0 AND 4",
    **checks(Bound("negative_source", ("source_partition", "source_offset"), low=0)),
}

COLUMNS = {
    "cluster": SHARED_COLUMNS["cluster"],
    "ts_ms": "Timestamp of the __consumer_offsets record (when the coordinator wrote the "
             "group's new state), epoch ms UTC",
    "group_id": "Consumer group",
    "protocol_type": "Group protocol type ('consumer' for consumer groups)",
    "generation": "Group generation: bumped by every rebalance",
    "protocol": "Chosen assignor (null when the group is empty)",
    "leader": "Member id of the group leader (null when the group is empty)",
    "member_count": "Members after this change; 0 = the group is empty (only an admin tool "
                    "can commit then)",
    "client_ids": "client.id of the members (at most 50, sorted)",
    "state_ts_ms": "currentStateTimestamp (value version 2+), epoch ms",
    "value_version": "GroupMetadataValue version 0..4 (null for a tombstone)",
    "is_tombstone": "The group was deleted",
    "source_partition": "Partition of __consumer_offsets the record came from",
    "source_offset": "Offset of the record in that partition",
    "ts": SHARED_COLUMNS["ts"],
}
