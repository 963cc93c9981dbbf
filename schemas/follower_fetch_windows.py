"""silver.follower_fetch_windows: per leader, follower and 10-s window, the follower's fetches.

Produced by the request-log agent's edge aggregation (ingest/request_windows.py, issue
24) from the leader's Fetch lines with a replica id: how often the follower fetched, the
longest gap it left between fetches (a fetch's arrival minus the previous one's
completion on the same connection: a follower that stops fetching holds back acks=all
writes) and how long the responses took to send to it. The slow-broker detector's
follower attribution reads these instead of per-request rows.
"""

from __future__ import annotations

from pyspark.sql.types import DoubleType, IntegerType, LongType, StructField, StructType

from schemas.histogram import (WINDOW_CHECKS, WINDOW_DOCS, WINDOW_HEAD, histogram_checks,
                               histogram_docs, histogram_fields)
from schemas.plausible import DAY_MS, Bound, checks
from schemas.table import EVENT_TIME, SHARED_COLUMNS, with_event_time

SCHEMA = StructType([
    *WINDOW_HEAD,
    StructField("follower", IntegerType()),
    StructField("requests", LongType()),
    StructField("max_fetch_gap_ms", DoubleType()),
    StructField("send_max_ms", DoubleType()),
    *histogram_fields("send", sum_and_max=False),
])

DERIVED = dict(EVENT_TIME)
SILVER_SCHEMA = with_event_time(SCHEMA)

REQUIRED = ("cluster", "broker", "ts_ms", "window_ms", "emission", "follower", "requests")

CHECKS = {
    **WINDOW_CHECKS,
    "negative_follower": "follower >= 0",
    **histogram_checks("send", sum_and_max=False),
    **checks(Bound("negative_time", ("max_fetch_gap_ms", "send_max_ms"), low=0),
             Bound("time_over_a_day", ("send_max_ms",), high=DAY_MS)),
}

COLUMNS = {
    "cluster": SHARED_COLUMNS["cluster"],
    "broker": "Node id of the leader whose request log this is",
    **WINDOW_DOCS,
    "follower": "Node id of the follower (the Fetch's replica id)",
    "requests": "The follower's fetches that completed in the window",
    "max_fetch_gap_ms": "Longest time between a fetch's completion and the follower's next "
                        "fetch on the same connection, ms (0 when none)",
    "send_max_ms": "Longest response send time to the follower, ms",
    **histogram_docs("send", "response send time to the follower", sum_and_max=False),
    "ts": "Window start as a timestamp (derived from ts_ms)",
}
