"""What every silver table module in schemas/ declares, and the columns they share.

Each table module (request_stages, log_events, client_offset_events, offset_commits,
client_stats, quarantine) declares:

- ``SCHEMA``: the record as the edge parser produces it and publishes it as JSON; jobs
  read the telemetry topics with ``from_json(value, SCHEMA)``. Its field names equal the
  keys of the parser's record, in order (a unit test checks each parser against it).
- ``DERIVED``: columns the silver job adds, as Spark SQL expressions over ``SCHEMA``
  (``selectExpr("*", *[f"{e} AS {c}" for c, e in DERIVED.items()])``).
- ``SILVER_SCHEMA``: ``SCHEMA`` plus the derived columns: the Delta table.
- ``REQUIRED``: columns a valid row never leaves null; a row missing one goes to
  quarantine.
- ``CHECKS`` (optional): rule name -> Spark SQL condition a valid row satisfies. With
  ``REQUIRED`` they are the table's one declaration of validity: the silver job routes
  rows that break one to quarantine, the same rules become Delta CHECK constraints and a
  great-expectations suite (jobs/validation.py).
- ``COLUMNS``: column -> meaning, for every column of ``SILVER_SCHEMA`` (the README's
  table reference is generated from it).

Every column is nullable in the Spark schema because ``from_json`` makes them so anyway;
``REQUIRED`` says which ones must hold a value.
"""

from __future__ import annotations

from pyspark.sql.types import StructField, StructType, TimestampType

# The event time as a timestamp, from the epoch milliseconds every record carries.
EVENT_TIME = {"ts": "timestamp_millis(ts_ms)"}
EVENT_TIME_FIELD = StructField("ts", TimestampType())

SHARED_COLUMNS = {
    "cluster": "Name of the watched Kafka cluster (every table carries it)",
    "broker": "Node id of the broker that wrote the line",
    "ts_ms": "Event time, epoch milliseconds UTC",
    "ts": "Event time as a timestamp (derived from ts_ms)",
}

# Columns the silver job adds to every table beside SILVER_SCHEMA.
JOB_COLUMNS = {
    "record_id": "Deterministic id of the record from its source coordinates (agents set it; "
                 "a re-sent record has the same id and is dropped as a repeat)",
    "date": "Partition column: the UTC date of the row's time (event time; ingest time for "
            "quarantine)",
}


def with_event_time(schema: StructType) -> StructType:
    """The silver schema of a record schema: the record's columns, then ``ts``."""
    return StructType([*schema.fields, EVENT_TIME_FIELD])
