"""gold.anomalies: one row per finding, updated in place (MERGE on finding_id) as it
persists and resolves; written by evaluation/detect.py, read by the report, the dashboards and
the on-call queries."""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DateType,
    LongType,
    StringType,
    StructField,
    StructType,
)

ANOMALY_SCHEMA = StructType([
    StructField("finding_id", StringType()),
    StructField("cluster", StringType()),
    StructField("type", StringType()),
    StructField("severity", StringType()),
    StructField("entity_kind", StringType()),
    StructField("entity", StringType()),
    StructField("first_seen_ms", LongType()),
    StructField("last_seen_ms", LongType()),
    StructField("status", StringType()),
    StructField("evidence_json", StringType()),
    StructField("cause", StringType()),
    StructField("explanation", StringType()),
    StructField("suggested_action", StringType()),
    StructField("incident_id", StringType()),
    StructField("related", ArrayType(StringType())),
    StructField("resolved_ms", LongType()),
    StructField("is_root_cause", BooleanType()),
    StructField("date", DateType()),
])

ANOMALY_COLUMNS = {
    "finding_id": "Deterministic id: hash of cluster, type, entity and first_seen's bucket",
    "cluster": "Watched cluster",
    "type": "Anomaly type (core/findings.py AnomalyType)",
    "severity": "critical, high, warning or info",
    "entity_kind": "broker, partition, group, cluster or client",
    "entity": "What the finding is about, e.g. broker:3, orders-2, group:g/orders-2, "
              "client:billing",
    "first_seen_ms": "When the condition was first seen, epoch ms",
    "last_seen_ms": "When it was last seen, epoch ms",
    "status": "open or resolved",
    "evidence_json": "The detector's evidence (every rule's result), JSON",
    "cause": "The detector's cause, e.g. remote_produce_slow_follower",
    "explanation": "One sentence for a human",
    "suggested_action": "What the decision step may do: move_leadership, page_human, ...",
    "incident_id": "finding_id of the incident's root cause (null when linked to nothing)",
    "related": "Findings directly linked to this one by a causal rule",
    "resolved_ms": "When it was resolved (null while open), epoch ms",
    "is_root_cause": "This finding is its incident's root",
    "date": "Partition column: the UTC date of first_seen",
}
