"""The compaction-lag detector's inputs: log-cleaner gauges and runs, compacted
partitions' sizes, and compacted topics' configs.

- `CleanerGauges` <- silver.broker_metrics, the six cleaner gauges pivoted per
  broker/scrape; the uncleanable counts and bytes are summed over log directories.
- `CleanerRun` <- silver.log_events kind cleaner_run (end_ms = ts_ms, duration_s =
  seconds, size_reduction_pct = reduction_pct), over the growing-partition rule's window
  (`growth_range`), since that rule asks whether a partition was cleaned in it; the
  broker rules only take the latest run as evidence.
- `PartitionSize` <- silver.broker_metrics kafka_log_log_size (JMX kafka.log:type=Log,
  name=Size: bytes of one partition replica, `topic` and `labels.partition`), only for
  compacted topics (the topic configs below, plus __consumer_offsets, which Kafka always
  compacts, so it is watched even with no configs). Replicas compact independently: the
  read keeps every replica, so the rules can compare them.
- `CompactedTopicConfig` <- the watched cluster's topic configs
  (`infra.topic_configs.describe_topic_configs`, `describe_compacted_topics`), only when
  the caller gives a client config; cached by `TopicConfigCache`.

The size and run reads span compaction_lag.growth_window_s (2 h by default), far more
than the detector's 300-s lookback, so they are bounded: sizes are read for the one
series and the compacted topics only, over the window plus two steps (`growth_range`: the
rule wants a sample at or before the window's start), and reduced in SQL to one point
per replica per SIZE_STEP_S (60 s: the largest size the replica had in that minute,
stamped with its broker's last scrape in it). At most compacted replicas x (window / 60 s
+ 3) rows reach the driver: ~18,600 for __consumer_offsets' 50 partitions at replication
factor 3 over 2 h, whatever the scrape interval. The read scans the window's
silver.broker_metrics files (date partitions skip the other days) at every evaluation
that the window cache does not answer (window_cache.py). Cleaner runs are few (one per
cleaned log per pass).

A minute is coarse against a topic that promises compaction within a minute or two
(max.compaction.lag.ms L): rule 5c's span is L (a minute at least) plus two backoffs,
and each of its ends can be a step late. So the topics whose `contract_step_s` (L / 6 on
the divisors of a minute, at least the 10-s scrape) is finer than a minute, those with L
under 6 minutes, are read a second time, at that step, over that span only
(`contract_range`: the longest span of them, two of its steps more, from a minute). That
adds at most their replicas x (6 min + 2 backoffs + 2 min) / 10 s rows, 51 per replica at
the default 15-s backoff, whatever the growth window; no read at all when every topic's
L is longer (production's hours) or unset.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, Mapping

from detectors.compaction_lag import (
    CONSUMER_OFFSETS,
    SIZE_STEP_S,
    contract_span_ms,
    contract_step_s,
    CleanerGauges,
    CleanerRun,
    CompactedTopicConfig,
    PartitionSize,
)
from infra.lake_sql import LakeSql, marks, range_sql
from infra.topic_configs import describe_topic_configs
from evaluation.inputs.tables import TimeRange, broker_metrics, int_or_none, sorted_rows
from schemas.broker_metrics import LOG_SIZE

log = logging.getLogger(__name__)

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
LONG_MAX = 2 ** 63 - 1  # max.compaction.lag.ms left at its default: no limit


def read_cleaner_gauges(sql: LakeSql, r: TimeRange) -> list[CleanerGauges]:
    source = broker_metrics(sql, r, CLEANER_METRICS)
    if source is None:
        return []
    query, params, ds = source
    aggs, agg_params = [], []
    for metric, (name, how) in CLEANER_METRICS.items():
        aggs.append(f"{'sum' if how == 'sum' else 'max'}(value) FILTER (WHERE metric = ?) "
                    f"AS {name}")
        agg_params.append(metric)
    rows = sql.rows(f"SELECT cluster, broker, ts_ms, {', '.join(aggs)} FROM ({query}) "
                    "GROUP BY cluster, broker, ts_ms", [*agg_params, *params],
                    t=ds)
    out = []
    for x in sorted_rows(rows, ("cluster", "broker", "ts_ms")):
        values = {name: x[name] for name, _ in CLEANER_METRICS.values()}
        for name in ("dead_thread_count", "uncleanable_partitions_count"):
            values[name] = int_or_none(values[name])
        out.append(CleanerGauges(cluster=x["cluster"], broker=int(x["broker"]),
                                 observed_ms=int(x["ts_ms"]), **values))
    return out


def cleaner_runs_from(rows: Iterable[Mapping[str, Any]], since_ms: int) -> list[CleanerRun]:
    """The cleaner_run lines (silver.log_events rows) at or after since_ms."""
    return sorted((CleanerRun(cluster=x["cluster"], broker=int(x["broker"]), topic=x["topic"],
                              partition=int(x["partition"]), end_ms=int(x["ts_ms"]),
                              duration_s=x.get("seconds"),
                              size_reduction_pct=x.get("reduction_pct"))
                   for x in rows
                   if x["kind"] == "cleaner_run" and int(x["ts_ms"]) >= since_ms
                   and x.get("topic") and x.get("partition") is not None),
                  key=lambda c: (c.end_ms, c.cluster, c.broker, c.topic, c.partition))


def read_cleaner_runs(sql: LakeSql, r: TimeRange) -> list[CleanerRun]:
    """The cleaner_run lines of the range (few: one per cleaned log per pass)."""
    ds = sql.dataset("silver", "log_events", start_ms=r.start_ms, end_ms=r.end_ms)
    if ds is None:
        return []
    where, params = range_sql(r.start_ms, r.end_ms)
    rows = sql.rows("SELECT cluster, broker, ts_ms, kind, topic, \"partition\", seconds, "
                    f"reduction_pct FROM t WHERE {where} AND kind = 'cleaner_run'", params, t=ds)
    return cleaner_runs_from(rows, r.start_ms)


# --- compacted partitions' sizes -------------------------------------------------------------

def growth_range(r: TimeRange, growth_window_s: float,
                 step_s: float = SIZE_STEP_S) -> TimeRange:
    """The growing-partition rule's window before r.end_ms, two steps more: the rule wants
    a sample at or before the window's start, and a step's point is its last scrape. It
    starts on a step boundary, so its first step is whole, as it was when an earlier
    evaluation read it (the live detector keeps the steps it read: window_cache.py)."""
    step_ms = int(step_s * 1000)
    start = r.end_ms - int((growth_window_s + 2 * step_s) * 1000)
    return TimeRange(start // step_ms * step_ms, r.end_ms)


def contract_steps(configs: Iterable[CompactedTopicConfig]) -> dict[str, dict[str, int]]:
    """cluster -> topic -> its rule-5c step in seconds, for the compacted topics whose
    max.compaction.lag.ms asks a step finer than SIZE_STEP_S (`contract_step_s`)."""
    out: dict[str, dict[str, int]] = {}
    for c in configs:
        step = contract_step_s(c.max_compaction_lag_ms)
        if step < SIZE_STEP_S:
            out.setdefault(c.cluster, {})[c.topic] = step
    return out


def contract_range(r: TimeRange, configs: Iterable[CompactedTopicConfig],
                   cleaner_backoff_s: float) -> TimeRange | None:
    """Rule 5c's span before r.end_ms for the topics `contract_steps` names (the longest
    `contract_span_ms` of them), two of that topic's steps more (a sample at or before
    the span's start, a step's point being its last scrape), from a SIZE_STEP_S
    boundary: each of their steps whole, as growth_range. None without such topics."""
    spans = [contract_span_ms(c.max_compaction_lag_ms, cleaner_backoff_s)
             + 2 * contract_step_s(c.max_compaction_lag_ms) * 1000
             for c in configs if contract_step_s(c.max_compaction_lag_ms) < SIZE_STEP_S]
    if not spans:
        return None
    step_ms = SIZE_STEP_S * 1000
    return TimeRange((r.end_ms - max(spans)) // step_ms * step_ms, r.end_ms)


def compacted_topics(configs: Iterable[CompactedTopicConfig]) -> dict[str, set[str]]:
    """cluster -> its compacted topics (those the configs name)."""
    out: dict[str, set[str]] = {}
    for c in configs:
        out.setdefault(c.cluster, set()).add(c.topic)
    return out


def _named_sql(topics: Mapping[str, Iterable[str]]) -> tuple[list[str], list]:
    """One condition per cluster, true for rows of the topics named for it."""
    parts, params = [], []
    for cluster, names in sorted(topics.items()):
        if names:
            parts.append(f"(cluster = ? AND topic IN ({marks(names)}))")
            params += [cluster, *sorted(names)]
    return parts, params


def _compacted_sql(topics: Mapping[str, set[str]]) -> tuple[str, list]:
    """True for rows of a compacted topic: __consumer_offsets, or one the configs name."""
    parts, params = _named_sql(topics)
    return "(" + " OR ".join(["topic = ?", *parts]) + ")", [CONSUMER_OFFSETS, *params]


def read_partition_sizes(sql: LakeSql, r: TimeRange,
                         topics: Mapping[str, set[str]],
                         step_s: float = SIZE_STEP_S) -> list[PartitionSize]:
    """One size per replica of each compacted partition per step of the range: the
    largest its broker reported in the step (replicas compact independently: the rules
    compare them). `topics`: cluster -> compacted topics (__consumer_offsets is always
    read)."""
    compacted, cparams = _compacted_sql(topics)
    return _read_sizes(sql, r, compacted, cparams, "?", [int(step_s * 1000)])


def read_contract_sizes(sql: LakeSql, r: TimeRange,
                        steps: Mapping[str, Mapping[str, int]]) -> list[PartitionSize]:
    """As read_partition_sizes, for the topics of `steps` only (cluster -> topic -> step
    in seconds, `contract_steps`), each at its own step."""
    by_step: dict[int, dict[str, list[str]]] = {}
    for cluster, topics in steps.items():
        for topic, step_s in topics.items():
            by_step.setdefault(int(step_s * 1000), {}).setdefault(cluster, []).append(topic)
    if not by_step:
        return []
    whens, step_params, where, where_params = [], [], [], []
    for step_ms, topics in sorted(by_step.items()):
        parts, params = _named_sql(topics)
        whens.append(f"WHEN {' OR '.join(parts)} THEN ?")
        step_params += [*params, step_ms]
        where += parts
        where_params += params
    return _read_sizes(sql, r, "(" + " OR ".join(where) + ")", where_params,
                       f"(CASE {' '.join(whens)} END)", step_params)


def _read_sizes(sql: LakeSql, r: TimeRange, where: str, where_params: list,
                step: str, step_params: list) -> list[PartitionSize]:
    """The largest size per replica per step of the rows `where` selects; `step`: the SQL
    of a row's step in ms."""
    source = broker_metrics(sql, r, (LOG_SIZE,))
    if source is None:
        return []
    query, params, ds = source
    rows = sql.rows(
        'SELECT cluster, topic, "partition", broker, step_ms, max(ts_ms) AS ts_ms, '
        "max(value) AS size_bytes FROM ("
        "SELECT cluster, topic, TRY_CAST(element_at(labels, 'partition')[1] AS INTEGER) "
        f'AS "partition", broker, ts_ms, ts_ms - ts_ms % {step} AS step_ms, value '
        f'FROM ({query}) WHERE {where}) WHERE "partition" IS NOT NULL '
        'GROUP BY cluster, topic, "partition", broker, step_ms',
        [*step_params, *params, *where_params], t=ds)
    return [PartitionSize(cluster=x["cluster"], topic=x["topic"], partition=int(x["partition"]),
                          observed_ms=int(x["ts_ms"]), size_bytes=float(x["size_bytes"]),
                          broker=int_or_none(x["broker"]))
            for x in sorted_rows(rows, ("cluster", "topic", "partition", "ts_ms", "broker"))]


# --- compacted topics' configs -------------------------------------------------------------

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
    segment = entries.get("segment.bytes")
    return CompactedTopicConfig(
        cluster=cluster, topic=topic,
        min_cleanable_dirty_ratio=float(ratio) if ratio not in (None, "") else None,
        max_compaction_lag_ms=None if lag_ms is None or lag_ms >= LONG_MAX else lag_ms,
        segment_bytes=int(segment) if segment not in (None, "") else None)


def describe_compacted_topics(admin_config: Any, cluster: str,
                              timeout_s: float = 15.0) -> list[CompactedTopicConfig]:
    """The compacted topics of the watched cluster, by topic. `admin_config`: a librdkafka
    configuration, or an AdminClient a long-running caller keeps (see
    `infra.topic_configs.describe_topic_configs`)."""
    out = []
    for topic, entries in describe_topic_configs(admin_config, cluster, timeout_s).items():
        c = compacted_topic_config(cluster, topic, entries)
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
