"""The detectors' Spark side: read a time range of the lake and build the rules' inputs.

The rule modules (slow_broker, offset_rewind, compaction_lag, unclean_election) are pure:
they take lists of small dataclasses. This module, the only detector module that imports
pyspark, reads [start_ms, end_ms) of the silver and gold tables of one `jobs.lake.Lake`,
does the aggregation in Spark, and collects only the small per-window, per-entity or
per-event rows. A table that does not exist yet yields an empty input; nothing later than
end_ms is ever read, so a replay over history sees what a live evaluation at end_ms would
have seen (given complete data).

Where each input comes from:

- `RequestStageWindow` <- gold.request_stages_10s: the closed windows that start at or
  after start_ms and end at or before end_ms, watched APIs only. The table's window must
  equal slow_broker.window_s (`check_config`). Past the newest window that table holds
  (its query releases a window only at its next micro-batch after the watermark passed
  it: a trigger or two behind), the windows come from silver.request_stages with the
  same definition (jobs.gold.stage_percentiles). A window of a cluster counts once every
  broker of that cluster has its newest row in silver slow_broker.window_close_slack_s
  past the window's end (a broker's rows come in time order), and at the latest, as in
  the streaming query, once the newest row of any broker is pipeline.fast_watermark_s
  past it (`fresh_windows_until`). So the
  detector sees a window as soon as silver has all of it, and with
  pipeline.fast_stage_table = false (no 10-s query: one stateful query fewer on a small
  machine) every window comes from silver.
- `LatencyBaseline` <- gold.request_stages_1m over the BASELINE_HISTORY_S before start_ms:
  per broker/API the median of the minutes' latency (slow_broker.latency_ms's definition:
  Remote left out for purgatory APIs), minutes with enough traffic only, and only when at
  least slow_broker.min_history_windows minutes exist (else the rule's own in-input
  baseline is used). The baseline ends at start_ms, so a slowness that lasts longer than
  half of BASELINE_HISTORY_S becomes the baseline: the peer comparison still catches it.
- `FollowerFetchWindow` <- silver.request_stages, Fetch with fetch_kind = 'follower'
  outside the controller listener: per connection (leader, follower, remote_addr) in
  time order, gap = arrival (ts_ms - total_ms) minus the previous fetch's completion,
  floored at 0; per leader/follower/window: count, max gap, p99 of send_ms.
  FOLLOWER_GAP_SEED_S before start_ms are read so the first fetch of the range has a gap.
- `IsrShrink` <- silver.log_events kind isr_shrink (leader = broker), plus isr_update
  ("ISR updated to ...", which names only the new ISR) when it removes replicas from the
  ISR last known for that partition on that broker (from any isr_*/leader_change line of
  the ISR_SEED_S before it) and no isr_shrink line already reported the same change
  (`shrinks_from_isr_events`).
- `ClientSendWindow` <- silver.request_stages per window/broker/client/API (count, p99 of
  send_ms), only for the broker/API/windows whose stage row could be judged slow with
  ResponseSend as its dominant stage (`send_candidates`): the rest never reads it.
- `OffsetCommit` <- silver.offset_commits without tombstones, commit_ms = commit_ts_ms
  (ts_ms when null), in (commit_ms, source_partition, source_offset) order; per group and
  partition the last commit of the COMMIT_SEED_S before start_ms is kept as the starting
  position. Only the group/partitions that matter are collected: those whose committed
  offset went down in the range (Spark finds them with a window function), those a client
  reset line names, and every group on a partition with an unclean election.
- `PartitionOffsets` <- silver.partition_offsets (observed_ms = ts_ms, end_offset =
  latest_offset, log_start_offset = earliest_offset) for the partitions collected above
  and those with a truncation, from evidence_window_s before start_ms.
- `ClientOffsetReset` <- silver.client_offset_events with `client_event_meaning`, from
  evidence_window_s before start_ms (a reset shortly before a rewind explains it).
- `LogTruncation` <- silver.log_events kind truncation (truncated_to = offset), from
  evidence_window_s before start_ms.
- `UncleanElection` <- silver.log_events kind unclean_election from meter_match_window_s
  before start_ms (so a meter tick just inside the range finds its line); a line that
  names only a topic id gets its topic from another line of the range that names both;
  lines of one election are merged (`dedupe_elections`).
- `UncleanElectionMeterTick` <- silver.broker_metrics
  kafka_controller_controllerstats_uncleanleaderelectionspersec_count differenced per
  controller (negative deltas dropped: a restarted controller starts from zero). In KRaft
  every controller's meter counts the same election as it replays the metadata log, so
  ticks of different controllers close in time are one set of elections
  (`merge_controller_ticks`).
- `CleanerGauges` <- silver.broker_metrics, the six cleaner gauges pivoted per
  broker/scrape; the uncleanable counts and bytes are summed over log directories.
- `CleanerRun` <- silver.log_events kind cleaner_run (end_ms = ts_ms, duration_s =
  seconds, size_reduction_pct = reduction_pct).
- `CompactedTopicConfig` <- the watched cluster's topic configs (AdminClient
  describe_configs, `describe_compacted_topics`), only when the caller gives a client
  config; cached by `TopicConfigCache`.

- `GroupMembership` <- silver.group_members (the coordinator's GroupMetadata records: one
  per rebalance, one with no members when the group empties) for the groups of the
  collected commits. A record is the group's state until the next one, so the last record
  before the range is carried forward to the range start (observed_ms = start_ms): the
  rule's membership_max_age_s is about polled samples, and a change log is never stale.
  Groups of the KIP-848 protocol write other records and get no membership.

Not available yet (the rules get nothing, and say less):
- `PartitionSize`: no table holds partition sizes (JMX kafka.log:type=Log,name=Size is
  not in the scraper's rules), so compaction_lag's growing-partition rule never fires.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence, TypeVar

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from detectors.compaction_lag import (CleanerGauges, CleanerRun, CompactedTopicConfig,
                                      PartitionSize)
from detectors.partition_signals import (ClientOffsetReset, GroupMembership, LogTruncation,
                                         OffsetCommit, PartitionOffsets, client_event_meaning)
from detectors.slow_broker import (STAGES, ClientSendWindow, FollowerFetchWindow, IsrShrink,
                                   LatencyBaseline, RequestStageWindow, SlowBrokerSection,
                                   dominant_stage, has_enough_traffic, is_watched, latency_ms,
                                   threshold_for)
from detectors.unclean_election import UncleanElection, UncleanElectionMeterTick
from jobs.lake import Lake
from kmon.config_keys import ConfigError

T = TypeVar("T")

if TYPE_CHECKING:
    from kmon.config import Config

log = logging.getLogger(__name__)

# How much history before the range each input reads (see the module docstring).
BASELINE_HISTORY_S = 3600
FOLLOWER_GAP_SEED_S = 60
COMMIT_SEED_S = 3600
COUNTER_SEED_S = 600
ISR_SEED_S = 600
# Lines of one unclean election (every controller logs the change; the active one also
# logs "Setting new leader ... using an unclean election") fall within this of each other.
ELECTION_MERGE_S = 60
# An "ISR updated to" line this soon after a "Shrinking ISR" line to the same ISR confirms
# that shrink rather than reporting another.
ISR_CONFIRM_S = 30

UNCLEAN_METER = "kafka_controller_controllerstats_uncleanleaderelectionspersec_count"
# broker_metrics series -> (CleanerGauges field, how scrapes of several log dirs combine)
CLEANER_METRICS = {
    "kafka_log_logcleanermanager_max_dirty_percent": ("max_dirty_percent", "max"),
    "kafka_log_logcleanermanager_time_since_last_run_ms": ("time_since_last_run_ms", "max"),
    "kafka_log_logcleanermanager_uncleanable_partitions_count":
        ("uncleanable_partitions_count", "sum"),
    "kafka_log_logcleanermanager_uncleanable_bytes": ("uncleanable_bytes", "sum"),
    "kafka_log_logcleaner_max_compaction_delay_secs": ("max_compaction_delay_secs", "max"),
    "kafka_log_logcleaner_deadthreadcount": ("dead_thread_count", "max"),
}
LOG_EVENT_KINDS = ("unclean_election", "truncation", "isr_shrink", "isr_update", "isr_expand",
                   "leader_change", "cleaner_run")
LONG_MAX = 2 ** 63 - 1  # max.compaction.lag.ms left at its default: no limit


@dataclass(frozen=True)
class TimeRange:
    """[start_ms, end_ms): the range one evaluation judges."""
    start_ms: int
    end_ms: int

    def __post_init__(self) -> None:
        if self.end_ms <= self.start_ms:
            raise ValueError(f"empty time range [{self.start_ms}, {self.end_ms})")

    def back(self, seconds: float) -> "TimeRange":
        """The same end, starting `seconds` earlier (context read before the range)."""
        return TimeRange(self.start_ms - int(seconds * 1000), self.end_ms)


@dataclass
class DetectorInputs:
    """Everything the four detectors take, for one range."""
    stage_windows: list[RequestStageWindow] = field(default_factory=list)
    baselines: list[LatencyBaseline] = field(default_factory=list)
    follower_fetches: list[FollowerFetchWindow] = field(default_factory=list)
    isr_shrinks: list[IsrShrink] = field(default_factory=list)
    client_sends: list[ClientSendWindow] = field(default_factory=list)
    commits: list[OffsetCommit] = field(default_factory=list)
    partition_offsets: list[PartitionOffsets] = field(default_factory=list)
    resets: list[ClientOffsetReset] = field(default_factory=list)
    memberships: list[GroupMembership] = field(default_factory=list)
    truncations: list[LogTruncation] = field(default_factory=list)
    elections: list[UncleanElection] = field(default_factory=list)
    meter_ticks: list[UncleanElectionMeterTick] = field(default_factory=list)
    cleaner_gauges: list[CleanerGauges] = field(default_factory=list)
    cleaner_runs: list[CleanerRun] = field(default_factory=list)
    topic_configs: list[CompactedTopicConfig] = field(default_factory=list)
    partition_sizes: list[PartitionSize] = field(default_factory=list)  # no source yet
    # Wall seconds of each read (`read_inputs`; reads overlap), logged per evaluation.
    read_s: dict[str, float] = field(default_factory=dict, compare=False, repr=False)

    def counts(self) -> dict[str, int]:
        """How many of each input (logged per evaluation)."""
        return {f.name: len(getattr(self, f.name)) for f in dataclasses.fields(self)
                if f.name != "read_s"}

    def timed(self, name: str, read: Callable[[], T]) -> T:
        """`read()`, its wall time kept in read_s[name]."""
        started = time.monotonic()
        try:
            return read()
        finally:
            self.read_s[name] = round(time.monotonic() - started, 1)


def check_config(config: "Config") -> None:
    """The detector reads gold.request_stages_10s as slow_broker windows: same length."""
    if float(config.pipeline.fast_window_s) != float(config.slow_broker.window_s):
        raise ConfigError(
            f"{config.source}: key 'slow_broker.window_s' ({config.slow_broker.window_s:g}) must "
            f"equal 'pipeline.fast_window_s' ({config.pipeline.fast_window_s}): the slow-broker "
            f"detector reads the windows of gold.request_stages_10s")


# --- pure helpers (unit-tested without Spark) ----------------------------------------------

def client_reset_from_row(row: Mapping[str, Any]) -> ClientOffsetReset:
    """One silver.client_offset_events row as the rules' ClientOffsetReset."""
    reason, target = client_event_meaning(row["kind"], row.get("reset_target"), row.get("reason"))
    return ClientOffsetReset(
        cluster=row["cluster"], topic=row["topic"], partition=int(row["partition"]),
        event_ms=int(row["ts_ms"]), group=row.get("group_id"), client_id=row.get("client_id"),
        from_offset=_int_or_none(row.get("from_offset")),
        to_offset=_int_or_none(row.get("to_offset")), target=target, reason=reason)


def _int_or_none(x: Any) -> int | None:
    return None if x is None else int(x)


def topic_ids(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], str]:
    """(cluster, topic_id) -> topic, from the log lines that name both."""
    out: dict[tuple[str, str], str] = {}
    for r in rows:
        if r.get("topic_id") and r.get("topic"):
            out[(r["cluster"], r["topic_id"])] = r["topic"]
    return out


def dedupe_elections(rows: Iterable[Mapping[str, Any]], topics: Mapping[tuple[str, str], str],
                     merge_window_ms: int = ELECTION_MERGE_S * 1000) -> list[UncleanElection]:
    """One UncleanElection per election from its several log lines (log_events rows).

    Every controller logs "UNCLEAN partition change ... leaderEpoch: a -> b" as it replays
    the change, and the active one also logs "Setting new leader for topicId ... using an
    unclean election" (topic id only, no epoch) and, from 3.9, "Triggering unclean leader
    election" (no leaders, no epoch). Lines are one election when they name the same
    partition and either the same leader epoch, or no epoch and fall within
    merge_window_ms of a line of that election. A line whose topic cannot be resolved from
    its topic id is dropped (logged). The earliest line's time is the election's; leaders
    and epoch come from whichever line gives them.
    """
    by_tp: dict[tuple[str, str, int], list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        topic = r.get("topic") or topics.get((r["cluster"], r.get("topic_id") or ""))
        if topic is None or r.get("partition") is None:
            log.warning("unclean election line without a resolvable topic (topic id %s) at %s "
                        "on broker %s: left out", r.get("topic_id"), r.get("ts_ms"),
                        r.get("broker"))
            continue
        by_tp[(r["cluster"], topic, int(r["partition"]))].append(r)

    out: list[UncleanElection] = []
    for (cluster, topic, partition), lines in sorted(by_tp.items()):
        lines = sorted(lines, key=lambda r: int(r["ts_ms"]))
        groups: list[list[Mapping[str, Any]]] = []
        by_epoch: dict[int, list[Mapping[str, Any]]] = {}
        for r in (x for x in lines if x.get("leader_epoch") is not None):
            g = by_epoch.get(int(r["leader_epoch"]))
            if g is None:
                g = by_epoch[int(r["leader_epoch"])] = []
                groups.append(g)
            g.append(r)
        for r in (x for x in lines if x.get("leader_epoch") is None):
            t = int(r["ts_ms"])
            near = [g for g in groups
                    if min(abs(int(x["ts_ms"]) - t) for x in g) <= merge_window_ms]
            if near:
                min(near, key=lambda g: min(abs(int(x["ts_ms"]) - t) for x in g)).append(r)
            else:
                groups.append([r])
        for g in groups:
            g.sort(key=lambda r: int(r["ts_ms"]))
            out.append(UncleanElection(
                cluster=cluster, topic=topic, partition=partition,
                event_ms=int(g[0]["ts_ms"]),
                old_leader=_first(g, "old_leader"), new_leader=_first(g, "new_leader"),
                leader_epoch=_first(g, "leader_epoch")))
    return sorted(out, key=lambda e: (e.event_ms, e.cluster, e.topic, e.partition))


def _first(rows: Sequence[Mapping[str, Any]], key: str) -> int | None:
    return next((int(r[key]) for r in rows if r.get(key) is not None), None)


def merge_controller_ticks(ticks: Iterable[UncleanElectionMeterTick],
                           window_ms: int) -> list[UncleanElectionMeterTick]:
    """Per cluster, one tick per burst of ticks from several controllers.

    A KRaft controller updates its UncleanLeaderElectionsPerSec meter as it replays the
    metadata log, so every controller counts the same election: ticks within window_ms of
    the burst's first tick are one set of elections, counted as the largest total any one
    controller reported in it (at the time of the earliest tick).
    """
    by_cluster: dict[str, list[UncleanElectionMeterTick]] = defaultdict(list)
    for t in ticks:
        by_cluster[t.cluster].append(t)
    out = []
    for cluster, ts in sorted(by_cluster.items()):
        ts.sort(key=lambda t: t.observed_ms)
        burst: list[UncleanElectionMeterTick] = []
        for t in ts + [None]:
            if t is not None and (not burst or t.observed_ms - burst[0].observed_ms <= window_ms):
                burst.append(t)
                continue
            totals: dict[int | None, float] = defaultdict(float)
            for b in burst:
                totals[b.controller] += b.count_delta
            controller, count = max(totals.items(), key=lambda kv: (kv[1], -(kv[0] or 0)))
            known = [b.previous_ms for b in burst if b.previous_ms is not None]
            out.append(UncleanElectionMeterTick(cluster=cluster,
                                                observed_ms=burst[0].observed_ms,
                                                count_delta=count, controller=controller,
                                                previous_ms=min(known) if known else None))
            burst = [t] if t is not None else []
    return out


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


def send_candidates(rows: Iterable[RequestStageWindow], config: SlowBrokerSection
                    ) -> list[tuple[str, int, str, int]]:
    """(cluster, broker, api, window_start_ms) of the stage rows that could be judged slow
    with ResponseSend as their dominant stage: the only ones per-client data can explain."""
    out = []
    for r in rows:
        if not (is_watched(r.api, config) and has_enough_traffic(r, config)):
            continue
        if latency_ms(r, config) <= threshold_for(r.api, config):
            continue
        if dominant_stage(r, config)[0] == "send":
            out.append((r.cluster, r.broker, r.api, r.window_start_ms))
    return sorted(set(out))


def compacted_topic_config(cluster: str, topic: str,
                           entries: Mapping[str, str | None]) -> CompactedTopicConfig | None:
    """A topic's effective configs (name -> value) as a CompactedTopicConfig, or None when
    its cleanup.policy does not include compact."""
    policy = (entries.get("cleanup.policy") or "").replace(" ", "").split(",")
    if "compact" not in policy:
        return None
    ratio = entries.get("min.cleanable.dirty.ratio")
    lag = entries.get("max.compaction.lag.ms")
    lag_ms = int(lag) if lag not in (None, "") else None
    return CompactedTopicConfig(
        cluster=cluster, topic=topic,
        min_cleanable_dirty_ratio=float(ratio) if ratio not in (None, "") else None,
        max_compaction_lag_ms=None if lag_ms is None or lag_ms >= LONG_MAX else lag_ms)


def describe_compacted_topics(admin_config: Any, cluster: str,
                              timeout_s: float = 15.0) -> list[CompactedTopicConfig]:
    """The compacted topics of the watched cluster, from AdminClient describe_configs.

    `admin_config` is a librdkafka configuration, or an AdminClient to use. A long-running
    caller passes one client and keeps it: a client dropped while requests to a stopped
    broker are still in flight can abort the process inside librdkafka (seen in the demo:
    ``rd_kafka_enq_once_del_source_return: Assertion `eonce->refcnt > 0' failed`` after
    describe_configs timeouts during the unclean-election fault)."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    admin = (admin_config if hasattr(admin_config, "describe_configs")
             else AdminClient(dict(admin_config)))
    names = sorted(admin.list_topics(timeout=timeout_s).topics)
    if not names:
        return []
    futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, n) for n in names],
                                     request_timeout=timeout_s)
    out = []
    for resource, fut in futures.items():
        try:
            entries = {k: e.value for k, e in fut.result(timeout=timeout_s + 5).items()}
        except Exception as e:  # noqa: BLE001 - one topic's error must not hide the others
            log.warning("describe_configs %s on %s: %s", resource.name, cluster, e)
            continue
        c = compacted_topic_config(cluster, resource.name, entries)
        if c is not None:
            out.append(c)
    return sorted(out, key=lambda c: c.topic)


class TopicConfigCache:
    """Topic configs change rarely: fetch them at most every refresh_s of the caller's
    clock; keep the last good answer when a fetch fails."""

    def __init__(self, fetch: Callable[[], list[CompactedTopicConfig]], refresh_s: float = 300.0):
        self.fetch = fetch
        self.refresh_ms = int(refresh_s * 1000)
        self._value: list[CompactedTopicConfig] = []
        self._fetched_ms: int | None = None

    def __call__(self, now_ms: int) -> list[CompactedTopicConfig]:
        if self._fetched_ms is None or now_ms - self._fetched_ms >= self.refresh_ms:
            try:
                self._value = list(self.fetch())
            except Exception as e:  # noqa: BLE001 - any client error: keep the last answer
                log.warning("could not describe the watched cluster's topic configs: %s", e)
            self._fetched_ms = now_ms
        return self._value


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


# --- Spark reads -----------------------------------------------------------------------------

def _table(spark: SparkSession, lake: Lake, layer: str, name: str) -> DataFrame | None:
    from delta.tables import DeltaTable

    path = lake.table(layer, name)
    if not DeltaTable.isDeltaTable(spark, path):
        return None
    return spark.read.format("delta").load(path)


def _sorted_rows(rows: Iterable[Any], keys: Sequence[str]) -> list:
    """Collected rows in Spark's ascending order of `keys` (nulls first). The reads sort
    their few rows here: an orderBy before collect costs a sampling job and a shuffle."""
    return sorted(rows, key=lambda x: tuple((x[k] is not None, x[k]) for k in keys))


def _date(ms: int) -> dt.date:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).date()


def _silver_range(df: DataFrame, r: TimeRange) -> DataFrame:
    """Rows with ts_ms in the range; the date filter lets Delta skip other partitions."""
    return df.where((F.col("date") >= F.lit(_date(r.start_ms)))
                    & (F.col("date") <= F.lit(_date(r.end_ms)))
                    & (F.col("ts_ms") >= r.start_ms) & (F.col("ts_ms") < r.end_ms))


def _gold_windows(df: DataFrame, r: TimeRange) -> DataFrame:
    """Windows that start at or after the range start and end at or before its end."""
    return df.where((F.col("date") >= F.lit(_date(r.start_ms)))
                    & (F.col("date") <= F.lit(_date(r.end_ms)))
                    & (F.unix_millis("window_start") >= r.start_ms)
                    & (F.unix_millis("window_end") <= r.end_ms))


def _norm_api(col: str = "api") -> Column:
    return F.lower(F.regexp_replace(F.col(col), "_", ""))


def _norm_names(names: Iterable[str]) -> list[str]:
    return sorted({n.replace("_", "").lower() for n in names})


def _window_start(window_ms: int) -> Column:
    # The same epoch-aligned windows as F.window(ts, "<window_s> seconds") in jobs/gold.py.
    return F.col("ts_ms") - F.pmod(F.col("ts_ms"), F.lit(window_ms))


def _p99_columns() -> list[str]:
    return [f"{s}_p99_ms" for s in ("total", *STAGES)]


def read_stage_windows(spark: SparkSession, lake: Lake, config: SlowBrokerSection,
                       r: TimeRange, settle_ms: int, stages: DataFrame | None = None
                       ) -> list[RequestStageWindow]:
    """Closed stage windows of the range: gold.request_stages_10s, then silver past it.
    `stages`: silver.request_stages already read for (at least) the range (see
    `request_stage_rows`); None reads it here."""
    df = _table(spark, lake, "gold", "request_stages_10s")
    rows = [] if df is None else _stage_window_rows(_gold_windows(df, r), config)
    covered_until = max((int(x["window_start_ms"]) + config.window_ms for x in rows),
                        default=r.start_ms)
    if r.end_ms - covered_until >= config.window_ms:   # room for one more window
        rows += _fresh_stage_window_rows(spark, lake, config,
                                         TimeRange(covered_until, r.end_ms), settle_ms, stages)
    return [RequestStageWindow(
        cluster=x["cluster"], broker=int(x["broker"]), api=x["api"],
        window_start_ms=int(x["window_start_ms"]), requests=int(x["requests"]),
        **{c: float(x[c] or 0.0) for c in _p99_columns()}) for x in rows]


def _stage_window_rows(windows: DataFrame, config: SlowBrokerSection) -> list:
    """Rows of a stage-percentile frame (gold's columns) for the watched APIs."""
    return (windows.where(_norm_api().isin(_norm_names(config.watched_apis)))
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

    df = _request_stages(spark, lake, r) if stages is None else _in_range(stages, r)
    if df is None:
        return []
    newest = {(x["cluster"], x["broker"]): int(x["newest_ms"]) for x in
              df.groupBy("cluster", "broker").agg(F.max("ts_ms").alias("newest_ms")).collect()}
    until = {c: u for c, u in fresh_windows_until(
        newest, r, settle_ms, int(config.window_close_slack_s * 1000)).items()
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


def latency_column(config: SlowBrokerSection) -> Column:
    """slow_broker.latency_ms as a Spark column over a gold stage-percentile row."""
    own = F.greatest(F.col("total_p99_ms") - F.col("remote_p99_ms"),
                     *[F.col(f"{s}_p99_ms") for s in STAGES if s != "remote"], F.lit(0.0))
    return (F.when(_norm_api().isin(_norm_names(config.purgatory_apis)), own)
            .otherwise(F.col("total_p99_ms")))


def read_baselines(spark: SparkSession, lake: Lake, config: SlowBrokerSection,
                   r: TimeRange) -> list[LatencyBaseline]:
    df = _table(spark, lake, "gold", "request_stages_1m")
    if df is None:
        return []
    history = TimeRange(r.start_ms - BASELINE_HISTORY_S * 1000, r.start_ms)
    rows = (_gold_windows(df, history)
            .where(_norm_api().isin(_norm_names(config.watched_apis)))
            .where(F.col("requests") >= config.min_requests_per_minute)
            .groupBy("cluster", "broker", "api")
            .agg(F.percentile_approx(latency_column(config), 0.5, 10_000).alias("p99_ms"),
                 F.count(F.lit(1)).alias("minutes"))
            .where(F.col("minutes") >= config.min_history_windows)
            .collect())
    return [LatencyBaseline(x["cluster"], int(x["broker"]), x["api"], float(x["p99_ms"]))
            for x in rows]


def _request_stages(spark: SparkSession, lake: Lake, r: TimeRange) -> DataFrame | None:
    df = _table(spark, lake, "silver", "request_stages")
    if df is None:
        return None
    return _silver_range(df, r).where(~F.coalesce(F.col("is_controller_traffic"), F.lit(False)))


def _in_range(df: DataFrame, r: TimeRange) -> DataFrame:
    return df.where((F.col("ts_ms") >= r.start_ms) & (F.col("ts_ms") < r.end_ms))


# The columns of silver.request_stages that the slow-broker reads use (with the stage
# timings, jobs.gold.STAGES).
REQUEST_STAGE_KEYS = ("cluster", "broker", "api", "ts", "ts_ms", "is_controller_traffic",
                      "fetch_kind", "fetch_replica_id", "remote_addr", "correlation_id",
                      "client_id")


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


def read_follower_fetches(spark: SparkSession, lake: Lake, config: SlowBrokerSection,
                          r: TimeRange, stages: DataFrame | None = None
                          ) -> list[FollowerFetchWindow]:
    seeded = r.back(FOLLOWER_GAP_SEED_S)
    df = _request_stages(spark, lake, seeded) if stages is None else _in_range(stages, seeded)
    if df is None:
        return []
    conn = Window.partitionBy("cluster", "broker", "fetch_replica_id", "remote_addr") \
        .orderBy("ts_ms", "correlation_id")
    gap = F.greatest((F.col("ts_ms") - F.col("total_ms")) - F.lag("ts_ms").over(conn),
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


def read_client_sends(spark: SparkSession, lake: Lake, config: SlowBrokerSection,
                      r: TimeRange, stage_rows: Sequence[RequestStageWindow],
                      stages: DataFrame | None = None) -> list[ClientSendWindow]:
    wanted = send_candidates(stage_rows, config)
    if not wanted:
        return []
    df = _request_stages(spark, lake, r) if stages is None else _in_range(stages, r)
    if df is None:
        return []
    keys = spark.createDataFrame(wanted, "cluster string, broker int, api string, "
                                         "window_start_ms long")
    rows = (df.select("cluster", "broker", "api", "send_ms",
                      F.coalesce("client_id", F.lit("(none)")).alias("client_id"),
                      _window_start(config.window_ms).alias("window_start_ms"))
            .join(F.broadcast(keys), ["cluster", "broker", "api", "window_start_ms"], "left_semi")
            .groupBy("cluster", "window_start_ms", "broker", "client_id", "api")
            .agg(F.count(F.lit(1)).alias("requests"),
                 F.percentile_approx("send_ms", 0.99, 10_000).alias("send_p99"))
            .collect())
    return [ClientSendWindow(cluster=x["cluster"], window_start_ms=int(x["window_start_ms"]),
                             broker=int(x["broker"]), client_id=x["client_id"],
                             requests=int(x["requests"]), send_p99_ms=float(x["send_p99"]),
                             api=x["api"]) for x in rows]


def read_log_events(spark: SparkSession, lake: Lake, r: TimeRange) -> list[dict]:
    """The log events the detectors use (few: not the `other` lines), as dicts."""
    df = _table(spark, lake, "silver", "log_events")
    if df is None:
        return []
    cols = ("cluster", "broker", "ts_ms", "kind", "topic", "partition", "topic_id", "offset",
            "high_watermark", "old_leader", "new_leader", "leader_epoch", "isr_before",
            "isr_after", "seconds", "reduction_pct")
    return [x.asDict() for x in _silver_range(df, r).where(F.col("kind").isin(*LOG_EVENT_KINDS))
            .select(*cols).collect()]


def truncations_from(rows: Iterable[Mapping[str, Any]], since_ms: int) -> list[LogTruncation]:
    return sorted((LogTruncation(cluster=x["cluster"], broker=int(x["broker"]), topic=x["topic"],
                                 partition=int(x["partition"]), event_ms=int(x["ts_ms"]),
                                 truncated_to=int(x["offset"]),
                                 high_watermark=_int_or_none(x.get("high_watermark")))
                   for x in rows
                   if x["kind"] == "truncation" and int(x["ts_ms"]) >= since_ms
                   and x.get("topic") and x.get("partition") is not None
                   and x.get("offset") is not None),
                  key=lambda t: (t.event_ms, t.cluster, t.topic, t.partition, t.broker))


def cleaner_runs_from(rows: Iterable[Mapping[str, Any]], since_ms: int) -> list[CleanerRun]:
    return sorted((CleanerRun(cluster=x["cluster"], broker=int(x["broker"]), topic=x["topic"],
                              partition=int(x["partition"]), end_ms=int(x["ts_ms"]),
                              duration_s=x.get("seconds"),
                              size_reduction_pct=x.get("reduction_pct"))
                   for x in rows
                   if x["kind"] == "cleaner_run" and int(x["ts_ms"]) >= since_ms
                   and x.get("topic") and x.get("partition") is not None),
                  key=lambda c: (c.end_ms, c.cluster, c.broker, c.topic, c.partition))


def read_resets(spark: SparkSession, lake: Lake, r: TimeRange) -> list[ClientOffsetReset]:
    df = _table(spark, lake, "silver", "client_offset_events")
    if df is None:
        return []
    rows = (_silver_range(df, r)
            .select("cluster", "ts_ms", "client_id", "group_id", "topic", "partition", "kind",
                    "from_offset", "to_offset", "reset_target", "reason")
            .collect())
    return [client_reset_from_row(x.asDict()) for x in _sorted_rows(rows, ("ts_ms",))]


def read_memberships(spark: SparkSession, lake: Lake, r: TimeRange,
                     groups: Iterable[tuple[str, str]]) -> list[GroupMembership]:
    """Membership changes of the given (cluster, group)s in the range, each group's state
    before the range carried forward to the range start."""
    wanted = sorted(set(groups))
    df = _table(spark, lake, "silver", "group_members")
    if df is None or not wanted:
        return []
    keys = spark.createDataFrame(wanted, "cluster string, group_id string")
    rows = (_silver_range(df, r.back(COMMIT_SEED_S)).join(F.broadcast(keys),
                                                          ["cluster", "group_id"])
            .select("cluster", "group_id", "ts_ms", "source_partition", "source_offset",
                    "member_count")
            .collect())
    out: list[GroupMembership] = []
    before: dict[tuple[str, str], GroupMembership] = {}
    for x in _sorted_rows(rows, ("cluster", "group_id", "ts_ms", "source_partition",
                                 "source_offset")):
        m = GroupMembership(cluster=x["cluster"], group=x["group_id"],
                            observed_ms=max(int(x["ts_ms"]), r.start_ms),
                            member_count=int(x["member_count"]))
        if x["ts_ms"] < r.start_ms:
            before[(m.cluster, m.group)] = m
        else:
            out.append(m)
    return sorted(list(before.values()) + out, key=lambda m: (m.cluster, m.group, m.observed_ms))


COMMIT_KEY = ("cluster", "group_id", "topic", "partition")
COMMIT_ORDER = ("commit_ms", "source_partition", "source_offset")


def read_commits(spark: SparkSession, lake: Lake, r: TimeRange,
                 partitions: Iterable[tuple[str, str, int]] = (),
                 group_partitions: Iterable[tuple[str, str, str, int]] = ()
                 ) -> list[OffsetCommit]:
    """Commits of the group/partitions that went down in the range, plus those of the given
    partitions (every group) and group/partitions; each with its last commit before the
    range as its starting position."""
    df = _table(spark, lake, "silver", "offset_commits")
    if df is None:
        return []
    commits = (_silver_range(df, r.back(COMMIT_SEED_S))
               .where(~F.col("is_tombstone") & F.col("offset").isNotNull())
               .withColumn("commit_ms", F.coalesce("commit_ts_ms", "ts_ms"))
               .withColumn("_pre", F.col("ts_ms") < r.start_ms))
    latest_first = Window.partitionBy(*COMMIT_KEY, "_pre").orderBy(
        *[F.col(c).desc() for c in COMMIT_ORDER])
    commits = (commits.withColumn("_rn", F.row_number().over(latest_first))
               .where(~F.col("_pre") | (F.col("_rn") == 1)))
    in_order = Window.partitionBy(*COMMIT_KEY).orderBy(*COMMIT_ORDER)
    whole = Window.partitionBy(*COMMIT_KEY)
    dropped = (F.col("offset") < F.lag("offset").over(in_order)).cast("int")
    commits = (commits.withColumn("_drop", F.coalesce(dropped, F.lit(0)))
               .withColumn("_wanted", F.max("_drop").over(whole) > 0))
    tps = sorted(set(partitions))
    if tps:
        marks = spark.createDataFrame([(*tp, True) for tp in tps],
                                      "cluster string, topic string, partition int, _tp boolean")
        commits = commits.join(F.broadcast(marks), ["cluster", "topic", "partition"], "left")
        commits = commits.withColumn("_wanted", F.col("_wanted") | F.coalesce("_tp", F.lit(False)))
    gtps = sorted(set(group_partitions))
    if gtps:
        marks = spark.createDataFrame([(*g, True) for g in gtps],
                                      "cluster string, group_id string, topic string, "
                                      "partition int, _gtp boolean")
        commits = commits.join(F.broadcast(marks), list(COMMIT_KEY), "left")
        commits = commits.withColumn("_wanted",
                                     F.col("_wanted") | F.coalesce("_gtp", F.lit(False)))
    rows = (commits.where("_wanted")
            .select(*COMMIT_KEY, "offset", "commit_ms", "leader_epoch", "source_partition",
                    "source_offset")
            .collect())
    return [OffsetCommit(cluster=x["cluster"], group=x["group_id"], topic=x["topic"],
                         partition=int(x["partition"]), offset=int(x["offset"]),
                         commit_ms=int(x["commit_ms"]),
                         leader_epoch=_int_or_none(x["leader_epoch"]))
            for x in _sorted_rows(rows, (*COMMIT_KEY, *COMMIT_ORDER))]


def read_partition_offsets(spark: SparkSession, lake: Lake, r: TimeRange,
                           partitions: Iterable[tuple[str, str, int]]) -> list[PartitionOffsets]:
    tps = sorted(set(partitions))
    df = _table(spark, lake, "silver", "partition_offsets") if tps else None
    if df is None:
        return []
    keys = spark.createDataFrame(tps, "cluster string, topic string, partition int")
    rows = (_silver_range(df, r).join(F.broadcast(keys), ["cluster", "topic", "partition"],
                                      "left_semi")
            .select("cluster", "topic", "partition", "ts_ms", "earliest_offset", "latest_offset")
            .collect())
    return [PartitionOffsets(cluster=x["cluster"], topic=x["topic"], partition=int(x["partition"]),
                             observed_ms=int(x["ts_ms"]), end_offset=int(x["latest_offset"]),
                             log_start_offset=_int_or_none(x["earliest_offset"]))
            for x in _sorted_rows(rows, ("cluster", "topic", "partition", "ts_ms"))]


def _broker_metrics(spark: SparkSession, lake: Lake, r: TimeRange,
                    metrics: Iterable[str]) -> DataFrame | None:
    df = _table(spark, lake, "silver", "broker_metrics")
    if df is None:
        return None
    return _silver_range(df, r).where(F.col("metric").isin(*metrics))


def read_meter_ticks(spark: SparkSession, lake: Lake, r: TimeRange,
                     merge_window_ms: int) -> list[UncleanElectionMeterTick]:
    df = _broker_metrics(spark, lake, r.back(COUNTER_SEED_S), [UNCLEAN_METER])
    if df is None:
        return []
    series = Window.partitionBy("cluster", "broker").orderBy("ts_ms")
    rows = (df.select("cluster", "broker", "ts_ms",
                      F.lag("ts_ms").over(series).alias("previous_ms"),
                      (F.col("value") - F.lag("value").over(series)).alias("delta"))
            .where((F.col("ts_ms") >= r.start_ms) & (F.col("delta") > 0))
            .collect())
    ticks = [UncleanElectionMeterTick(cluster=x["cluster"], observed_ms=int(x["ts_ms"]),
                                      count_delta=float(x["delta"]), controller=int(x["broker"]),
                                      previous_ms=int(x["previous_ms"]))
             for x in rows]
    return merge_controller_ticks(ticks, merge_window_ms)


def read_cleaner_gauges(spark: SparkSession, lake: Lake, r: TimeRange) -> list[CleanerGauges]:
    df = _broker_metrics(spark, lake, r, CLEANER_METRICS)
    if df is None:
        return []
    aggs = []
    for metric, (name, how) in CLEANER_METRICS.items():
        value = F.when(F.col("metric") == metric, F.col("value"))
        aggs.append((F.sum(value) if how == "sum" else F.max(value)).alias(name))
    rows = df.groupBy("cluster", "broker", "ts_ms").agg(*aggs).collect()
    out = []
    for x in _sorted_rows(rows, ("cluster", "broker", "ts_ms")):
        values = {name: x[name] for name, _ in CLEANER_METRICS.values()}
        for name in ("dead_thread_count", "uncleanable_partitions_count"):
            values[name] = _int_or_none(values[name])
        out.append(CleanerGauges(cluster=x["cluster"], broker=int(x["broker"]),
                                 observed_ms=int(x["ts_ms"]), **values))
    return out


def read_inputs(spark: SparkSession, lake: Lake, config: "Config", start_ms: int, end_ms: int,
                topic_configs: Iterable[CompactedTopicConfig] = (), *,
                parallelism: int = 4,
                baseline_cache: BaselineCache | None = None) -> DetectorInputs:
    """Every detector input for [start_ms, end_ms) of one lake.

    The reads form independent chains (stage windows then the client sends they point
    at; baselines; follower fetches; log events and client resets, then the commits they
    point at, then those groups' memberships and partitions' offsets; meter ticks;
    cleaner gauges). Each read is a few small Spark jobs with driver work (planning, the
    Delta log) between them, so one after another they leave the cores idle between
    jobs; `parallelism` chains run at once, each in a thread that inherits the caller's
    scheduler pool. The result does not depend on `parallelism` (1 reads in order).
    `baseline_cache` (the detector query's) may answer the baselines from an earlier read.
    """
    r = TimeRange(start_ms, end_ms)
    sb = config.slow_broker
    evidence_s = config.offset_rewind.evidence_window_s
    meter_s = config.unclean_election.meter_match_window_s
    out = DetectorInputs(topic_configs=list(topic_configs))

    def request_stages() -> None:
        from jobs.silver import release

        stages = out.timed("request_stages", lambda: request_stage_rows(
            spark, lake, r.back(FOLLOWER_GAP_SEED_S)))
        try:
            def slow_broker_windows() -> None:
                out.stage_windows = out.timed("stage_windows", lambda: read_stage_windows(
                    spark, lake, sb, r, config.pipeline.fast_watermark_s * 1000, stages))
                out.client_sends = out.timed("client_sends", lambda: read_client_sends(
                    spark, lake, sb, r, out.stage_windows, stages))

            def follower_fetches() -> None:
                out.follower_fetches = out.timed("follower_fetches", lambda: (
                    read_follower_fetches(spark, lake, sb, r, stages)))

            _run_all(spark, [slow_broker_windows, follower_fetches], min(parallelism, 2))
        finally:
            if stages is not None:
                release(stages)

    def baselines() -> None:
        def read() -> list[LatencyBaseline]:
            return read_baselines(spark, lake, sb, r)

        out.baselines = out.timed("baselines", lambda: (
            read() if baseline_cache is None else baseline_cache(r.start_ms, read)))

    def partition_signals() -> None:
        # The longest chain: the log events and the client resets (read side by side),
        # then the commits they point at, then those groups' memberships and partitions'
        # offsets.
        found: dict[str, list] = {}

        def log_events() -> None:
            found["events"] = out.timed("log_events", lambda: read_log_events(
                spark, lake, r.back(max(ISR_SEED_S, evidence_s, meter_s))))

        def resets() -> None:
            out.resets = out.timed("resets", lambda: read_resets(spark, lake,
                                                                 r.back(evidence_s)))

        _run_all(spark, [log_events, resets], min(parallelism, 2))
        events = found["events"]
        out.isr_shrinks = shrinks_from_isr_events(
            [e for e in events if e["kind"] in ("isr_shrink", "isr_update", "isr_expand",
                                                "leader_change")], since_ms=r.start_ms)
        out.truncations = truncations_from(events, r.start_ms - int(evidence_s * 1000))
        out.cleaner_runs = cleaner_runs_from(events, r.start_ms)
        election_since = r.start_ms - int(meter_s * 1000)
        out.elections = dedupe_elections(
            [e for e in events
             if e["kind"] == "unclean_election" and e["ts_ms"] >= election_since],
            topic_ids(events))

        election_tps = {(e.cluster, e.topic, e.partition) for e in out.elections}
        reset_gtps = {(e.cluster, e.group, e.topic, e.partition) for e in out.resets if e.group}
        out.commits = out.timed("commits", lambda: read_commits(spark, lake, r, election_tps,
                                                                reset_gtps))
        offset_tps = (election_tps | {(c.cluster, c.topic, c.partition) for c in out.commits}
                      | {(e.cluster, e.topic, e.partition) for e in out.resets}
                      | {(t.cluster, t.topic, t.partition) for t in out.truncations})
        groups = {(c.cluster, c.group) for c in out.commits}

        def memberships() -> None:
            out.memberships = out.timed("memberships", lambda: read_memberships(
                spark, lake, r, groups))

        def partition_offsets() -> None:
            out.partition_offsets = out.timed("partition_offsets", lambda: (
                read_partition_offsets(spark, lake, r.back(evidence_s), offset_tps)))

        _run_all(spark, [memberships, partition_offsets], min(parallelism, 2))

    def meter_ticks() -> None:
        out.meter_ticks = out.timed("meter_ticks", lambda: read_meter_ticks(
            spark, lake, r, int(meter_s * 1000)))

    def cleaner_gauges() -> None:
        out.cleaner_gauges = out.timed("cleaner_gauges", lambda: read_cleaner_gauges(
            spark, lake, r))

    # The longest chain first, so it never waits for a free thread.
    _run_all(spark, [partition_signals, request_stages, baselines, meter_ticks,
                     cleaner_gauges], parallelism)
    return out


def _run_all(spark: SparkSession, tasks: Sequence[Callable[[], None]],
             parallelism: int) -> None:
    """Run the tasks, `parallelism` at a time, each thread with the caller's local
    properties (scheduler pool, job group) and job tags; the first error is raised once
    all ended."""
    if parallelism <= 1 or len(tasks) <= 1:
        for task in tasks:
            task()
        return
    from concurrent.futures import ThreadPoolExecutor

    from pyspark import inheritable_thread_target

    with ThreadPoolExecutor(max_workers=parallelism, thread_name_prefix="detector-read") as pool:
        inherit = inheritable_thread_target(spark)
        futures = [pool.submit(inherit(task)) for task in tasks]
    for f in futures:
        f.result()
