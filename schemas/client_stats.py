"""silver.client_stats: librdkafka statistics, one row per client, broker, partition or group.

Produced by ingest/client_stats.py from the JSON librdkafka emits every
statistics.interval.ms. All scopes share one shape; ``scope`` says which columns apply:

- client: msgq_cnt (messages queued in the client), txmsgs, rxmsgs;
- broker: broker_name .. req_timeouts (one row per real broker the client talks to);
- partition: topic .. rxmsgs (one row per topic-partition the client produces or fetches);
- group: group_state .. assignment_size (consumers in a group).
"""

from __future__ import annotations

from pyspark.sql.types import (DoubleType, IntegerType, LongType, StringType, StructField,
                               StructType)

from schemas.plausible import INT32, INT64, Bound, checks, event_time, width
from schemas.table import EVENT_TIME, SHARED_COLUMNS, with_event_time

SCOPES = ("client", "broker", "partition", "group")
CLIENT_TYPES = ("producer", "consumer")

SCHEMA = StructType([
    StructField("cluster", StringType()),
    StructField("ts_ms", LongType()),
    StructField("client_id", StringType()),
    StructField("name", StringType()),
    StructField("type", StringType()),
    StructField("scope", StringType()),
    StructField("broker_name", StringType()),
    StructField("node_id", IntegerType()),
    StructField("broker_state", StringType()),
    StructField("rtt_p50_ms", DoubleType()),
    StructField("rtt_p99_ms", DoubleType()),
    StructField("rtt_avg_ms", DoubleType()),
    StructField("int_latency_p50_ms", DoubleType()),
    StructField("int_latency_p99_ms", DoubleType()),
    StructField("int_latency_avg_ms", DoubleType()),
    StructField("outbuf_latency_p50_ms", DoubleType()),
    StructField("outbuf_latency_p99_ms", DoubleType()),
    StructField("outbuf_latency_avg_ms", DoubleType()),
    StructField("throttle_avg_ms", DoubleType()),
    StructField("txerrs", LongType()),
    StructField("rxerrs", LongType()),
    StructField("req_timeouts", LongType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("leader", IntegerType()),
    StructField("fetch_state", StringType()),
    StructField("committed_offset", LongType()),
    StructField("stored_offset", LongType()),
    StructField("app_offset", LongType()),
    StructField("lo_offset", LongType()),
    StructField("hi_offset", LongType()),
    StructField("ls_offset", LongType()),
    StructField("consumer_lag", LongType()),
    StructField("consumer_lag_stored", LongType()),
    StructField("msgq_cnt", LongType()),
    StructField("txmsgs", LongType()),
    StructField("rxmsgs", LongType()),
    StructField("group_state", StringType()),
    StructField("join_state", StringType()),
    StructField("rebalance_cnt", LongType()),
    StructField("rebalance_reason", StringType()),
    StructField("assignment_size", IntegerType()),
])

DERIVED = dict(EVENT_TIME)
SILVER_SCHEMA = with_event_time(SCHEMA)

REQUIRED = ("cluster", "ts_ms", "name", "type", "scope")

# What a row's values can be (schemas/plausible.py); the statistics parser refuses the
# rest by the same names. librdkafka's logical values (-1 no leader, -1001 no offset, -1
# unknown lag) are stored as null, and its bootstrap and unassigned entries are not rows.
BOUNDS = (
    event_time(),
    Bound("negative_id", ("node_id", "partition", "leader"), low=0),
    Bound("negative_offset", ("committed_offset", "stored_offset", "app_offset", "lo_offset",
                              "hi_offset", "ls_offset", "consumer_lag", "consumer_lag_stored"),
          low=0),
    Bound("negative_time", ("rtt_p50_ms", "rtt_p99_ms", "rtt_avg_ms", "int_latency_p50_ms",
                            "int_latency_p99_ms", "int_latency_avg_ms", "outbuf_latency_p50_ms",
                            "outbuf_latency_p99_ms", "outbuf_latency_avg_ms", "throttle_avg_ms"),
          low=0),
    Bound("negative_count", ("txerrs", "rxerrs", "req_timeouts", "msgq_cnt", "txmsgs", "rxmsgs",
                             "rebalance_cnt", "assignment_size"), low=0),
)
# Columns exactly as wide as librdkafka's fields (see schemas/request_stages.py).
WIDTHS = (width(INT32, "node_id", "partition", "leader", "assignment_size"),
          width(INT64, *(f.name for f in SCHEMA.fields
                         if isinstance(f.dataType, LongType) and f.name != "ts_ms")))

CHECKS = {
    "unknown_client_type": "type IN (" + ", ".join(f"'{t}'" for t in CLIENT_TYPES) + ")",
    "unknown_scope": "scope IN (" + ", ".join(f"'{s}'" for s in SCOPES) + ")",
    **checks(*BOUNDS),
}

COLUMNS = {
    "cluster": SHARED_COLUMNS["cluster"],
    "ts_ms": "When the statistics were emitted (callback time, or librdkafka's wall clock "
             "in whole seconds), epoch ms UTC",
    "client_id": "client.id of the client",
    "name": "librdkafka handle name, <client.id>#<type>-<n>, unique per client instance",
    "type": "producer or consumer",
    "scope": "Which part of the client the row describes: " + ", ".join(SCOPES),
    "broker_name": "broker: librdkafka's name for it, host:port/nodeid",
    "node_id": "broker: node id",
    "broker_state": "broker: connection state (UP, DOWN, CONNECT, AUTH, ...)",
    "rtt_p50_ms": "broker: request round-trip time, median of the last window, ms",
    "rtt_p99_ms": "broker: request round-trip time, 99th percentile, ms",
    "rtt_avg_ms": "broker: request round-trip time, mean, ms",
    "int_latency_p50_ms": "broker: producer internal queue latency, median, ms",
    "int_latency_p99_ms": "broker: producer internal queue latency, 99th percentile, ms",
    "int_latency_avg_ms": "broker: producer internal queue latency, mean, ms",
    "outbuf_latency_p50_ms": "broker: time requests wait in the output buffer, median, ms",
    "outbuf_latency_p99_ms": "broker: time requests wait in the output buffer, 99th percentile, ms",
    "outbuf_latency_avg_ms": "broker: time requests wait in the output buffer, mean, ms",
    "throttle_avg_ms": "broker: broker throttle time, mean, ms",
    "txerrs": "broker: transmission errors (cumulative)",
    "rxerrs": "broker: receive errors (cumulative)",
    "req_timeouts": "broker: requests timed out (cumulative)",
    "topic": "partition: topic",
    "partition": "partition: partition number",
    "leader": "partition: leader node id as the client knows it (null if none)",
    "fetch_state": "partition: consumer fetch state (none, active, offset-query, ...)",
    "committed_offset": "partition: last committed offset (null if none)",
    "stored_offset": "partition: offset stored for the next commit",
    "app_offset": "partition: offset of the last message given to the application + 1",
    "lo_offset": "partition: partition's log start offset",
    "hi_offset": "partition: partition's high watermark",
    "ls_offset": "partition: partition's last stable offset",
    "consumer_lag": "partition: hi_offset (or ls_offset) minus committed offset (null if unknown)",
    "consumer_lag_stored": "partition: hi_offset (or ls_offset) minus stored offset",
    "msgq_cnt": "client/partition: messages waiting in the producer's queues",
    "txmsgs": "client/partition: messages produced (cumulative)",
    "rxmsgs": "client/partition: messages consumed (cumulative)",
    "group_state": "group: coordinator state (up, wait-coord, ...)",
    "join_state": "group: join state (steady, wait-join, ...)",
    "rebalance_cnt": "group: rebalances so far",
    "rebalance_reason": "group: reason for the last rebalance",
    "assignment_size": "group: partitions assigned to this consumer",
    "ts": SHARED_COLUMNS["ts"],
}
