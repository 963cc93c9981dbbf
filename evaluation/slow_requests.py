"""The slow requests themselves, in a slow-broker finding's evidence.

A slow-broker finding names a broker, an API and a stage from percentiles; an engineer
then wants the requests: which clients, which correlation ids, how each one's time split
across the stages. After the detectors run, each slow-broker detection that names a
broker and an API gets, in ``evidence["slow_requests"]``, the slowest `limit` requests of
that broker and API over the finding's span (not for a slow follower, whose API and
stage are observed on the leaders it holds back), judged as the slow-broker rule judges them
(total time, or total - remote for the purgatory APIs: a Fetch parked by fetch.max.wait.ms
is not slow), from silver.request_exemplars: the requests the edge kept whole (over the
exemplar threshold, the slowest of each key and window, errors, a sample), so the top
`limit` of a span are its true top when request_log.exemplar_slowest >= `limit` (a
request in a span's top is in its own window's top); ``evidence["slow_requests_source"]``
names the table.

One query per evaluation that has such detections (none otherwise; DuckDB over
infra/lake_sql.py): the detections' (cluster, broker, API, span) filters in one read, the
top `limit` per detection by a window function. Quorum (controller-listener) traffic is left
out, as in the rule.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from core.findings import AnomalyType, Detection
from core.signals_sql import judged_sql
from infra.lake_sql import LakeSql, range_sql

LIMIT = 5
EXEMPLARS = "request_exemplars"
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


def slowest_sql(wanted: list[tuple[int, Detection]], columns: Sequence[str], where: str,
                where_params: Sequence, limit: int = LIMIT) -> tuple[str, list]:
    """SQL (of relation ``t``) and its parameters: the top `limit` rows per wanted
    detection (column `_finding`, its index, and `_rank`), by the judged latency
    (`_judged_ms`, core.signals.judged_ms), of the rows meeting `where`. A row in the
    spans of two detections goes to the first (two detections of one broker and API do
    not overlap)."""
    cases, params = [], []
    for i, d in wanted:
        cases.append(f"WHEN cluster = ? AND broker = ? AND api = ? AND ts_ms >= ? "
                     f"AND ts_ms < ? THEN {int(i)}")
        params += [d.cluster, int(d.evidence["broker"]), d.evidence["api"],
                   int(d.first_seen_ms), int(d.last_seen_ms)]
    cols = ", ".join(f'"{c}"' for c in columns)
    sql = (f"SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY _finding ORDER BY "
           "_judged_ms DESC NULLS LAST, ts_ms ASC NULLS FIRST, correlation_id ASC NULLS FIRST) "
           f"AS _rank FROM (SELECT {cols}, CASE {' '.join(cases)} END AS _finding, "
           f"{judged_sql()} AS _judged_ms FROM t WHERE {where} "
           "AND NOT coalesce(is_controller_traffic, false))"
           " WHERE _finding IS NOT NULL) WHERE _rank <= ? ORDER BY _finding, _rank")
    return sql, [*params, *where_params, int(limit)]


def _record(r: dict) -> dict:
    out = {k: r[k] for k in FIELDS}
    out["error_codes"] = list(out["error_codes"] or [])
    out["judged_ms"] = round(float(r["_judged_ms"]), 3)
    out.update({k: None if r[k] is None else round(float(r[k]), 3) for k in TIMES})
    out["kept_because"] = list(r["exemplar_reasons"] or [])
    return out


def attach_slow_requests(sql: LakeSql, detections: list[Detection],
                         *, limit: int = LIMIT) -> list[Detection]:
    """`detections` with each slow-broker one's slow requests in its evidence (module
    docstring); the others, and all of them when the table is missing, as they were."""
    wanted = _wanted(detections)
    if not wanted:
        return detections
    start_ms = min(d.first_seen_ms for _, d in wanted)
    end_ms = max(d.last_seen_ms for _, d in wanted)
    ds = sql.dataset("silver", EXEMPLARS, start_ms=start_ms, end_ms=end_ms)
    if ds is None:
        return detections
    cols = [*FIELDS, *TIMES, "cluster", "broker", "is_controller_traffic", "exemplar_reasons"]
    where, params = range_sql(start_ms, end_ms)
    query, qparams = slowest_sql(wanted, cols, where, params, limit)
    found: dict[int, list[dict]] = {}
    for r in sql.rows(query, qparams, t=ds):
        found.setdefault(r["_finding"], []).append(_record(r))
    out = list(detections)
    for i, d in wanted:
        evidence = {**d.evidence, "slow_requests": found.get(i, []),
                    "slow_requests_source": f"silver.{EXEMPLARS}"}
        out[i] = dataclasses.replace(d, evidence=evidence)
    return out
