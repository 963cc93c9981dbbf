"""Every Prometheus metric name the dashboards read, declared once.

Broker names are what infra/resources/jmx-exporter.yaml makes of the Kafka MBeans (output
lower-cased; GAUGE and UNTYPED rules keep the name as written, so the RequestMetrics and
BrokerTopicMetrics counts end in ``_count`` and nothing else). They were checked against a
running Kafka 4.3.1 node of `infra.local_cluster`. The ``kmon_*`` names are the contract of
kmon/exporter.py (findings, pipeline) and ingest/agent_metrics.py (agents).

Label contract: Prometheus adds ``cluster`` and ``broker`` (the node id) to every broker
target (dashboards/prometheus_scrape.py); ``kmon_findings_*`` carry ``cluster`` themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

# --- brokers (JMX exporter) -------------------------------------------------------------


@dataclass(frozen=True)
class Stage:
    """One RequestMetrics timer: the metric's name part and the stage's display name."""
    metric_part: str
    label: str

    @property
    def metric(self) -> str:
        """The percentile gauge, labelled request and quantile ("0.50" ... "0.99", "0.999")."""
        return f"kafka_network_requestmetrics_{self.metric_part}"

    @property
    def count(self) -> str:
        """How many requests the timer has seen, labelled request."""
        return f"{self.metric}_count"


# Request stages in the order a request passes them; Total last.
STAGES = (
    Stage("requestqueuetimems", "RequestQueue"),
    Stage("localtimems", "Local"),
    Stage("remotetimems", "Remote"),
    Stage("throttletimems", "Throttle"),
    Stage("responsequeuetimems", "ResponseQueue"),
    Stage("responsesendtimems", "ResponseSend"),
)
TOTAL = Stage("totaltimems", "Total")
ALL_STAGES = (*STAGES, TOTAL)

HANDLER_IDLE = "kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent"
NETWORK_IDLE = "kafka_network_socketserver_networkprocessoravgidlepercent"
REQUEST_QUEUE_SIZE = "kafka_network_requestchannel_requestqueuesize"
UNDER_REPLICATED = "kafka_server_replicamanager_underreplicatedpartitions"
OFFLINE_PARTITIONS = "kafka_controller_kafkacontroller_offlinepartitionscount"
UNCLEAN_ELECTIONS = "kafka_controller_controllerstats_uncleanleaderelectionspersec_count"
# Without a topic label: the broker's total; with one: per topic.
BYTES_IN = "kafka_server_brokertopicmetrics_bytesinpersec_count"
BYTES_OUT = "kafka_server_brokertopicmetrics_bytesoutpersec_count"

CLEANER_MAX_DIRTY_PERCENT = "kafka_log_logcleanermanager_max_dirty_percent"
CLEANER_TIME_SINCE_LAST_RUN_MS = "kafka_log_logcleanermanager_time_since_last_run_ms"
CLEANER_UNCLEANABLE_PARTITIONS = "kafka_log_logcleanermanager_uncleanable_partitions_count"
CLEANER_UNCLEANABLE_BYTES = "kafka_log_logcleanermanager_uncleanable_bytes"
CLEANER_MAX_COMPACTION_DELAY_SECS = "kafka_log_logcleaner_max_compaction_delay_secs"
CLEANER_DEAD_THREADS = "kafka_log_logcleaner_deadthreadcount"
CLEANER_MAX_BUFFER_UTILIZATION = "kafka_log_logcleaner_max_buffer_utilization_percent"
CLEANER_RECOPY_PERCENT = "kafka_log_logcleaner_cleaner_recopy_percent"

# --- kmon exporter (kmon/exporter.py) ----------------------------------------------------

FINDINGS_OPEN = "kmon_findings_open"
FINDINGS_OPEN_COUNT = "kmon_findings_open_count"
PIPELINE_QUERY_UP = "kmon_pipeline_query_up"
PIPELINE_BATCH_DURATION = "kmon_pipeline_batch_duration_seconds"
PIPELINE_INPUT_ROWS = "kmon_pipeline_input_rows_per_second"
PIPELINE_QUERY_LAG = "kmon_pipeline_query_lag_seconds"
PIPELINE_ROWS_QUARANTINED = "kmon_pipeline_rows_quarantined_total"

# --- agents (ingest/agent_metrics.py) ----------------------------------------------------

AGENT_RECORDS = "kmon_agent_records_total"
AGENT_DROPPED = "kmon_agent_dropped_records_total"
AGENT_FLUSH_FAILURES = "kmon_agent_flush_failures_total"
AGENT_LAST_FLUSH = "kmon_agent_last_successful_flush_timestamp_seconds"
AGENT_SOURCE_LAG_BYTES = "kmon_agent_source_lag_bytes"
