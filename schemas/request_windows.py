"""silver.request_windows: per broker, request key and 10-s window, counts and stage histograms.

Produced by the request-log agent's edge aggregation (ingest/request_windows.py, issue
24): instead of a row per request (silver.request_stages), a row per (broker, request key,
window, emission) with the request and error counts, bytes, and for each of the seven
stage timings and total - remote a histogram (schemas/histogram.py) with its sum and max.
Percentiles are computed by merging histograms (jobs/histogram_sql.py): within the stated
2 % of the exact ones, for any set of windows, emissions and brokers. The requests over
the threshold, the slowest and some errors are kept whole in silver.request_exemplars,
and this row counts what was kept and what was left out.

The request key: the API name, with Fetch split into ``Fetch:consumer`` and
``Fetch:follower`` and Produce by acks (``Produce:acks=-1``, ``Produce:acks=1``,
``Produce:acks=0``); controller-listener traffic is apart (``is_controller_traffic``).
"""

from __future__ import annotations

from pyspark.sql.types import (BooleanType, IntegerType, LongType, StringType, StructField,
                               StructType)

from schemas.histogram import (WINDOW_CHECKS, WINDOW_DOCS, WINDOW_HEAD, histogram_checks,
                               histogram_docs, histogram_fields)
from schemas.plausible import Bound, checks
from schemas.table import EVENT_TIME, SHARED_COLUMNS, with_event_time

# Stage column prefix -> what it times (silver.request_stages' <stage>_ms columns).
STAGES = {
    "total": "total time",
    "request_queue": "request-queue time",
    "local": "local time",
    "remote": "remote (purgatory) time",
    "throttle": "throttle time",
    "response_queue": "response-queue time",
    "send": "response send time",
    "total_minus_remote": "total - remote time (floored at 0: a purgatory API's own time)",
}

EXEMPLAR_ACCOUNTING = {
    "over_threshold": "Requests whose judged latency (total, or total - remote for Fetch, "
                      "JoinGroup, SyncGroup) reached the exemplar threshold",
    "exemplars_slow": "Of those, kept whole in silver.request_exemplars (reason slow)",
    "exemplars_slow_left_out": "Of those, left out (over the per-window cap)",
    "exemplars_slowest": "Slowest requests kept whole (reason slowest)",
    "exemplars_error": "Error responses kept whole (reason error)",
    "exemplars_error_left_out": "Error responses left out (over the per-window cap)",
    "exemplars_sample": "Requests kept whole by the 1-in-N sample (reason sample)",
    "exemplars": "Requests of this row kept whole, each once whatever its reasons",
}

SCHEMA = StructType([
    *WINDOW_HEAD,
    StructField("key", StringType()),
    StructField("api", StringType()),
    StructField("is_controller_traffic", BooleanType()),
    StructField("requests", LongType()),
    StructField("errors", LongType()),
    StructField("request_bytes", LongType()),
    StructField("response_bytes", LongType()),
    *[f for stage in STAGES for f in histogram_fields(stage)],
    *[StructField(c, LongType()) for c in EXEMPLAR_ACCOUNTING],
    StructField("clients", IntegerType()),
    StructField("clients_folded", IntegerType()),
])

DERIVED = dict(EVENT_TIME)
SILVER_SCHEMA = with_event_time(SCHEMA)

REQUIRED = ("cluster", "broker", "ts_ms", "window_ms", "emission", "key", "api", "requests",
            "total_buckets", "total_counts")

CHECKS = {
    **WINDOW_CHECKS,
    "window_start_aligned": "ts_ms % window_ms = 0",
    "errors_within_requests": "errors BETWEEN 0 AND requests",
    **{k: v for stage in STAGES for k, v in histogram_checks(stage).items()},
    **checks(Bound("negative_bytes", ("request_bytes", "response_bytes"), low=0),
             Bound("negative_count", (*EXEMPLAR_ACCOUNTING, "clients"), low=0)),
    "clients_folded_within_clients": "clients_folded IS NULL OR clients_folded BETWEEN 0 AND "
                                     "clients",
}

COLUMNS = {
    "cluster": SHARED_COLUMNS["cluster"],
    "broker": SHARED_COLUMNS["broker"],
    **WINDOW_DOCS,
    "key": "Request key: the API, Fetch:consumer / Fetch:follower, Produce:acks=<n>",
    "api": "API name as JMX RequestMetrics names it (Produce, Fetch, ...)",
    "is_controller_traffic": "Came in on a controller listener (KRaft quorum traffic)",
    "requests": "Requests of this key that completed in the window (in this emission)",
    "errors": "Of those, responses with a non-zero error code anywhere",
    "request_bytes": "Produce: record bytes in the requests (sum)",
    "response_bytes": "Fetch: record bytes in the responses (sum)",
    **{k: v for stage, what in STAGES.items() for k, v in histogram_docs(stage, what).items()},
    **EXEMPLAR_ACCOUNTING,
    "clients": "Distinct client ids among the requests",
    "clients_folded": "Of those, folded into one 'other' row of silver.client_send_windows",
    "ts": "Window start as a timestamp (derived from ts_ms)",
}
