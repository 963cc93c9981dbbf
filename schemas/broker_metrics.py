"""silver.broker_metrics: the broker JMX metrics kmon reads, one row per sample per scrape.

Produced by ingest/jmx_scraper.py from each broker's Prometheus JMX exporter (rules in
infra/resources/jmx-exporter.yaml). The table is long and narrow: ``metric`` is the
exporter's series name (a ``_count_total`` spelling, as exporter 1.x writes counters, is
stored as ``_count``), and the labels the detectors group by have their own columns
(``request``, ``quantile``, ``topic``); any other label stays in ``labels``. The one
per-partition series, the log size, keeps its topic in ``topic`` and its partition in
``labels['partition']`` (a string, as every label), like the cleaner gauges' log directory.

`METRICS` lists every series the scraper keeps, with what it means. The stage histograms
(kafka.network:type=RequestMetrics) come from Yammer histograms with exponentially decaying
reservoirs: smoothed toward the last few minutes, and late; the request log's windows
(silver.request_windows) count every request, with 2 %-exact stage percentiles.
"""

from __future__ import annotations

from pyspark.sql.types import (
                               DoubleType,
                               IntegerType,
                               LongType,
                               MapType,
                               StringType,
                               StructField,
                               StructType,
)

from schemas.plausible import checks, event_time
from schemas.table import EVENT_TIME, SHARED_COLUMNS, with_event_time

REQUEST_METRICS = "kafka_network_requestmetrics_"
LOG_SIZE = "kafka_log_log_size"

# The request types whose stage histograms are kept (a broker exports ~90, most of them
# admin and inter-broker calls nobody graphs; keeping them all made this the biggest
# stream after the request log, 14 series x 90 types x brokers every scrape). The request
# log keeps every request of every type regardless.
KEPT_REQUESTS = frozenset({
    "Produce", "Fetch", "FetchConsumer", "FetchFollower", "Metadata", "ListOffsets",
    "OffsetCommit", "OffsetFetch", "TxnOffsetCommit", "FindCoordinator", "JoinGroup",
    "SyncGroup", "Heartbeat", "LeaveGroup", "InitProducerId", "AddPartitionsToTxn", "EndTxn",
    "ConsumerGroupHeartbeat",
})

# kafka.network:type=RequestMetrics,name=<N>: the request stages, exporter name -> meaning.
STAGES = {
    "requestqueuetimems": "RequestQueueTimeMs: waiting for a request handler thread",
    "localtimems": "LocalTimeMs: the leader's own work",
    "remotetimems": "RemoteTimeMs: waiting in purgatory (followers for acks=all, fetch waits)",
    "throttletimems": "ThrottleTimeMs: held back by a quota",
    "responsequeuetimems": "ResponseQueueTimeMs: waiting for a network thread",
    "responsesendtimems": "ResponseSendTimeMs: sending the response",
    "totaltimems": "TotalTimeMs: the whole request",
}

METRICS = {
    **{f"{REQUEST_METRICS}{s}": f"{doc}, ms, at `quantile` (0.50 .. 0.999), per `request`"
       for s, doc in STAGES.items()},
    **{f"{REQUEST_METRICS}{s}_count": f"Requests measured for {doc.split(':')[0]} since the "
                                       "broker started, per `request` (a counter)"
       for s, doc in STAGES.items()},
    "kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent":
        "Share of time the request handler threads were idle (0..1, one-minute rate)",
    "kafka_network_socketserver_networkprocessoravgidlepercent":
        "Share of time the network processor threads were idle (0..1)",
    "kafka_network_requestchannel_requestqueuesize": "Requests waiting for a handler thread",
    "kafka_server_replicamanager_underreplicatedpartitions":
        "Partitions led by this broker with fewer in-sync replicas than replicas",
    "kafka_server_replicamanager_underminisrpartitioncount":
        "Partitions led by this broker below min.insync.replicas (acks=all produce fails)",
    "kafka_server_replicamanager_atminisrpartitioncount":
        "Partitions led by this broker exactly at min.insync.replicas",
    "kafka_server_replicamanager_offlinereplicacount": "Replicas on this broker that are offline",
    "kafka_server_replicamanager_leadercount": "Partitions this broker leads",
    "kafka_server_replicamanager_partitioncount": "Partition replicas on this broker",
    "kafka_controller_kafkacontroller_activecontrollercount":
        "1 on the active controller, else 0 (only its controller gauges count)",
    "kafka_controller_kafkacontroller_offlinepartitionscount":
        "Partitions without a leader (meaningful on the active controller)",
    "kafka_controller_controllerstats_uncleanleaderelectionspersec_count":
        "Unclean leader elections since the controller started (a counter)",
    "kafka_server_brokertopicmetrics_bytesinpersec_count":
        "Bytes produced to this broker (a counter; per `topic`, or the broker total)",
    "kafka_server_brokertopicmetrics_bytesoutpersec_count":
        "Bytes fetched from this broker (a counter; per `topic`, or the broker total)",
    "kafka_server_brokertopicmetrics_messagesinpersec_count":
        "Messages produced to this broker (a counter; per `topic`, or the broker total)",
    "kafka_log_logcleanermanager_max_dirty_percent":
        "Highest dirty ratio of the compacted logs, percent (computed when a thread picks a log)",
    "kafka_log_logcleanermanager_time_since_last_run_ms":
        "Milliseconds since a cleaner thread last looked for a log to clean",
    "kafka_log_logcleanermanager_uncleanable_partitions_count":
        "Logs the cleaner gave up on, per log directory (`labels.logdirectory`)",
    "kafka_log_logcleanermanager_uncleanable_bytes":
        "Bytes in uncleanable logs, per log directory (`labels.logdirectory`)",
    "kafka_log_logcleaner_max_compaction_delay_secs":
        "Longest delay beyond a log's max.compaction.lag.ms, seconds (0: all within)",
    "kafka_log_logcleaner_deadthreadcount": "Cleaner threads that died (never restarted)",
    "kafka_log_logcleaner_max_clean_time_secs": "Longest recent cleaning, seconds",
    "kafka_log_logcleaner_max_buffer_utilization_percent":
        "Highest dedupe buffer utilization of the recent cleanings, percent",
    "kafka_log_logcleaner_cleaner_recopy_percent":
        "Share of cleaned bytes written again (recopied), percent",
    LOG_SIZE: "Bytes on disk of one partition replica's log (kafka.log:type=Log,name=Size), "
              "per `topic` and `labels.partition`: one series per replica on the broker",
}

SCHEMA = StructType([
    StructField("cluster", StringType()),
    StructField("broker", IntegerType()),
    StructField("ts_ms", LongType()),
    StructField("metric", StringType()),
    StructField("request", StringType()),
    StructField("quantile", DoubleType()),
    StructField("topic", StringType()),
    StructField("labels", MapType(StringType(), StringType())),
    StructField("value", DoubleType()),
])

DERIVED = dict(EVENT_TIME)
SILVER_SCHEMA = with_event_time(SCHEMA)

REQUIRED = ("cluster", "broker", "ts_ms", "metric", "value")

# Every kept series is a count, a size, a time, a ratio or a percentage, never below 0,
# but these: the cleaner's longest recent cleaning reads minus the epoch in seconds until
# a cleaner thread has finished one (its end time is still unset).
SIGNED_METRICS = frozenset({"kafka_log_logcleaner_max_clean_time_secs"})

# Row checks (name -> Spark SQL that is true for a valid row); see schemas/table.py.
CHECKS = {
    "unknown_metric": "metric IN (" + ", ".join(f"'{m}'" for m in METRICS) + ")",
    "quantile_out_of_range": "quantile IS NULL OR (quantile >= 0 AND quantile <= 1)",
    "negative_broker": "broker >= 0",
    **checks(event_time()),
    "negative_value": "value >= 0 OR metric IN (" + ", ".join(f"'{m}'" for m in SIGNED_METRICS)
                      + ")",
}

COLUMNS = {
    **{c: SHARED_COLUMNS[c] for c in ("cluster", "broker")},
    "ts_ms": "Scrape time (the exporter gives no sample times), epoch ms UTC",
    "metric": "Exporter series name, one of METRICS in schemas/broker_metrics.py, e.g. "
              "kafka_network_requestmetrics_totaltimems",
    "request": "Request type (label `request`): Produce, Fetch, FetchConsumer, FetchFollower, "
               "Metadata, ... (null for metrics that are not per request)",
    "quantile": "Quantile of a stage histogram, 0.5 .. 0.999 (null for other series)",
    "topic": "Topic (label `topic`) of per-topic BrokerTopicMetrics and of the log size; "
             "null for broker totals",
    "labels": "Any other labels of the series, e.g. logdirectory, or partition for the log "
              "size (empty map when none)",
    "value": "Sample value (finite; NaN and infinite samples are not published)",
    "ts": SHARED_COLUMNS["ts"],
}
