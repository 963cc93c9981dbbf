"""The latency-histogram columns the window tables share (issue 24: edge aggregation).

A histogram is two parallel arrays, ``<name>_buckets`` (bucket ids ascending, SMALLINT: the
ids of core/latency_histogram.py run from -172 to a few hundred, the zero bucket is
-32768) and ``<name>_counts`` (requests in each bucket), beside ``<name>_sum_ms`` and
``<name>_max_ms``. Windows, emissions and brokers merge by summing counts per bucket id
(jobs/histogram_sql.py); the bucket scheme and its 2 % error bound are
core/latency_histogram.py's.
"""

from __future__ import annotations

from pyspark.sql.types import (ArrayType, DoubleType, IntegerType, LongType, ShortType,
                               StringType, StructField)

from schemas.plausible import DAY_MS, Bound, checks, event_time


def histogram_fields(name: str, *, sum_and_max: bool = True) -> list[StructField]:
    """The columns of one histogram: [sum, max,] bucket ids, counts."""
    fields = [StructField(f"{name}_sum_ms", DoubleType()),
              StructField(f"{name}_max_ms", DoubleType())] if sum_and_max else []
    return fields + [StructField(f"{name}_buckets", ArrayType(ShortType())),
                     StructField(f"{name}_counts", ArrayType(IntegerType()))]


def histogram_docs(name: str, what: str, *, sum_and_max: bool = True) -> dict[str, str]:
    """COLUMNS entries of one histogram of `what` (e.g. "total time")."""
    docs = {f"{name}_sum_ms": f"Sum of {what} over the window's requests, ms",
            f"{name}_max_ms": f"Largest {what} in the window, ms"} if sum_and_max else {}
    return {**docs,
            f"{name}_buckets": f"Histogram of {what}: bucket ids, ascending (2 % log buckets, "
                               "core/latency_histogram.py; -32768 holds exact zeros)",
            f"{name}_counts": f"Histogram of {what}: requests per bucket, parallel to "
                              f"{name}_buckets"}


def histogram_checks(name: str, *, sum_and_max: bool = True) -> dict[str, str]:
    """Row checks of one histogram: parallel arrays, counts and times that can be."""
    bounds = [Bound("negative_count", (f"{name}_counts",), low=0, elements=True)]
    if sum_and_max:
        bounds += [Bound("negative_time", (f"{name}_sum_ms", f"{name}_max_ms"), low=0),
                   Bound("time_over_a_day", (f"{name}_max_ms",), high=DAY_MS)]
    return {f"histogram_arrays:{name}":
            f"coalesce(size({name}_buckets), 0) = coalesce(size({name}_counts), 0)",
            **checks(*bounds)}


# The window tables' common head: who and which window; its checks (every window row
# counts at least one request).
WINDOW_HEAD = [
    StructField("cluster", StringType()),
    StructField("broker", IntegerType()),
    StructField("ts_ms", LongType()),
    StructField("window_ms", IntegerType()),
    StructField("emission", IntegerType()),
]
WINDOW_CHECKS = {
    "negative_broker": "broker >= 0",
    "window_ms_positive": "window_ms > 0",
    "negative_emission": "emission >= 0",
    "requests_positive": "requests > 0",
    **checks(event_time()),
    "window_over_a_day": f"window_ms <= {DAY_MS}",
}
WINDOW_DOCS = {
    "ts_ms": "Window start (event time), epoch ms UTC; the window is [ts_ms, ts_ms + window_ms) "
             "of the requests' completion times",
    "window_ms": "Window length, ms (10,000 by default)",
    "emission": "0 for the window's first record; 1, 2, ... for additive deltas of requests "
                "that completed in it but were read after it was sent (sum them)",
}
