"""gold.remediation_decisions and gold.remediation_results: the Delta stores (the only Spark here).

Same interfaces as the JSON-lines stores (remediation/stores.py). Writes are MERGEs on the
key (decision_key, action_id), so a re-run decision step or a redelivered action rewrites
its row instead of adding one; a merge commits before it returns, which is when the
caller moves on. Both tables live under the lake's gold layer (infra/lake.py), partitioned
by date (of the decision, of the action's start), and `register_tables` names them
gold.<decisions_table> and gold.<results_table>.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from infra.lake import Lake, skipping_properties
from remediation.actions import ActionResult, Decision

DECISIONS_SCHEMA = StructType([
    StructField("decision_key", StringType()),
    StructField("finding_id", StringType()),
    StructField("cluster", StringType()),
    StructField("anomaly_type", StringType()),
    StructField("entity", StringType()),
    StructField("fingerprint", StringType()),
    StructField("attempt", IntegerType()),
    StructField("outcome", StringType()),
    StructField("reason", StringType()),
    StructField("decided_ms", LongType()),
    StructField("recheck_at_ms", LongType()),
    StructField("action_id", StringType()),
    StructField("action_kind", StringType()),
    StructField("dry_run", BooleanType()),
    StructField("action_json", StringType()),
])

RESULTS_SCHEMA = StructType([
    StructField("action_id", StringType()),
    StructField("cluster", StringType()),
    StructField("kind", StringType()),
    StructField("target", StringType()),
    StructField("finding_id", StringType()),
    StructField("status", StringType()),
    StructField("reason", StringType()),
    StructField("started_ms", LongType()),
    StructField("finished_ms", LongType()),
    StructField("dry_run", BooleanType()),
    StructField("details_json", StringType()),
    StructField("executor", StringType()),
])


def _with_date(df: DataFrame, ms_column: str) -> DataFrame:
    return df.withColumn("date", F.to_date(F.timestamp_millis(F.col(ms_column))))


class _DeltaTable:
    def __init__(self, spark: SparkSession, path: str, schema: StructType, key: str,
                 time_column: str):
        self.spark, self.path, self.schema = spark, path, schema
        self.key, self.time_column = key, time_column

    def _exists(self) -> bool:
        from delta.tables import DeltaTable

        return DeltaTable.isDeltaTable(self.spark, self.path)

    def merge(self, rows: Sequence[dict[str, Any]]) -> None:
        from delta.tables import DeltaTable

        if not rows:
            return
        # One row per key in a merge source (the last wins, as in the JSON-lines store).
        last = {r[self.key]: r for r in rows}
        df = _with_date(self.spark.createDataFrame(
            [tuple(r[f.name] for f in self.schema.fields) for r in last.values()],
            self.schema), self.time_column)
        if not self._exists():
            (df.limit(0).write.format("delta").options(**skipping_properties(df.columns))
             .partitionBy("date").save(self.path))
        (DeltaTable.forPath(self.spark, self.path).alias("t")
         .merge(df.alias("s"), f"t.{self.key} = s.{self.key}")
         .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())

    def read(self) -> DataFrame | None:
        if not self._exists():
            return None
        return self.spark.read.format("delta").load(self.path)


class DeltaDecisionStore:
    def __init__(self, spark: SparkSession, lake: Lake, table: str = "remediation_decisions"):
        self._t = _DeltaTable(spark, lake.table("gold", table), DECISIONS_SCHEMA,
                              "decision_key", "decided_ms")

    def record(self, decisions: Sequence[Decision]) -> None:
        self._t.merge([d.to_row() for d in decisions])

    def load(self, *, finding_ids: Iterable[str], since_ms: int) -> list[Decision]:
        df = self._t.read()
        if df is None:
            return []
        ids = sorted(set(finding_ids))
        cond = F.col("decided_ms") >= F.lit(since_ms)
        if ids:
            cond = cond | F.col("finding_id").isin(ids)
        return [Decision.from_row(r.asDict()) for r in df.where(cond).collect()]


class DeltaResultStore:
    def __init__(self, spark: SparkSession, lake: Lake, table: str = "remediation_results"):
        self._t = _DeltaTable(spark, lake.table("gold", table), RESULTS_SCHEMA, "action_id",
                              "started_ms")

    def get(self, action_id: str) -> ActionResult | None:
        df = self._t.read()
        if df is None:
            return None
        rows = df.where(F.col("action_id") == action_id).limit(1).collect()
        return ActionResult.from_row(rows[0].asDict()) if rows else None

    def put(self, result: ActionResult) -> None:
        self._t.merge([result.to_row()])

    def recent(self, since_ms: int, cluster: str | None = None) -> list[ActionResult]:
        df = self._t.read()
        if df is None:
            return []
        cond = F.coalesce(F.col("finished_ms"), F.col("started_ms")) >= F.lit(since_ms)
        if cluster is not None:
            cond = cond & (F.col("cluster") == cluster)
        return [ActionResult.from_row(r.asDict()) for r in df.where(cond).collect()]
