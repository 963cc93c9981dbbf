"""silver.log_events: one row per broker log event, with typed fields for the events kmon acts on.

Produced by ingest/broker_log.py from server.log, controller.log, state-change.log and
log-cleaner.log. Every event is kept (kind ``other`` for the rest), bounded in size; the
kinds below carry typed columns so detectors never parse messages again.
"""

from __future__ import annotations

from enum import Enum

from pyspark.sql.types import (ArrayType, BooleanType, DoubleType, IntegerType, LongType,
                               StringType, StructField, StructType)

from schemas.plausible import INT32, INT64, Bound, checks, event_time, width
from schemas.table import EVENT_TIME, SHARED_COLUMNS, with_event_time


class LogEventKind(str, Enum):
    """What a broker log event says happened; the value is what the tables hold."""

    UNCLEAN_ELECTION = "unclean_election"      # an out-of-sync replica became leader
    TRUNCATION = "truncation"                  # a replica cut its log back to an offset
    ISR_SHRINK = "isr_shrink"                  # the leader removed replicas from the ISR
    ISR_EXPAND = "isr_expand"                  # the leader added replicas (ZooKeeper-era line)
    ISR_UPDATE = "isr_update"                  # the controller accepted a new ISR (either way)
    CLEANER_RUN = "cleaner_run"                # the log cleaner compacted a partition
    OFFSET_RESET = "offset_reset"              # a follower reset its fetch offset
    OFFSET_OUT_OF_RANGE = "offset_out_of_range"  # a follower fetched out of range
    LEADER_CHANGE = "leader_change"            # this broker saw a new leader (or became it)
    COORDINATOR_LOAD = "coordinator_load"      # it became a __consumer_offsets partition's
                                               # group coordinator (loads its groups)
    COORDINATOR_UNLOAD = "coordinator_unload"  # it stopped being that coordinator
    BROKER_FENCED = "broker_fenced"            # the controller fenced a broker whose session
                                               # timed out (crashed, hung or cut off)
    BROKER_SHUTDOWN = "broker_shutdown"        # a broker began to shut down (its own line,
                                               # or the controller granting it)
    BROKER_REGISTERED = "broker_registered"    # a restarted broker registered a new incarnation
    BROKER_UNFENCED = "broker_unfenced"        # a (re)started broker caught up and was unfenced
    BROKER_UNREACHABLE = "broker_unreachable"  # this broker's replica fetcher could not
                                               # connect to the leader it follows
    OTHER = "other"                            # any other event, kept as text

    def __str__(self) -> str:
        return self.value


SCHEMA = StructType([
    StructField("cluster", StringType()),
    StructField("broker", IntegerType()),
    StructField("ts_ms", LongType()),
    StructField("log", StringType()),
    StructField("level", StringType()),
    StructField("logger", StringType()),
    StructField("message", StringType()),
    StructField("message_truncated", BooleanType()),
    StructField("kind", StringType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("topic_id", StringType()),
    StructField("offset", LongType()),
    StructField("from_offset", LongType()),
    StructField("high_watermark", LongType()),
    StructField("old_leader", IntegerType()),
    StructField("new_leader", IntegerType()),
    StructField("leader_epoch", IntegerType()),
    StructField("isr_before", ArrayType(IntegerType())),
    StructField("isr_after", ArrayType(IntegerType())),
    StructField("dirty_start", LongType()),
    StructField("dirty_end", LongType()),
    StructField("mb_processed", DoubleType()),
    StructField("seconds", DoubleType()),
    StructField("start_size_mb", DoubleType()),
    StructField("end_size_mb", DoubleType()),
    StructField("start_messages", LongType()),
    StructField("end_messages", LongType()),
    StructField("reduction_pct", DoubleType()),
    StructField("buffer_utilization_pct", DoubleType()),
    StructField("subject_broker", IntegerType()),
    StructField("last_known_elr", ArrayType(IntegerType())),
])

DERIVED = dict(EVENT_TIME)
SILVER_SCHEMA = with_event_time(SCHEMA)

REQUIRED = ("cluster", "broker", "ts_ms", "level", "message", "kind")

KINDS = tuple(k.value for k in LogEventKind)

LEVELS = ("TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL")

# What an event's values can be (schemas/plausible.py); the broker-log parser refuses the
# rest by the same names. -1 is Kafka's "no leader" (a partition gone offline) and its
# "unknown epoch"; node ids, offsets and the cleaner's figures are never negative.
BOUNDS = (
    event_time(),
    Bound("negative_offset", ("offset", "from_offset", "high_watermark", "dirty_start",
                              "dirty_end"), low=0),
    Bound("negative_leader", ("old_leader", "new_leader"), low=-1),
    Bound("negative_epoch", ("leader_epoch",), low=-1),
    Bound("negative_broker", ("subject_broker",), low=0),
    Bound("negative_broker", ("isr_before", "isr_after", "last_known_elr"), low=0,
          elements=True),
    Bound("negative_count", ("mb_processed", "seconds", "start_size_mb", "end_size_mb",
                             "start_messages", "end_messages"), low=0),
    Bound("out_of_range", ("buffer_utilization_pct",), 0, 100),
    Bound("out_of_range", ("reduction_pct",), high=100),
)
# Columns exactly as wide as the number in the line (see schemas/request_stages.py).
WIDTHS = (
    width(INT32, "partition", "old_leader", "new_leader", "leader_epoch", "subject_broker"),
    Bound("out_of_range", ("isr_before", "isr_after", "last_known_elr"), *INT32,
          elements=True),
    width(INT64, "offset", "from_offset", "high_watermark", "dirty_start", "dirty_end",
          "start_messages", "end_messages"),
)

CHECKS = {
    "unknown_kind": "kind IN (" + ", ".join(f"'{k}'" for k in KINDS) + ")",
    "unknown_level": "level IN (" + ", ".join(f"'{v}'" for v in LEVELS) + ")",
    "negative_partition": "partition IS NULL OR partition >= 0",
    "negative_broker": "broker >= 0",
    **checks(*BOUNDS),
    "dirty_end_before_start": "dirty_start IS NULL OR dirty_end IS NULL "
                              "OR dirty_start <= dirty_end",
}

COLUMNS = {
    **{c: SHARED_COLUMNS[c] for c in ("cluster", "broker", "ts_ms")},
    "log": "Which log file: server, controller, state-change, log-cleaner (as the agent names it)",
    "level": "log4j level: TRACE, DEBUG, INFO, WARN, ERROR, FATAL",
    "logger": "log4j logger (%c), e.g. kafka.cluster.Partition",
    "message": "The event's text, continuation lines included, cut to 8 KB",
    "message_truncated": "The message was longer than 8 KB and was cut",
    "kind": "One of: " + ", ".join(KINDS),
    "topic": "Topic the event is about (null when the line names only a topic id; "
             "__consumer_offsets for coordinator loads and unloads)",
    "partition": "Partition the event is about",
    "topic_id": "Topic id, when the line gives one",
    "offset": ("The offset the event names: truncation target, new fetch offset after a reset, "
               "leader start offset"),
    "from_offset": "Offset before a reset or an out-of-range fetch",
    "high_watermark": "High watermark the line reports (truncation below it, ISR shrink, "
                      "leader start)",
    "old_leader": "Previous leader node id (leader changes, unclean elections)",
    "new_leader": "New leader node id",
    "leader_epoch": "Leader epoch after the change (coordinator load/unload: the epoch the "
                    "coordinator took over or gave up)",
    "isr_before": "ISR before the change",
    "isr_after": "ISR after the change",
    "dirty_start": "Cleaner run: first offset of the dirty section",
    "dirty_end": "Cleaner run: end offset of the dirty section",
    "mb_processed": "Cleaner run: MB of log read",
    "seconds": "Cleaner run: elapsed seconds",
    "start_size_mb": "Cleaner run: size before, MB (the line gives MB with one decimal)",
    "end_size_mb": "Cleaner run: size after, MB",
    "start_messages": "Cleaner run: messages before",
    "end_messages": "Cleaner run: messages after",
    "reduction_pct": "Cleaner run: size reduction, percent",
    "buffer_utilization_pct": "Cleaner run: dedupe buffer utilization, percent",
    "subject_broker": "The broker a controller's line is about (broker_fenced, "
                      "broker_shutdown, broker_registered, broker_unfenced), the broker "
                      "itself for its own broker_shutdown line, or the one a replica "
                      "fetcher could not connect to (broker_unreachable)",
    "last_known_elr": "Unclean election (4.x): the partition's last known eligible leader "
                      "replicas before the change (lastKnownElr): the replicas still in sync "
                      "when its ISR emptied; empty when none",
    "ts": SHARED_COLUMNS["ts"],
}
