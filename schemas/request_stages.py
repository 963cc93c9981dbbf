"""silver.request_stages: one row per completed broker request, from the request log.

Produced by ingest/request_log.py from ``kafka.request.logger`` lines. The stage times are
the broker's own measurements of that one request (RequestChannel), exact where the JMX
RequestMetrics histograms are smoothed: request queue, local, remote (purgatory), throttle,
response queue and send, plus the total. Request and response bodies are dropped; only the
facts below are kept from them, among them who committed which offsets (OffsetCommit's
group, member, generation and offsets: the offset-rewind detector's evidence of who moved
a group back).
"""

from __future__ import annotations

from pyspark.sql.types import (ArrayType, BooleanType, DoubleType, IntegerType, LongType,
                               StringType, StructField, StructType)

from schemas.plausible import (DAY_MS, INT16, INT32, INT64, PART_STAGES, STAGE_SLACK_MS, Bound,
                               checks, event_time, width)
from schemas.table import EVENT_TIME, SHARED_COLUMNS, with_event_time

SCHEMA = StructType([
    StructField("cluster", StringType()),
    StructField("broker", IntegerType()),
    StructField("ts_ms", LongType()),
    StructField("api", StringType()),
    StructField("api_key", IntegerType()),
    StructField("api_version", IntegerType()),
    StructField("correlation_id", IntegerType()),
    StructField("client_id", StringType()),
    StructField("client_software_name", StringType()),
    StructField("client_software_version", StringType()),
    StructField("principal", StringType()),
    StructField("listener", StringType()),
    StructField("security_protocol", StringType()),
    StructField("local_addr", StringType()),
    StructField("remote_addr", StringType()),
    StructField("total_ms", DoubleType()),
    StructField("request_queue_ms", DoubleType()),
    StructField("local_ms", DoubleType()),
    StructField("remote_ms", DoubleType()),
    StructField("throttle_ms", DoubleType()),
    StructField("response_queue_ms", DoubleType()),
    StructField("send_ms", DoubleType()),
    StructField("fetch_kind", StringType()),
    StructField("fetch_replica_id", IntegerType()),
    StructField("acks", IntegerType()),
    StructField("topics", ArrayType(StringType())),
    StructField("topic_ids", ArrayType(StringType())),
    StructField("partition_count", IntegerType()),
    StructField("request_bytes", LongType()),
    StructField("response_bytes", LongType()),
    StructField("error_codes", ArrayType(IntegerType())),
    StructField("is_forwarded", BooleanType()),
    StructField("is_controller_traffic", BooleanType()),
    StructField("group_id", StringType()),
    StructField("member_id", StringType()),
    StructField("generation", IntegerType()),
    StructField("committed", ArrayType(StructType([
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
    ]))),
])

DERIVED = dict(EVENT_TIME)
SILVER_SCHEMA = with_event_time(SCHEMA)

REQUIRED = ("cluster", "broker", "ts_ms", "api", "api_key", "total_ms", "request_queue_ms",
            "local_ms", "remote_ms", "throttle_ms", "response_queue_ms", "send_ms")

STAGE_COLUMNS = ("total_ms", "request_queue_ms", "local_ms", "remote_ms", "throttle_ms",
                 "response_queue_ms", "send_ms")

# What a row's values can be (schemas/plausible.py); the request-log parser refuses the
# rest by the same names. A body fact is what the client sent (the broker logs the
# requests it refuses too), so it is bounded by its Kafka field's type and sign only.
BOUNDS = (
    event_time(),
    Bound("time_over_a_day", ("total_ms", "throttle_ms"), high=DAY_MS),
    width(INT16, "api_version", low=0),
    width(INT16, "acks"),
    Bound("out_of_range", ("error_codes",), *INT16, elements=True),
    Bound("negative_replica_id", ("fetch_replica_id",), low=0),
    Bound("negative_count", ("partition_count",), low=0),
    Bound("negative_bytes", ("request_bytes", "response_bytes"), low=0),
)
# Columns exactly as wide as their Kafka field: the column's type bounds them in the table
# (no check needed), the parser refuses wider values by the same rule name.
WIDTHS = (
    width(INT32, "correlation_id", "generation", "fetch_replica_id", "partition_count"),
    width(INT64, "request_bytes", "response_bytes"),
)

# Row checks (name -> Spark SQL that is true for a valid row); see schemas/table.py.
CHECKS = {
    **{f"negative_time:{c}": f"{c} >= 0" for c in STAGE_COLUMNS},
    "unknown_api": "api_key BETWEEN 0 AND 1000",
    "negative_broker": "broker >= 0",
    **checks(*BOUNDS),
    # Each stage is a part of the total (up to rounding); throttling is not one.
    **{f"stage_over_total:{c}": f"{c} <= total_ms + {STAGE_SLACK_MS}" for c in PART_STAGES},
}

COLUMNS = {
    **{c: SHARED_COLUMNS[c] for c in ("cluster", "broker", "ts_ms")},
    "api": "API name as JMX RequestMetrics names it: Produce, Fetch, Metadata, ApiVersions, ...",
    "api_key": "Numeric Kafka API key (0 Produce, 1 Fetch, ...)",
    "api_version": "Version of the request",
    "correlation_id": "Client-chosen id of the request on its connection",
    "client_id": "client.id the client sent (null when the header had none)",
    "client_software_name": "Client library, e.g. apache-kafka-java, confluent-kafka-python",
    "client_software_version": "Client library version",
    "principal": "Authenticated principal, e.g. User:ANONYMOUS",
    "listener": "Broker listener name the request came in on",
    "security_protocol": "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL",
    "local_addr": "Broker side of the connection, ip:port",
    "remote_addr": "Client side of the connection, ip:port",
    "total_ms": "Total time from receiving the request to sending the response",
    "request_queue_ms": "Waiting for a request handler thread (handler or CPU saturation)",
    "local_ms": "Work on the leader (disk, page cache)",
    "remote_ms": "Waiting in purgatory: followers for acks=all, or fetch.min.bytes/max.wait",
    "throttle_ms": "Held back by a quota",
    "response_queue_ms": "Waiting for a network thread to pick the response up",
    "send_ms": "Sending the response (network, or a client that reads slowly)",
    "fetch_kind": "Fetch only: consumer or follower (a replica, replicaId >= 0); else null",
    "fetch_replica_id": "Fetch from a follower: the follower's node id; else null",
    "acks": "Produce only: acks of the request (-1 all, 0, 1)",
    "topics": "Topic names the request touched (first 20); Fetch v13+ names none, see topic_ids",
    "topic_ids": "Topic ids the request touched (first 20), for APIs that send ids",
    "partition_count": "Partitions in the request (null for APIs without a topic list)",
    "request_bytes": "Produce only: record bytes in the request",
    "response_bytes": "Fetch only: record bytes in the response",
    "error_codes": "Distinct non-zero error codes anywhere in the response (first 10)",
    "is_forwarded": "Request forwarded by a broker to the controller (KRaft); null before 2.8",
    "is_controller_traffic": "Came in on a controller listener (KRaft quorum traffic, not clients)",
    "group_id": "OffsetCommit only: the group committing; else null",
    "member_id": "OffsetCommit only: the committing member's id (empty for an admin or "
                 "standalone commit); else null",
    "generation": "OffsetCommit only: generationIdOrMemberEpoch (-1 for an admin or standalone "
                  "commit); else null",
    "committed": "OffsetCommit only: (topic, partition, offset) committed, first 100 partitions "
                 "(topic null when the request names topics by id, v10+); else null",
    "ts": SHARED_COLUMNS["ts"],
}
