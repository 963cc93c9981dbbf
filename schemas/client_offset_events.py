"""silver.client_offset_events: offset resets, out-of-range fetches and truncations seen by clients.

Produced by ingest/client_log.py from Java consumer and librdkafka logs. These are the
client's own account of why its position moved: together with offset_commits they tell an
automatic reset after OffsetOutOfRange from an operator's reset or a replay.
"""

from __future__ import annotations

from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from schemas.plausible import INT32, INT64, Bound, checks, event_time, width
from schemas.table import EVENT_TIME, SHARED_COLUMNS, with_event_time

KINDS = ("offset_reset", "offset_out_of_range", "truncation_detected")
RESET_TARGETS = ("earliest", "latest", "stored", "explicit")

SCHEMA = StructType([
    StructField("cluster", StringType()),
    StructField("ts_ms", LongType()),
    StructField("client_id", StringType()),
    StructField("group_id", StringType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("kind", StringType()),
    StructField("from_offset", LongType()),
    StructField("to_offset", LongType()),
    StructField("leader_epoch", IntegerType()),
    StructField("broker", IntegerType()),
    StructField("reset_target", StringType()),
    StructField("reason", StringType()),
    StructField("client_software", StringType()),
])

DERIVED = dict(EVENT_TIME)
SILVER_SCHEMA = with_event_time(SCHEMA)

REQUIRED = ("cluster", "ts_ms", "topic", "partition", "kind")

# What an event's values can be (schemas/plausible.py); the client-log parser refuses the
# rest by the same names. -1 is the clients' "unknown epoch", and librdkafka's broker -1
# (RD_KAFKA_NODEID_UA) a reset no broker answered for (no committed offset to start at).
BOUNDS = (
    event_time(),
    Bound("negative_offset", ("from_offset", "to_offset"), low=0),
    Bound("negative_epoch", ("leader_epoch",), low=-1),
    Bound("negative_broker", ("broker",), low=-1),
)
# Columns exactly as wide as the number in the line (see schemas/request_stages.py).
WIDTHS = (width(INT32, "partition", "leader_epoch", "broker"),
          width(INT64, "from_offset", "to_offset"))

CHECKS = {
    "unknown_kind": "kind IN (" + ", ".join(f"'{k}'" for k in KINDS) + ")",
    "negative_partition": "partition >= 0",
    **checks(*BOUNDS),
}

COLUMNS = {
    "cluster": SHARED_COLUMNS["cluster"],
    "ts_ms": "Time of the client log line, epoch ms UTC",
    "client_id": "client.id of the consumer",
    "group_id": "Consumer group (Java lines name it; for librdkafka the agent supplies it)",
    "topic": "Topic",
    "partition": "Partition",
    "kind": "One of: " + ", ".join(KINDS),
    "from_offset": "Position before: the out-of-range or truncated offset",
    "to_offset": "Position after the reset (null when the line does not say)",
    "leader_epoch": "Leader epoch of the position before (when the line gives it)",
    "broker": "Broker that answered (librdkafka lines)",
    "reset_target": "Where the position went: " + ", ".join(RESET_TARGETS) +
                    " (null when the line does not say)",
    "reason": "The client's stated cause (librdkafka), or 'seek' for application seeks",
    "client_software": "apache-kafka-java or librdkafka (or what the agent was told)",
    "ts": SHARED_COLUMNS["ts"],
}
