"""silver.client_send_windows: per broker, request key, client and 10-s window, send times.

Produced by the request-log agent's edge aggregation (ingest/request_windows.py, issue
24). A response's send time is how long the broker took to write it to the client: a
client that reads slowly (or its network) shows here, not in the broker's own stages. Per
key and window, the `top_clients` busiest clients and every client with a slow send get a
row each; the others are summed in one row whose client_id is null (``clients`` says how
many). The slow-broker detector's client blame reads these.

Produce rows also carry what the slow-link rule needs of a producer's own requests
(evaluation/inputs/request_windows.py `read_window_producer_times`): the TotalTime
histogram, how many requests followed another on their connection in the window and how
many of those had waited in the socket (the broker read them within QUEUED_GAP_MS of
answering the one before: it reads a connection's next request only once it has answered
the one before). Null on other APIs' rows.
"""

from __future__ import annotations

from pyspark.sql.types import (DoubleType, IntegerType, LongType, StringType, StructField,
                               StructType)

from schemas.histogram import (WINDOW_CHECKS, WINDOW_DOCS, WINDOW_HEAD, histogram_checks,
                               histogram_docs, histogram_fields)
from schemas.plausible import DAY_MS, Bound, checks
from schemas.table import EVENT_TIME, SHARED_COLUMNS, with_event_time

# A request the broker read within this long of finishing the one before on its connection
# had been waiting in the socket. 2 ms covers the request log's millisecond timestamps
# (the arrival is the line's time minus its TotalTime); an idle producer's next request
# comes its linger.ms or more later. The edge counts with it (ingest/request_windows.py).
QUEUED_GAP_MS = 2.0

SCHEMA = StructType([
    *WINDOW_HEAD,
    StructField("key", StringType()),
    StructField("api", StringType()),
    StructField("client_id", StringType()),
    StructField("clients", IntegerType()),
    StructField("requests", LongType()),
    StructField("slow_sends", LongType()),
    StructField("send_max_ms", DoubleType()),
    *histogram_fields("send", sum_and_max=False),
    *histogram_fields("total", sum_and_max=False),
    StructField("followed", LongType()),
    StructField("queued", LongType()),
])

DERIVED = dict(EVENT_TIME)
SILVER_SCHEMA = with_event_time(SCHEMA)

REQUIRED = ("cluster", "broker", "ts_ms", "window_ms", "emission", "key", "api", "clients",
            "requests")

CHECKS = {
    **WINDOW_CHECKS,
    "slow_within_requests": "slow_sends BETWEEN 0 AND requests",
    "one_named_client": "client_id IS NULL OR clients = 1",
    **histogram_checks("send", sum_and_max=False),
    **histogram_checks("total", sum_and_max=False),
    "no_clients": "clients >= 1",
    **checks(Bound("negative_time", ("send_max_ms",), low=0),
             Bound("time_over_a_day", ("send_max_ms",), high=DAY_MS)),
    "queued_within_followed": "queued IS NULL OR (queued BETWEEN 0 AND followed "
                              "AND followed <= requests)",
}

COLUMNS = {
    "cluster": SHARED_COLUMNS["cluster"],
    "broker": SHARED_COLUMNS["broker"],
    **WINDOW_DOCS,
    "key": "Request key, as in silver.request_windows",
    "api": "API name",
    "client_id": "The client's client.id; null for the row of the clients folded together",
    "clients": "Clients in this row: 1, or how many were folded",
    "requests": "Their requests of this key that completed in the window",
    "slow_sends": "Of those, responses whose send time reached the send threshold",
    "send_max_ms": "Longest send time, ms",
    **histogram_docs("send", "response send time", sum_and_max=False),
    **histogram_docs("total", "TotalTime (Produce rows only; null on others)",
                     sum_and_max=False),
    "followed": "Produce rows: requests that followed another of the client's on the same "
                "connection (remote address) in the window; null on other APIs' rows",
    "queued": f"Produce rows: of those, requests the broker read within {QUEUED_GAP_MS:g} ms of "
              "answering the one before on the connection (they had waited in the socket)",
    "ts": "Window start as a timestamp (derived from ts_ms)",
}
