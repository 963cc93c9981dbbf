"""The slow-broker detector's request inputs: the request-log agents' windows.

The agents ship per broker, request key and 10-s window histograms
(ingest/request_windows.py), not a row per request; these reads give the rules their
inputs by merging histograms: exact merges, and percentiles within the bucket scheme's 2 %
(core/latency_histogram.py): DuckDB over infra/lake_sql.py selects the rows, numpy merges
them (evaluation/inputs/histograms.py).

- `RequestStageWindow` <- silver.request_windows: per cluster, broker, API and window, the
  rows of every request key of the API (Fetch:consumer and Fetch:follower are one Fetch,
  Produce's acks one Produce) and every emission merged,
  controller-listener traffic left out; the p99 of each stage, and `total_excl_remote` the
  exact p99 of (total - remote) per request, which slow_broker.rules.judged_latency then
  uses for the purgatory APIs. A window row exists only once the agent closed the window (its
  broker's request times `request_log.lateness_s` past its end), so every window in the
  range whose end is at or before the range end counts; a late delta adds to it later.
- `LatencyBaseline` over the BASELINE_HISTORY_S before the range: the median of the
  minutes' latency per broker and API, minutes with enough requests. The minutes come
  from gold.request_stages_1m as far as it holds them (its total_excl_remote_p99_ms is the
  own time's p99 from the histograms), the newer ones (gold is final about request_windows'
  lateness after a
  minute; at the start, all of them) from a merge of silver.request_windows per broker,
  API and minute. The two give the same minute (the same histograms merged), so the hour
  costs 60 gold rows per broker and API plus a few minutes of silver, not 360 windows.
- `FollowerFetchWindow` <- silver.follower_fetch_windows: the edge computed each fetch's
  gap on its connection; per leader, follower and window the requests summed, the
  longest gap, the p99 of the merged send-time histogram.
- `ClientSendWindow` <- silver.client_send_windows (clients) and follower_fetch_windows
  (the replicas, `follower`): per window, broker, API and client. A send is slow at the
  API's threshold (core.signals.threshold_for): counted from the merged histogram, the
  buckets whose value reaches the threshold (so within 2 % of it). The edge keeps its
  busiest clients and every client with a slow send (at request_log.send_threshold_ms)
  on their own rows and sums the rest in one row (client_id null), which is left out
  here: it holds no client the rules could name. Every row of the range is returned:
  they are few. The replicas' rows and the `FollowerFetchWindow`s
  come from one read and merge of follower_fetch_windows (`read_window_follower_windows`).
- `ProducerServerWindow` <- silver.client_send_windows, Produce rows of the producers
  with round trips (client_rtts.py; the slow-link rule's own-request times): per window,
  broker and client, every Produce key and emission merged, the requests, the TotalTime p50
  and p99 of the merged histogram
  and the share of the requests that followed another on their connection that had
  waited in the socket (counted at the edge, QUEUED_GAP_MS). A producer folded into the
  edge's "other" row has none: the rule then takes the broker's TP99 for it.
- `HeldRequest` <- silver.request_exemplars (the requests the edge kept whole), every API,
  controller-listener traffic left out: those its broker held in its own stages at least
  the lowest watched threshold / peer_ratio, the least hold rule 6b
  (detectors/slow_broker/stalls.py) can count.
"""

from __future__ import annotations

from typing import Iterable

import pyarrow as pa

from core.signals import threshold_for
from core.signals_sql import in_names_sql, in_purgatory_sql, threshold_case_sql
from detectors.slow_broker import (
    ClientSendWindow,
    FollowerFetchWindow,
    HeldRequest,
    LatencyBaseline,
    RequestStageWindow,
    SlowBrokerSection,
)
from detectors.slow_client import ProducerServerWindow
from detectors.slow_broker.rules import MIN_HISTORY_WINDOWS
from core.signals import OWN_STAGES
from infra.lake_sql import LakeSql, marks, range_sql, utc_date
from evaluation.inputs.slow_broker import BASELINE_HISTORY_S, BASELINE_MINUTE_MIN_REQUESTS
from evaluation.inputs.histograms import first_bucket_at_or_over, merged_rows, valued
from evaluation.inputs.tables import TimeRange, sorted_rows
from jobs.gold_windows import OWN_TIME, OWN_TIME_P99

# Stage columns of silver.request_windows -> RequestStageWindow fields.
STAGE_FIELDS = {"total": "total_p99_ms", "request_queue": "request_queue_p99_ms",
                "local": "local_p99_ms", "remote": "remote_p99_ms",
                "throttle": "throttle_p99_ms", "response_queue": "response_queue_p99_ms",
                "send": "send_p99_ms", "total_minus_remote": "total_excl_remote_p99_ms"}
P99 = (0.99,)


def read_window_stage_windows(sql: LakeSql, config: SlowBrokerSection,
                              r: TimeRange) -> list[RequestStageWindow]:
    ds = sql.dataset("silver", "request_windows", start_ms=r.start_ms, end_ms=r.end_ms)
    if ds is None:
        return []
    where, params = _closed_windows_sql(r, config)
    watched = in_names_sql(config.watched_apis)
    source = (f"SELECT * FROM t WHERE {where} AND {watched} "
              "AND NOT coalesce(is_controller_traffic, false)")
    rows = merged_rows(sql, source, params, {"t": ds}, ["cluster", "broker", "api", "ts_ms"],
                       tuple(STAGE_FIELDS), P99)
    return [RequestStageWindow(
        cluster=x["cluster"], broker=int(x["broker"]), api=x["api"],
        window_start_ms=int(x["ts_ms"]), requests=int(x["requests"]),
        **{f: float(valued(x, s, 0) or 0.0) for s, f in STAGE_FIELDS.items()})
        for x in sorted_rows(rows, ("cluster", "broker", "api", "ts_ms"))]


def _closed_windows_sql(r: TimeRange, config: SlowBrokerSection) -> tuple[str, list]:
    """Window rows (ts_ms = window start) of the slow-broker window length inside the
    range, as a condition and its parameters."""
    where, params = range_sql(r.start_ms, r.end_ms)
    return (f"{where} AND ts_ms + window_ms <= ? AND window_ms = ?",
            [*params, int(r.end_ms), int(config.window_ms)])


def _threshold_bucket_sql(config: SlowBrokerSection) -> str:
    """SQL over the api column: the first bucket id at or over the API's slow threshold
    (core.signals.threshold_for: api_threshold_ms, else threshold_ms)."""
    return threshold_case_sql(config.threshold_ms, config.api_threshold_ms,
                              value=lambda ms: str(first_bucket_at_or_over(ms)))


def read_window_baselines(sql: LakeSql, config: SlowBrokerSection, r: TimeRange,
                          min_minutes: int = MIN_HISTORY_WINDOWS) -> list[LatencyBaseline]:
    """The baselines over BASELINE_HISTORY_S before the range: per broker and watched API
    the median (nearest rank, as core.latency_histogram's quantiles) of its minutes'
    judged latency (the own-time p99 for purgatory APIs, else the total's), minutes with
    BASELINE_MINUTE_MIN_REQUESTS requests or more, when there are `min_minutes` of them.
    The minutes gold.request_stages_1m holds already (one row per broker, API and minute,
    with the own-time p99), the newer ones merged from silver.request_windows'
    histograms: the same histograms merged, so the same minute."""
    history = TimeRange(r.start_ms - BASELINE_HISTORY_S * 1000, r.start_ms)
    watched = in_names_sql(config.watched_apis)
    parts, silver_from = [], history.start_ms
    gold = sql.dataset("gold", "request_stages_1m", start_ms=history.start_ms,
                       end_ms=history.end_ms)
    if gold is not None and OWN_TIME_P99 in sql.columns("gold", "request_stages_1m"):
        minutes = sql.table(
            "SELECT cluster, broker, api, epoch_ms(window_start) AS minute_ms, requests, "
            f"total_p99_ms, {OWN_TIME_P99} AS own_p99_ms, epoch_ms(window_end) AS end_ms "
            "FROM t WHERE date BETWEEN ? AND ? AND epoch_ms(window_start) >= ? "
            f"AND epoch_ms(window_end) <= ? AND {watched} AND {OWN_TIME_P99} IS NOT NULL",
            [utc_date(history.start_ms), utc_date(history.end_ms), history.start_ms,
             history.end_ms], t=gold)
        if minutes.num_rows:
            parts.append(minutes.drop(["end_ms"]))
            silver_from = max(minutes.column("end_ms").to_pylist())
    windows = sql.dataset("silver", "request_windows", start_ms=silver_from,
                          end_ms=history.end_ms)
    if windows is not None and silver_from < history.end_ms:
        where, params = _closed_windows_sql(TimeRange(silver_from, history.end_ms), config)
        source = (f"SELECT *, ts_ms - ts_ms % 60000 AS minute_ms FROM t WHERE {where} "
                  f"AND {watched} AND NOT coalesce(is_controller_traffic, false)")
        group = ["cluster", "broker", "api", "minute_ms"]
        merged = merged_rows(sql, source, params, {"t": windows}, group, ("total", OWN_TIME),
                             P99)
        if merged:
            parts.append(pa.Table.from_pylist([
                {**{c: x[c] for c in group}, "requests": x["requests"],
                 "total_p99_ms": valued(x, "total", 0), "own_p99_ms": valued(x, OWN_TIME, 0)}
                for x in merged], schema=parts[0].schema if parts else None))
    if not parts:
        return []
    rows = sql.rows(
        "SELECT cluster, broker, api, quantile_disc(CASE WHEN "
        f"{in_purgatory_sql('api')} THEN own_p99_ms ELSE total_p99_ms END, 0.5) AS p99_ms "
        "FROM minutes WHERE requests >= ? GROUP BY cluster, broker, api "
        "HAVING count(*) >= ?", [BASELINE_MINUTE_MIN_REQUESTS, int(min_minutes)],
        minutes=pa.concat_tables(parts, promote_options="default"))
    return [LatencyBaseline(x["cluster"], int(x["broker"]), x["api"], float(x["p99_ms"]))
            for x in sorted_rows(rows, ("cluster", "broker", "api"))]


def read_window_follower_windows(sql: LakeSql, config: SlowBrokerSection,
                                 r: TimeRange) -> list[FollowerFetchWindow | ClientSendWindow]:
    """silver.follower_fetch_windows read and merged once for both of its uses: per leader,
    follower and closed window, the `FollowerFetchWindow` and, when the rules watch Fetch,
    the replica's `ClientSendWindow` (``follower``). The two group the same rows the same
    way; one read instead of two is a scan and a merge less per evaluation."""
    ds = sql.dataset("silver", "follower_fetch_windows", start_ms=r.start_ms,
                     end_ms=r.end_ms)
    if ds is None:
        return []
    where, params = _closed_windows_sql(r, config)
    group = ["cluster", "ts_ms", "broker", "follower"]
    sends = "Fetch" in config.watched_apis
    threshold = str(first_bucket_at_or_over(
        threshold_for("Fetch", config.threshold_ms, config.api_threshold_ms)))
    rows = merged_rows(sql, f"SELECT * FROM t WHERE {where}", params, {"t": ds}, group,
                       ("send",), P99, extra={"max_gap": ("max", "max_fetch_gap_ms")},
                       at_or_over={"send": threshold} if sends else None)
    rows = sorted_rows(rows, group)
    out: list[FollowerFetchWindow | ClientSendWindow] = [FollowerFetchWindow(
        cluster=x["cluster"], window_start_ms=int(x["ts_ms"]), leader=int(x["broker"]),
        follower=int(x["follower"]), requests=int(x["requests"]),
        max_fetch_gap_ms=None if x["max_gap"] is None else float(x["max_gap"]),
        send_p99_ms=float(valued(x, "send", 0) or 0.0)) for x in rows]
    if sends:
        out += [ClientSendWindow(
            cluster=x["cluster"], window_start_ms=int(x["ts_ms"]), broker=int(x["broker"]),
            client_id=f"broker-{int(x['follower'])}", requests=int(x["requests"]),
            send_p99_ms=float(valued(x, "send", 0) or 0.0), api="Fetch",
            slow_requests=int(x["send_at_or_over"]), follower=True) for x in rows]
    return out


def read_window_client_sends(sql: LakeSql, config: SlowBrokerSection,
                             r: TimeRange) -> list[ClientSendWindow]:
    """The clients' send windows (the replicas' come from `read_window_follower_windows`)."""
    ds = sql.dataset("silver", "client_send_windows", start_ms=r.start_ms, end_ms=r.end_ms)
    if ds is None:
        return []
    where, params = _closed_windows_sql(r, config)
    watched = in_names_sql(config.watched_apis)
    group = ["cluster", "ts_ms", "broker", "api", "client_id"]
    rows = merged_rows(sql, f"SELECT * FROM t WHERE {where} AND {watched} "
                       "AND client_id IS NOT NULL", params, {"t": ds}, group, ("send",), P99,
                       at_or_over={"send": _threshold_bucket_sql(config)})
    return [ClientSendWindow(cluster=x["cluster"], window_start_ms=int(x["ts_ms"]),
                             broker=int(x["broker"]), client_id=x["client_id"],
                             requests=int(x["requests"]),
                             send_p99_ms=float(valued(x, "send", 0) or 0.0), api=x["api"],
                             slow_requests=int(x["send_at_or_over"]), follower=False)
            for x in sorted_rows(rows, group)]


def read_window_producer_times(sql: LakeSql, config: SlowBrokerSection,
                               r: TimeRange, producers: Iterable[str]
                               ) -> list[ProducerServerWindow]:
    """The given producers' own Produce requests per closed window, broker and client
    (module docstring)."""
    wanted = sorted(set(producers))
    ds = (sql.dataset("silver", "client_send_windows", start_ms=r.start_ms, end_ms=r.end_ms)
          if wanted else None)
    if ds is None:
        return []
    where, params = _closed_windows_sql(r, config)
    source = (f"SELECT * FROM t WHERE {where} AND api = 'Produce' "
              f"AND followed IS NOT NULL AND client_id IN ({marks(wanted)})")
    rows = merged_rows(sql, source, [*params, *wanted], {"t": ds},
                       ["cluster", "ts_ms", "broker", "client_id"], ("total",), (0.5, 0.99),
                       totals=("requests", "followed", "queued"))
    return producer_windows_from(
        {"cluster": x["cluster"], "window_start_ms": x["ts_ms"], "broker": x["broker"],
         "client_id": x["client_id"], "requests": x["requests"], "followed": x["followed"],
         "queued": x["queued"], "total_p": [valued(x, "total", 0), valued(x, "total", 1)]}
        for x in rows)


def producer_windows_from(rows: Iterable) -> list[ProducerServerWindow]:
    """Rows of (cluster, window_start_ms, broker, client_id, requests, total_p [p50, p99],
    followed, queued) as ProducerServerWindows, in window order."""
    return [ProducerServerWindow(cluster=x["cluster"], window_start_ms=int(x["window_start_ms"]),
                                 broker=int(x["broker"]), client_id=x["client_id"],
                                 requests=int(x["requests"]),
                                 total_p99_ms=float(x["total_p"][1] or 0.0),
                                 total_p50_ms=float(x["total_p"][0] or 0.0),
                                 queued_share=(x["queued"] / x["followed"] if x["followed"]
                                               else None))
            for x in sorted_rows(rows, ("cluster", "window_start_ms", "broker", "client_id"))]


def read_held_requests(sql: LakeSql, config: SlowBrokerSection,
                       r: TimeRange) -> list[HeldRequest]:
    """The requests kept whole in the range that their brokers held in their own stages
    at least the least hold rule 6b counts (module docstring), in the order they ended."""
    if not config.watched_apis:          # no row is judged: no stall to compare
        return []
    ds = sql.dataset("silver", "request_exemplars", start_ms=r.start_ms, end_ms=r.end_ms)
    if ds is None:
        return []
    floor = min(threshold_for(api, config.threshold_ms, config.api_threshold_ms)
                for api in config.watched_apis) / config.peer_ratio
    held = " + ".join(f"coalesce({s}_ms, 0)" for s in OWN_STAGES)
    where, params = range_sql(r.start_ms, r.end_ms)
    rows = sql.rows(
        f"SELECT cluster, broker, api, ts_ms, total_ms, {held} AS held_ms FROM t "
        f"WHERE {where} AND NOT coalesce(is_controller_traffic, false) AND {held} >= ? "
        "ORDER BY cluster, ts_ms, broker", [*params, floor], t=ds)
    return [HeldRequest(x["cluster"], int(x["broker"]), x["api"], int(x["ts_ms"]),
                        float(x["total_ms"] or 0.0), float(x["held_ms"])) for x in rows]
