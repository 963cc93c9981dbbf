"""The slow-broker detector's inputs, from silver.request_stages, its gold windows and
silver.log_events.

- `RequestStageWindow` <- gold.request_stages_10s: the closed windows that start at or
  after start_ms and end at or before end_ms, watched APIs only. The table's window must
  equal slow_broker.window_s (`jobs.detector_inputs.check_config`). Past the newest window
  that table holds (its query releases a window only at its next micro-batch after the
  watermark passed it: a trigger or two behind), the windows come from
  silver.request_stages with the same definition (jobs.gold.stage_percentiles). A window
  of a cluster counts once every broker of that cluster has its newest row in silver
  WINDOW_CLOSE_SLACK_MS past the window's end (a broker's rows come in time
  order), and at the latest, as in the streaming query, once the newest row of any broker
  is pipeline.fast_watermark_s past it (`fresh_windows_until`). So the detector sees a
  window as soon as silver has all of it, and with pipeline.fast_stage_table = false (no
  10-s query: one stateful query fewer on a small machine) every window comes from silver.
- `LatencyBaseline` <- gold.request_stages_1m over the BASELINE_HISTORY_S before start_ms:
  per broker/API the median of the minutes' latency (`latency_column`,
  slow_broker.rules.judged_latency's definition: Remote left out for purgatory APIs),
  minutes with enough traffic only (BASELINE_MINUTE_MIN_REQUESTS), and only when at least
  MIN_HISTORY_WINDOWS minutes exist (else the rule's own in-input baseline is used). The
  baseline ends at start_ms, so a slowness that lasts longer than half of
  BASELINE_HISTORY_S becomes the baseline: the peer comparison still catches it. Cached by
  `BaselineCache`.
- `FollowerFetchWindow` <- silver.request_stages, Fetch with fetch_kind = 'follower'
  outside the controller listener: per connection (leader, follower, remote_addr) in
  time order, gap = arrival (ts_ms - total_ms) minus the previous fetch's completion,
  floored at 0; per leader/follower/window: count, max gap, p99 of send_ms.
  FOLLOWER_GAP_SEED_S before start_ms are read so the first fetch of the range has a gap.
- `ClientSendWindow`: jobs/detector_inputs/client_sends.py.
- `IsrShrink` <- silver.log_events kind isr_shrink (leader = broker), plus isr_update
  ("ISR updated to ...", which names only the new ISR) when it removes replicas from the
  ISR last known for that partition on that broker (from any isr_*/leader_change line of
  the ISR_SEED_S before it) and no isr_shrink line already reported the same change
  (`shrinks_from_isr_events`).

silver.request_stages is read once per evaluation for the stage windows, the follower
fetches and the client sends (`request_stage_rows`).
"""

from __future__ import annotations

import functools
from collections import defaultdict
from typing import Any, Callable, Iterable, Mapping

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from core.signals_sql import in_purgatory_sql
from detectors.slow_broker import (
    STAGES,
    BrokerOutage,
    BrokerState,
    BrokerStateChange,
    FollowerFetchWindow,
    IsrShrink,
    LatencyBaseline,
    RequestStageWindow,
    SlowBrokerSection,
)
from detectors.slow_broker.detect import MIN_HISTORY_WINDOWS
from detectors.slow_broker.handovers import LeadershipGain
from detectors.slow_broker.outages import (UNREACHABLE_GAP_MS, BrokerUnreachable,
                                           broker_outages, unreachable_outages)
from infra.lake import Lake
from jobs.detector_inputs.tables import TimeRange, gold_windows, in_range, silver_range, table

# How much history before the range each input reads (see the module docstring).
BASELINE_HISTORY_S = 3600
FOLLOWER_GAP_SEED_S = 60
ISR_SEED_S = 600
# An "ISR updated to" line this soon after a "Shrinking ISR" line to the same ISR confirms
# that shrink rather than reporting another.
ISR_CONFIRM_S = 30
# A window counts as closed once every broker of its cluster has a row this far past its
# end: a broker logs its requests in time order, and 1 s covers its log's flush.
WINDOW_CLOSE_SLACK_MS = 1000
# A minute with fewer requests is too thin to describe a broker's usual latency: left out
# of the baseline.
BASELINE_MINUTE_MIN_REQUESTS = 50

# The columns of silver.request_stages that the slow-broker reads use (with the stage
# timings, jobs.gold.STAGES).
REQUEST_STAGE_KEYS = ("cluster", "broker", "api", "ts", "ts_ms", "is_controller_traffic",
                      "fetch_kind", "fetch_replica_id", "remote_addr", "correlation_id",
                      "client_id")


def _window_start(window_ms: int) -> Column:
    # The same epoch-aligned windows as F.window(ts, "<window_s> seconds") in jobs/gold.py.
    return F.col("ts_ms") - F.pmod(F.col("ts_ms"), F.lit(window_ms))


def gap_after_previous(*connection: str) -> Column:
    """Per request line, the ms from the broker answering the request before it on its
    connection (`connection`: the columns that make one) to this one's arrival (its line's
    time minus its TotalTime); null for the first. The broker reads a connection's next
    request only once it has answered the one before."""
    conn = Window.partitionBy(*connection).orderBy("ts_ms", "correlation_id")
    return (F.col("ts_ms") - F.col("total_ms")) - F.lag("ts_ms").over(conn)


def _p99_columns() -> list[str]:
    return [f"{s}_p99_ms" for s in ("total", *STAGES)]


def latency_column(config: SlowBrokerSection) -> Column:
    """slow_broker.rules.judged_latency as a Spark column over a gold stage-percentile
    row."""
    own = F.greatest(F.col("total_p99_ms") - F.col("remote_p99_ms"),
                     *[F.col(f"{s}_p99_ms") for s in STAGES if s != "remote"], F.lit(0.0))
    return (F.when(F.expr(in_purgatory_sql("api")), own)
            .otherwise(F.col("total_p99_ms")))


# --- silver.request_stages, read once ---------------------------------------------------------

def _request_stages(spark: SparkSession, lake: Lake, r: TimeRange) -> DataFrame | None:
    df = table(spark, lake, "silver", "request_stages")
    if df is None:
        return None
    return silver_range(df, r).where(~F.coalesce(F.col("is_controller_traffic"), F.lit(False)))


def request_stage_rows(spark: SparkSession, lake: Lake, r: TimeRange) -> DataFrame | None:
    """silver.request_stages over the range (client traffic, the columns the reads use),
    read once and kept (localCheckpoint) for the stage windows, the follower fetches and
    the client sends of one evaluation: three scans of the table's biggest range, each with
    Delta's file filtering job, become one. Free it with `jobs.silver.release`."""
    from jobs.gold import STAGES as STAGE_TIMINGS

    df = _request_stages(spark, lake, r)
    if df is None:
        return None
    return df.select(*REQUEST_STAGE_KEYS, *STAGE_TIMINGS).localCheckpoint(eager=True)


def _stages_in(spark: SparkSession, lake: Lake, r: TimeRange,
               stages: DataFrame | None) -> DataFrame | None:
    """The range of `stages` (already read), or silver.request_stages read for it."""
    return _request_stages(spark, lake, r) if stages is None else in_range(stages, r)


# --- stage windows ------------------------------------------------------------------------------

def stage_window_from_row(x: Mapping[str, Any]) -> RequestStageWindow:
    """One stage-percentile row (gold's columns, window_start_ms) as a RequestStageWindow;
    a missing percentile counts as 0 ms."""
    return RequestStageWindow(
        cluster=x["cluster"], broker=int(x["broker"]), api=x["api"],
        window_start_ms=int(x["window_start_ms"]), requests=int(x["requests"]),
        **{c: float(x[c] or 0.0) for c in _p99_columns()})


def read_stage_windows(spark: SparkSession, lake: Lake, config: SlowBrokerSection,
                       r: TimeRange, settle_ms: int, stages: DataFrame | None = None
                       ) -> list[RequestStageWindow]:
    """Closed stage windows of the range: gold.request_stages_10s, then silver past it.
    `stages`: silver.request_stages already read for (at least) the range (see
    `request_stage_rows`); None reads it here."""
    df = table(spark, lake, "gold", "request_stages_10s")
    rows = [] if df is None else _stage_window_rows(gold_windows(df, r), config)
    covered_until = max((int(x["window_start_ms"]) + config.window_ms for x in rows),
                        default=r.start_ms)
    if r.end_ms - covered_until >= config.window_ms:   # room for one more window
        rows += _fresh_stage_window_rows(spark, lake, config,
                                         TimeRange(covered_until, r.end_ms), settle_ms, stages)
    return [stage_window_from_row(x) for x in rows]


def _stage_window_rows(windows: DataFrame, config: SlowBrokerSection) -> list:
    """Rows of a stage-percentile frame (gold's columns) for the watched APIs."""
    return (windows.where(F.col("api").isin(list(config.watched_apis)))
            .where(F.unix_millis("window_end") - F.unix_millis("window_start")
                   == config.window_ms)
            .select("cluster", "broker", "api",
                    F.unix_millis("window_start").alias("window_start_ms"), "requests",
                    *_p99_columns())
            .collect())


def fresh_windows_until(newest_by_broker: Mapping[tuple[str, Any], int], r: TimeRange,
                        settle_ms: int, slack_ms: int) -> dict[str, int]:
    """Per cluster, windows ending at or before this are closed. `newest_by_broker`: each
    (cluster, broker)'s newest row in silver. A broker logs its requests in time order and
    its rows reach silver in that order, so a cluster's window is complete once every one
    of its brokers' rows are `slack_ms` past its end; at the latest it closes as the
    streaming query's would (watermark = newest row of any broker of any cluster -
    settle), so a broker that stopped logging holds nothing back longer than that, and a
    cluster's brokers hold back no other cluster's windows. Never past the range end. A
    cluster with no rows has no entry."""
    if not newest_by_broker:
        return {}
    watermark = max(newest_by_broker.values()) - settle_ms
    slowest: dict[str, int] = {}
    for (cluster, _broker), newest in newest_by_broker.items():
        slowest[cluster] = min(newest, slowest.get(cluster, newest))
    return {cluster: min(r.end_ms, max(watermark, oldest - slack_ms))
            for cluster, oldest in slowest.items()}


def _fresh_stage_window_rows(spark: SparkSession, lake: Lake, config: SlowBrokerSection,
                             r: TimeRange, settle_ms: int,
                             stages: DataFrame | None = None) -> list:
    from jobs.gold import stage_percentiles

    df = _stages_in(spark, lake, r, stages)
    if df is None:
        return []
    newest = {(x["cluster"], x["broker"]): int(x["newest_ms"]) for x in
              df.groupBy("cluster", "broker").agg(F.max("ts_ms").alias("newest_ms")).collect()}
    until = {c: u for c, u in fresh_windows_until(
        newest, r, settle_ms, WINDOW_CLOSE_SLACK_MS).items()
        if u - r.start_ms >= config.window_ms}
    if not until:
        return []

    def before_until(ts: Column, inclusive: bool) -> Column:
        return functools.reduce(Column.__or__, [
            (F.col("cluster") == c) & (ts <= u if inclusive else ts < u)
            for c, u in sorted(until.items())])

    closed = stage_percentiles(df.where(before_until(F.col("ts_ms"), False)),
                               f"{config.window_s:g} seconds")
    return _stage_window_rows(
        closed.where((F.unix_millis("window_start") >= r.start_ms)
                     & before_until(F.unix_millis("window_end"), True)), config)


# --- baselines ----------------------------------------------------------------------------------

def read_baselines(spark: SparkSession, lake: Lake, config: SlowBrokerSection,
                   r: TimeRange) -> list[LatencyBaseline]:
    df = table(spark, lake, "gold", "request_stages_1m")
    if df is None:
        return []
    history = TimeRange(r.start_ms - BASELINE_HISTORY_S * 1000, r.start_ms)
    return baselines_from_minutes(
        gold_windows(df, history).where(F.col("api").isin(list(config.watched_apis))),
        latency_column(config), config)


def baselines_from_minutes(minutes: DataFrame, latency: Column, config: SlowBrokerSection,
                           min_minutes: int = MIN_HISTORY_WINDOWS) -> list[LatencyBaseline]:
    """Per broker/API the median of its minutes' `latency`, minutes with enough requests
    only (BASELINE_MINUTE_MIN_REQUESTS), when there are `min_minutes` of them."""
    rows = (minutes.where(F.col("requests") >= BASELINE_MINUTE_MIN_REQUESTS)
            .groupBy("cluster", "broker", "api")
            .agg(F.percentile_approx(latency, 0.5, 10_000).alias("p99_ms"),
                 F.count(F.lit(1)).alias("minutes"))
            .where(F.col("minutes") >= min_minutes)
            .collect())
    return [LatencyBaseline(x["cluster"], int(x["broker"]), x["api"], float(x["p99_ms"]))
            for x in rows]


class BaselineCache:
    """The slow-broker baselines (medians over the hour of gold.request_stages_1m before
    the range) move by a minute's worth at most per minute: read them again only when the
    range start has moved `refresh_s` past the last read. A live evaluation then saves
    one read most of the time; a replay passes no cache and reads every step."""

    def __init__(self, refresh_s: float = 60.0):
        self.refresh_ms = int(refresh_s * 1000)
        self._value: list[LatencyBaseline] = []
        self._start_ms: int | None = None

    def __call__(self, start_ms: int, read: Callable[[], list[LatencyBaseline]]
                 ) -> list[LatencyBaseline]:
        if (self._start_ms is None or start_ms < self._start_ms
                or start_ms - self._start_ms >= self.refresh_ms):
            self._value = read()
            self._start_ms = start_ms
        return self._value


# --- follower fetches ---------------------------------------------------------------------------

def read_follower_fetches(spark: SparkSession, lake: Lake, config: SlowBrokerSection,
                          r: TimeRange, stages: DataFrame | None = None
                          ) -> list[FollowerFetchWindow]:
    df = _stages_in(spark, lake, r.back(FOLLOWER_GAP_SEED_S), stages)
    if df is None:
        return []
    gap = F.greatest(gap_after_previous("cluster", "broker", "fetch_replica_id", "remote_addr"),
                     F.lit(0.0))
    win = config.window_ms
    rows = (df.where((F.col("fetch_kind") == "follower") & F.col("fetch_replica_id").isNotNull())
            .select("cluster", "broker", "fetch_replica_id", "ts_ms", "send_ms",
                    gap.alias("gap_ms"), _window_start(win).alias("window_start_ms"))
            .where((F.col("window_start_ms") >= r.start_ms)
                   & (F.col("window_start_ms") + win <= r.end_ms))
            .groupBy("cluster", "window_start_ms", "broker", "fetch_replica_id")
            .agg(F.count(F.lit(1)).alias("requests"), F.max("gap_ms").alias("max_gap"),
                 F.percentile_approx("send_ms", 0.99, 10_000).alias("send_p99"))
            .collect())
    return [FollowerFetchWindow(
        cluster=x["cluster"], window_start_ms=int(x["window_start_ms"]), leader=int(x["broker"]),
        follower=int(x["fetch_replica_id"]), requests=int(x["requests"]),
        max_fetch_gap_ms=None if x["max_gap"] is None else float(x["max_gap"]),
        send_p99_ms=float(x["send_p99"] or 0.0)) for x in rows]


# --- leadership gains, outages, ISR shrinks (from silver.log_events) -----------------------------

def leadership_gains_from(events: Iterable[Mapping[str, Any]], since_ms: int
                          ) -> list[LeadershipGain]:
    """When brokers became leaders: each "[Broker id=B] Leader <tp> ... starts at leader
    epoch" line a broker logged about itself (kind leader_change, new_leader = broker) at
    or after since_ms (detectors/slow_broker/handovers.py)."""
    return sorted((LeadershipGain(e["cluster"], int(e["broker"]), int(e["ts_ms"]), e["topic"],
                                  int(e["partition"]))
                   for e in events
                   if e["kind"] == "leader_change" and e.get("new_leader") is not None
                   and e["new_leader"] == e["broker"] and (e.get("leader_epoch") or 0) > 0
                   and e["ts_ms"] >= since_ms
                   and e.get("topic") is not None and e.get("partition") is not None),
                  key=lambda g: g.event_ms)


def outages_from(events: Iterable[Mapping[str, Any]], config: SlowBrokerSection
                 ) -> list[BrokerOutage]:
    """When brokers were out, from the controller's broker_fenced / broker_shutdown /
    broker_registered / broker_unfenced lines and the other brokers' broker_unreachable
    lines (detectors/slow_broker/outages.py)."""
    states = {s.value for s in BrokerState}
    events = [e for e in events if e.get("subject_broker") is not None]
    changes = [BrokerStateChange(e["cluster"], int(e["subject_broker"]), int(e["ts_ms"]),
                                 BrokerState(e["kind"]))
               for e in events if e["kind"] in states]
    sightings = [BrokerUnreachable(e["cluster"], int(e["subject_broker"]), int(e["ts_ms"]),
                                   int(e["broker"]))
                 for e in events if e["kind"] == "broker_unreachable"]
    grace_ms = int(config.disruption_grace_s * 1000)
    return (broker_outages(changes,
                           session_timeout_ms=int(config.broker_session_timeout_s * 1000),
                           grace_ms=grace_ms)
            + unreachable_outages(sightings, gap_ms=UNREACHABLE_GAP_MS, grace_ms=grace_ms))


def shrinks_from_isr_events(rows: Iterable[Mapping[str, Any]], since_ms: int,
                            confirm_window_ms: int = ISR_CONFIRM_S * 1000) -> list[IsrShrink]:
    """ISR shrinks at or after since_ms from log_events rows of kinds isr_shrink,
    isr_update, isr_expand and leader_change (rows before since_ms give the ISR known).

    A "Shrinking ISR" line is a shrink. An "ISR updated to" line is one when it drops
    replicas from the ISR last known for the partition on that broker, unless a shrink
    line to the same ISR came shortly before it (the update confirms that shrink).
    """
    keyed: dict[tuple, list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        if r.get("topic") is None or r.get("partition") is None:
            continue
        keyed[(r["cluster"], int(r["broker"]), r["topic"], int(r["partition"]))].append(r)
    out: list[IsrShrink] = []
    for (cluster, broker, topic, partition), events in keyed.items():
        events.sort(key=lambda r: int(r["ts_ms"]))
        known: tuple[int, ...] | None = None
        last_shrink: tuple[int, tuple[int, ...]] | None = None   # (time, isr after)
        for r in events:
            t, kind = int(r["ts_ms"]), r["kind"]
            after = tuple(r.get("isr_after") or ())
            if kind == "leader_change" and r.get("new_leader") != broker:
                continue  # a follower's line says nothing about the leader's ISR
            if not after:
                continue
            before = tuple(r.get("isr_before") or ()) or known
            if kind == "isr_shrink":
                if t >= since_ms and before:
                    out.append(IsrShrink(cluster, t, broker, topic, partition, before, after))
                last_shrink = (t, after)
            elif kind == "isr_update" and known and set(known) - set(after):
                confirmed = (last_shrink is not None and set(last_shrink[1]) == set(after)
                             and t - last_shrink[0] <= confirm_window_ms)
                if t >= since_ms and not confirmed:
                    out.append(IsrShrink(cluster, t, broker, topic, partition, known, after))
            known = after
    return sorted(out, key=lambda s: (s.event_ms, s.cluster, s.leader, s.topic, s.partition))
