"""silver.partition_offsets: each watched partition's earliest and latest offset, polled.

Produced by ingest/partition_offsets_agent.py every few seconds (10 by default) for every
topic-partition that appears in offset commits (and, optionally, every non-internal
topic). Detectors compare committed offsets with these end offsets (a commit beyond the
end or below the start means a rewind or a truncation) and gold computes consumer lag as
``latest_offset - committed offset`` at the nearest poll.
"""

from __future__ import annotations

from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from schemas.plausible import Bound, checks, event_time
from schemas.table import EVENT_TIME, SHARED_COLUMNS, with_event_time

SCHEMA = StructType([
    StructField("cluster", StringType()),
    StructField("ts_ms", LongType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("earliest_offset", LongType()),
    StructField("latest_offset", LongType()),
    StructField("leader", IntegerType()),
])

DERIVED = dict(EVENT_TIME)
SILVER_SCHEMA = with_event_time(SCHEMA)

REQUIRED = ("cluster", "ts_ms", "topic", "partition", "earliest_offset", "latest_offset")

CHECKS = {
    "negative_partition": "partition >= 0",
    "negative_offset": "earliest_offset >= 0",
    "earliest_after_latest": "earliest_offset <= latest_offset",
    # A partition without a leader has leader null (Kafka's -1 is not stored).
    **checks(event_time(), Bound("negative_leader", ("leader",), low=0)),
}

COLUMNS = {
    "cluster": SHARED_COLUMNS["cluster"],
    "ts_ms": "When the offsets were listed (agent clock), epoch ms UTC",
    "topic": "Topic",
    "partition": "Partition",
    "earliest_offset": "Log start offset: the first offset still readable",
    "latest_offset": "High watermark: the offset the next produced record gets (read "
                     "uncommitted, so open transactions count)",
    "leader": "Leader broker's node id from the same poll's metadata (null if none)",
    "ts": SHARED_COLUMNS["ts"],
}
