"""The slow requests themselves, in a slow-broker finding's evidence.

A slow-broker finding names a broker, an API and a stage from percentiles; an engineer
then wants the requests: which clients, which correlation ids, how each one's time split
across the stages. After the detectors run, each slow-broker detection that names a
broker and an API gets, in ``evidence["slow_requests"]``, the slowest `limit` requests of
that broker and API over the finding's span (not for a slow follower, whose API and
stage are observed on the leaders it holds back), judged as the slow-broker rule judges them
(total time, or total - remote for the purgatory APIs: a Fetch parked by fetch.max.wait.ms
is not slow):

- in the request-log windows mode, from silver.request_exemplars: the requests the edge
  kept whole (over the exemplar threshold, the slowest of each window, errors, a sample);
  ``evidence["slow_requests_source"]`` says so;
- in the full mode, from silver.request_stages, every request.

One Spark job per evaluation that has such detections (none otherwise): the detections'
(cluster, broker, API, span) filters OR-ed in one read, the top `limit` per detection by a
window function. Quorum (controller-listener) traffic is left out, as in the rule.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from core.findings import AnomalyType, Detection
from infra.lake import Lake
from jobs.detector_inputs.slow_broker import _norm_api, _norm_names
from jobs.detector_inputs.tables import TimeRange, silver_range, table

LIMIT = 5
EXEMPLARS, STAGES_TABLE = "request_exemplars", "request_stages"
# Per request: these columns, rounded ms for the times.
TIMES = ("total_ms", "request_queue_ms", "local_ms", "remote_ms", "throttle_ms",
         "response_queue_ms", "send_ms")
FIELDS = ("ts_ms", "api", "client_id", "correlation_id", "principal", "remote_addr",
          "partition_count", "request_bytes", "response_bytes", "error_codes")


def _wanted(detections: Sequence[Detection]) -> list[tuple[int, Detection]]:
    return [(i, d) for i, d in enumerate(detections)
            if d.type is AnomalyType.SLOW_BROKER and isinstance(d.evidence.get("broker"), int)
            and isinstance(d.evidence.get("api"), str)
            # a slow follower's API and stage are observed on the leaders it holds back:
            # its own requests of that API are not the slow ones
            and "stage_observed_on" not in d.evidence]


def _span_filter(i: int, d: Detection):
    return (F.when((F.col("cluster") == d.cluster) & (F.col("broker") == d.evidence["broker"])
                   & (F.col("api") == d.evidence["api"])
                   & (F.col("ts_ms") >= d.first_seen_ms) & (F.col("ts_ms") < d.last_seen_ms),
                   F.lit(i)))


def slowest(rows: DataFrame, wanted: list[tuple[int, Detection]],
            purgatory_apis: Sequence[str], limit: int = LIMIT) -> DataFrame:
    """The top `limit` rows per wanted detection (column `_finding`, its index), by the
    judged latency (`_judged_ms`). A row in the spans of two detections goes to the first
    (two detections of one broker and API do not overlap)."""
    which = F.coalesce(*[_span_filter(i, d) for i, d in wanted])
    purgatory = _norm_api().isin(_norm_names(purgatory_apis))   # as the rule names them
    judged = F.when(purgatory, F.greatest(F.col("total_ms") - F.coalesce(F.col("remote_ms"),
                                                                        F.lit(0.0)),
                                          F.lit(0.0))).otherwise(F.col("total_ms"))
    picked = (rows.where(~F.coalesce(F.col("is_controller_traffic"), F.lit(False)))
              .withColumn("_finding", which).where(F.col("_finding").isNotNull())
              .withColumn("_judged_ms", judged))
    rank = F.row_number().over(Window.partitionBy("_finding").orderBy(
        F.col("_judged_ms").desc(), F.col("ts_ms"), F.col("correlation_id")))
    return picked.withColumn("_rank", rank).where(F.col("_rank") <= limit)


def _record(r: dict, reasons: bool) -> dict:
    out = {k: r[k] for k in FIELDS}
    out["error_codes"] = list(out["error_codes"] or [])
    out["judged_ms"] = round(float(r["_judged_ms"]), 3)
    out.update({k: None if r[k] is None else round(float(r[k]), 3) for k in TIMES})
    if reasons:
        out["kept_because"] = list(r["exemplar_reasons"] or [])
    return out


def attach_slow_requests(spark: SparkSession, lake: Lake, detections: list[Detection],
                         *, windows_mode: bool, purgatory_apis: Sequence[str],
                         limit: int = LIMIT) -> list[Detection]:
    """`detections` with each slow-broker one's slow requests in its evidence (module
    docstring); the others, and all of them when the table is missing, as they were."""
    wanted = _wanted(detections)
    if not wanted:
        return detections
    name = EXEMPLARS if windows_mode else STAGES_TABLE
    rows = table(spark, lake, "silver", name)
    if rows is None:
        return detections
    cols = [*FIELDS, *TIMES, "cluster", "broker", "is_controller_traffic",
            *(["exemplar_reasons"] if windows_mode else [])]
    span = TimeRange(min(d.first_seen_ms for _, d in wanted),
                     max(d.last_seen_ms for _, d in wanted))
    top = slowest(silver_range(rows, span).select(*cols), wanted, purgatory_apis, limit)
    found: dict[int, list[dict]] = {}
    for r in top.orderBy("_finding", "_rank").collect():
        found.setdefault(r["_finding"], []).append(_record(r.asDict(), windows_mode))
    out = list(detections)
    for i, d in wanted:
        evidence = {**d.evidence, "slow_requests": found.get(i, []),
                    "slow_requests_source": f"silver.{name}"}
        out[i] = dataclasses.replace(d, evidence=evidence)
    return out
