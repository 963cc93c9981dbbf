"""Appends of a streaming micro-batch to Delta tables, each written at most once.

A streaming query that writes tables itself (foreachBatch) replays its last batch after a
restart; every append must then notice the batch is already in the table and write
nothing. Delta's own mechanism, the `txnAppId`/`txnVersion` writer options, checks the
table's transaction actions, and with Delta 4.4 that check rebuilds the table's whole
state with three Spark jobs before every append: measured at 0.5-1 s per table per batch,
about 40% of a silver micro-batch on two cores (bench/bench_silver_batch.py).

So `BatchAppends` checks cheaply and records twice:

- every append carries the mark ``kmon-batch <app> <batch>`` in its commit's
  `userMetadata` (the table's history shows which batch wrote each version);
- in one run of a query, batches only go forward, so an append for a batch after the last
  one this object committed is new: no check at all;
- the first append of a (table, app) in a run looks at the table's recent history for the
  app's newest mark and skips a batch at or below it;
- when the table holds no mark of the app but rows that were written without marks (a
  table written before marks), the append also uses the txnAppId options, so Delta's
  check decides, as before. A table whose whole history is marked writes, writes of no
  rows and changes of its schema or properties (a table just created) cannot hold the
  batch: it is written at once.

One object per query run (not per process): a query started again must look at the
tables again.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

MARK = "kmon-batch"
# How many recent versions of a table the first append of a run reads for its app's mark.
# A table shared by two queries (silver.quarantine, gold.pipeline_batches) gets a few
# commits of the fast query per commit of the slow one; 200 covers hours of that.
HISTORY_VERSIONS = 200
_MARK_RE = re.compile(rf"^{MARK} (\S+) (\d+)$")


def mark(app_id: str, batch_id: int) -> str:
    return f"{MARK} {app_id} {batch_id}"


def parse_mark(text: str | None) -> tuple[str, int] | None:
    m = _MARK_RE.match(text or "")
    return (m.group(1), int(m.group(2))) if m else None


# Commits that write no rows (a table's creation, its schema, constraints or properties).
_NO_ROWS = frozenset({"CREATE TABLE", "ADD COLUMNS", "CHANGE COLUMN", "ADD CONSTRAINT",
                      "DROP CONSTRAINT", "SET TBLPROPERTIES", "UNSET TBLPROPERTIES",
                      "UPGRADE PROTOCOL"})


@dataclass(frozen=True)
class AppHistory:
    """What a table's recent history says of one app's appends."""
    last_batch: int | None       # the newest batch of the app marked in it
    unmarked_rows: bool          # it may hold rows written without marks (or is not known)


def _wrote_unmarked_rows(row) -> bool:
    if parse_mark(row["userMetadata"]) is not None or row["operation"] in _NO_ROWS:
        return False
    metrics = row["operationMetrics"] or {}
    return not (row["operation"] == "WRITE" and metrics.get("numOutputRows") == "0")


def app_history(spark: SparkSession, path: str, app_id: str,
                versions: int = HISTORY_VERSIONS) -> AppHistory:
    """The app's newest mark in the last `versions` commits of the table, and whether rows
    were written without a mark: any such commit in them, or history older than them."""
    from delta.tables import DeltaTable

    if not DeltaTable.isDeltaTable(spark, path):
        return AppHistory(None, False)
    rows = (DeltaTable.forPath(spark, path).history(versions)
            .select("version", "operation", "operationMetrics", "userMetadata").collect())
    batches = [m[1] for m in (parse_mark(r["userMetadata"]) for r in rows)
               if m is not None and m[0] == app_id]
    whole = any(r["version"] == 0 for r in rows)
    return AppHistory(max(batches, default=None),
                      not whole or any(_wrote_unmarked_rows(r) for r in rows))


def last_marked_batch(spark: SparkSession, path: str, app_id: str,
                      versions: int = HISTORY_VERSIONS) -> int | None:
    """The newest batch of `app_id` marked in the last `versions` commits of the table."""
    return app_history(spark, path, app_id, versions).last_batch


class BatchAppends:
    """Idempotent appends of one query run's micro-batches (see the module's docstring)."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self._committed: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def append(self, df: DataFrame, path: str, app_id: str, batch_id: int,
               partition_by: tuple[str, ...] = (), merge_schema: bool = False) -> bool:
        """Append `df` as batch `batch_id` of `app_id`; False when that batch is already in
        the table (nothing written). `merge_schema`: columns of `df` the table lacks are
        added to it (a table another mode or version created)."""
        key = (path, app_id)
        with self._lock:
            last = self._committed.get(key)
        first, unmarked_rows = last is None, False
        if first:
            seen = app_history(self.spark, path, app_id)
            last, unmarked_rows = seen.last_batch, seen.unmarked_rows
        if last is not None and batch_id <= last:
            log.info("%s: batch %d of %s is already in the table (marked up to %d), "
                     "not written again", path, batch_id, app_id, last)
            with self._lock:
                self._committed[key] = max(last, self._committed.get(key, last))
            return False
        w = (df.write.format("delta").mode("append")
             .option("userMetadata", mark(app_id, batch_id)))
        if first and last is None and unmarked_rows:
            # No mark of this app, rows written without marks: Delta's transaction check
            # decides (a table written before marks were used) and records the version.
            w = w.option("txnAppId", app_id).option("txnVersion", batch_id)
        if partition_by:
            w = w.partitionBy(*partition_by)
        if merge_schema:
            w = w.option("mergeSchema", "true")
        w.save(path)
        with self._lock:
            self._committed[key] = batch_id
        return True
