"""silver.request_exemplars: requests the edge aggregation kept whole, and why.

Produced by the request-log agent's edge aggregation (ingest/request_exemplars.py, issue
24): per request key and window, the requests at or over the exemplar threshold (capped,
a uniform sample of them past the cap), the few slowest, some error responses and a
1-in-N sample, each a silver.request_stages row with the window row it belongs to and the
reasons it was kept. The slow requests themselves, for findings, the incident report and
root-cause queries; silver.request_windows counts what was left out.
"""

from __future__ import annotations

from pyspark.sql.types import ArrayType, StringType, StructField, StructType

from schemas import request_stages
from schemas.table import EVENT_TIME, with_event_time

SCHEMA = StructType([
    *request_stages.SCHEMA.fields,
    StructField("window_id", StringType()),
    StructField("exemplar_reasons", ArrayType(StringType())),
])

DERIVED = dict(EVENT_TIME)
SILVER_SCHEMA = with_event_time(SCHEMA)

REQUIRED = (*request_stages.REQUIRED, "window_id", "exemplar_reasons")

CHECKS = {
    **request_stages.CHECKS,
    "has_a_reason": "size(exemplar_reasons) > 0",
}

COLUMNS = {
    **{c: d for c, d in request_stages.COLUMNS.items() if c != "ts"},
    "window_id": "record_id of the silver.request_windows row the request is counted in",
    "exemplar_reasons": "Why it was kept: slow, slowest, error, sample (in that order)",
    "ts": request_stages.COLUMNS["ts"],
}
