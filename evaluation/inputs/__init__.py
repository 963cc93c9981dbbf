"""The detectors' read side: read a time range of the lake and build the rules' inputs.

The rule modules (slow_broker, offset_rewind, compaction_lag, unclean_election) are pure:
they take lists of small dataclasses. This package reads [start_ms, end_ms) of the silver
and gold tables of one `infra.lake.Lake`, does the aggregation in SQL, and builds only the
small per-window, per-entity or per-event rows. A table that does not exist yet yields an
empty input; nothing later than end_ms is ever read, so a replay over history sees what a
live evaluation at end_ms would have seen (given complete data).

One engine: every input is read through `infra.lake_sql.LakeSql`, delta-rs snapshots
and DuckDB in the detector's own process, no JVM (that module says why: each Spark read
cost 2-5 s on a loaded host). The slow-broker baselines, an hour of gold minutes, are
cached (`BaselineCache`).

One module per detector's inputs, each docstring saying where every input comes from:

- request_windows.py: the request-log agents' windows: stage windows, latency baselines,
  follower fetches, per-client send times, producers' own Produce times.
- slow_broker.py: the baselines' median rule; leaderships, outages and ISR shrinks
  (silver.log_events).
- client_rtts.py: the slow-link rule's producers' round trips per broker
  (silver.client_stats).
- partition_signals.py: offset commits, partition offsets, client offset resets, log
  truncations, group membership, who committed (OffsetCommit request-log lines), group
  coordinator loads.
- elections.py: unclean-election lines and the controllers' unclean-election meter.
- compaction.py: cleaner gauges, cleaner runs and compacted partitions' sizes (over the
  growing-partition rule's window, downsampled), compacted topics' configs (fetched by
  infra.topic_configs).
- tables.py: the time range and the lake reads they share.

This module holds `DetectorInputs`, everything for one range, and `read_inputs`, which
runs the reads in parallel chains. It calls each read by its name here, so a bench can
wrap them to time each (bench/bench_detect_eval.py).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence, TypeVar

from core.config_keys import ConfigError
from core.outages import BrokerOutage
from detectors.compaction_lag import CleanerGauges, CleanerRun, CompactedTopicConfig, PartitionSize
from detectors.partition_signals import (
    ClientOffsetReset,
    CommitRequest,
    CoordinatorLoad,
    GroupMembership,
    LogTruncation,
    OffsetCommit,
    PartitionOffsets,
)
from detectors.slow_broker import (
    ClientSendWindow,
    FollowerFetchWindow,
    HeldRequest,
    IsrShrink,
    LatencyBaseline,
    RequestStageWindow,
)
from detectors.slow_client import ClientRttWindow, ProducerServerWindow
from detectors.lost_range import LeaderEpochSeen, UncleanElection
from detectors.vanished_offsets import OffsetRemoval
from core.disruptions import Kind, ReplicaStart, span_ms
from detectors.unclean_election import UncleanElectionMeterTick
from infra.lake import Lake
from infra.lake_sql import LakeSql
from evaluation.config import DetectionConfig
from evaluation.inputs.client_rtts import read_client_rtts
from evaluation.inputs.request_windows import (
    read_held_requests,
    read_window_baselines,
    read_window_client_sends,
    read_window_follower_windows,
    read_window_producer_times,
    read_window_stage_windows,
)
from evaluation.inputs.compaction import (
    CLEANER_METRICS,
    LONG_MAX,
    SIZE_STEP_S,
    TopicConfigCache,
    cleaner_runs_from,
    compacted_topic_config,
    compacted_topics,
    contract_range,
    contract_steps,
    describe_compacted_topics,
    growth_range,
    read_cleaner_gauges,
    read_cleaner_runs,
    read_contract_sizes,
    read_partition_sizes,
)
from evaluation.inputs.elections import (
    COUNTER_SEED_S,
    UNCLEAN_METER,
    dedupe_elections,
    leader_epochs_from,
    merge_controller_ticks,
    read_leader_epochs,
    read_meter_ticks,
    topic_ids,
)
from evaluation.inputs.partition_signals import (
    COMMIT_KEY,
    COMMIT_ORDER,
    COMMIT_SEED_S,
    CommitSeedCache,
    client_reset_from_row,
    commit_request_from_row,
    coordinator_loads_from,
    read_commit_requests,
    read_commits,
    read_memberships,
    read_partition_offsets,
    read_removals,
    read_resets,
    truncations_from,
    with_delete_requests,
    with_positions,
)
from evaluation.inputs.slow_broker import (
    BASELINE_HISTORY_S,
    ISR_CONFIRM_S,
    ISR_SEED_S,
    BaselineCache,
    replica_starts_from,
    outages_from,
    shrinks_from_isr_events,
)
from evaluation.inputs.tables import LOG_EVENT_KINDS, TimeRange, read_log_events
from evaluation.inputs.window_cache import WindowReadCache
from schemas.broker_metrics import LOG_SIZE

# Every silver.broker_metrics series a detector reads (evaluation/inputs/tables.py
# broker_metrics): a corpus replay keeps only these (matrix/corpus.py), and its lake
# refuses a read of any other, so a detector that starts reading a new series fails the
# replays until it is added here.
DETECTOR_METRICS = frozenset({*CLEANER_METRICS, LOG_SIZE, UNCLEAN_METER})

__all__ = [
    "BASELINE_HISTORY_S", "CLEANER_METRICS", "COMMIT_KEY", "COMMIT_ORDER", "COMMIT_SEED_S",
    "COUNTER_SEED_S", "DETECTOR_METRICS", "ISR_CONFIRM_S",
    "ISR_SEED_S", "LOG_EVENT_KINDS", "LONG_MAX", "SIZE_STEP_S",
    "UNCLEAN_METER", "BaselineCache", "CommitSeedCache", "DetectorInputs", "TimeRange",
    "TopicConfigCache", "WindowReadCache",
    "check_config", "cleaner_runs_from", "client_reset_from_row", "commit_request_from_row",
    "compacted_topic_config", "coordinator_loads_from", "read_commit_requests",
    "compacted_topics", "contract_range", "contract_steps", "dedupe_elections",
    "describe_compacted_topics", "growth_range", "leader_epochs_from",
    "replica_starts_from",
    "merge_controller_ticks", "read_leader_epochs",
    "read_cleaner_gauges", "read_cleaner_runs", "read_client_rtts",
    "read_commits", "read_contract_sizes", "read_inputs", "read_log_events",
    "read_memberships", "read_meter_ticks", "read_partition_offsets",
    "read_partition_sizes", "read_resets",
    "shrinks_from_isr_events",
    "topic_ids", "truncations_from",
]

T = TypeVar("T")

log = logging.getLogger(__name__)


@dataclass
class DetectorInputs:
    """Everything the detectors take (detectors/registry.py names who reads what), for one
    range."""
    stage_windows: list[RequestStageWindow] = field(default_factory=list)
    baselines: list[LatencyBaseline] = field(default_factory=list)
    follower_fetches: list[FollowerFetchWindow] = field(default_factory=list)
    isr_shrinks: list[IsrShrink] = field(default_factory=list)
    broker_outages: list[BrokerOutage] = field(default_factory=list)
    replica_starts: list[ReplicaStart] = field(default_factory=list)
    client_sends: list[ClientSendWindow] = field(default_factory=list)
    held_requests: list[HeldRequest] = field(default_factory=list)
    client_rtts: list[ClientRttWindow] = field(default_factory=list)
    producer_times: list[ProducerServerWindow] = field(default_factory=list)
    commits: list[OffsetCommit] = field(default_factory=list)
    removals: list[OffsetRemoval] = field(default_factory=list)
    partition_offsets: list[PartitionOffsets] = field(default_factory=list)
    resets: list[ClientOffsetReset] = field(default_factory=list)
    memberships: list[GroupMembership] = field(default_factory=list)
    truncations: list[LogTruncation] = field(default_factory=list)
    commit_requests: list[CommitRequest] = field(default_factory=list)
    coordinator_loads: list[CoordinatorLoad] = field(default_factory=list)
    elections: list[UncleanElection] = field(default_factory=list)
    leader_epochs: list[LeaderEpochSeen] = field(default_factory=list)
    meter_ticks: list[UncleanElectionMeterTick] = field(default_factory=list)
    cleaner_gauges: list[CleanerGauges] = field(default_factory=list)
    cleaner_runs: list[CleanerRun] = field(default_factory=list)
    topic_configs: list[CompactedTopicConfig] = field(default_factory=list)
    partition_sizes: list[PartitionSize] = field(default_factory=list)
    # rule 5c's finer sizes of the topics with a short max.compaction.lag.ms
    contract_sizes: list[PartitionSize] = field(default_factory=list)
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


def check_config(config: DetectionConfig) -> None:
    """The slow-broker detector reads the agents' windows as its windows: same length."""
    request_log = getattr(config, "request_log", None)
    if request_log is not None and float(request_log.window_s) != float(
            config.slow_broker.window_s):
        raise ConfigError(
            f"{config.source}: key 'slow_broker.window_s' ({config.slow_broker.window_s:g}) must "
            f"equal 'request_log.window_s' ({request_log.window_s}): the slow-broker detector "
            f"reads the agents' windows")


# --- the parallel read -------------------------------------------------------------------------

def read_inputs(lake: Lake, config: DetectionConfig, start_ms: int, end_ms: int,
                topic_configs: Iterable[CompactedTopicConfig] = (), *,
                parallelism: int = 4,
                baseline_cache: BaselineCache | None = None,
                window_cache: WindowReadCache | None = None,
                commit_seed: CommitSeedCache | None = None,
                sql: LakeSql | None = None) -> DetectorInputs:
    """Every detector input for [start_ms, end_ms) of one lake.

    The reads form independent chains (stage windows then the client sends they point
    at; baselines; follower fetches; the producers' round trips then their own requests'
    times; log events and client resets, then the commits they
    point at, then those groups' memberships, commit lines and partitions' offsets; meter
    ticks; cleaner gauges; compacted partitions' sizes beside the cleaner runs, over the
    growing-partition rule's window, and the finer sizes rule 5c judges, over its span).
    DuckDB releases the GIL while a query runs, so `parallelism` chains run at once,
    each in a thread. The result does not depend on `parallelism` (1 reads in order).
    `baseline_cache` (the detector query's) may answer the baselines from an earlier read,
    `window_cache` the older windows of the per-window reads and of the metric and
    cleaner histories (evaluation/inputs/window_cache.py), and `commit_seed` the
    commits' starting positions (partition_signals.CommitSeedCache).
    `sql`: the caller's reader of the lake without the JVM (infra/lake_sql.py); None
    opens one for this call only (its table snapshots are then loaded afresh).
    """
    own_sql = sql is None
    sql = LakeSql(lake) if own_sql else sql
    reading = _Reading(lake, config, TimeRange(start_ms, end_ms), parallelism,
                       baseline_cache, DetectorInputs(topic_configs=list(topic_configs)),
                       window_cache, commit_seed, sql)
    # The longest chain first, so it never waits for a free thread.
    chains = (_partition_signal_chain, _request_stage_chain, _baseline_chain, _meter_tick_chain,
              _cleaner_gauge_chain, _compaction_history_chain, _client_rtt_chain)
    try:
        _run_all([functools.partial(chain, reading) for chain in chains], parallelism)
    finally:
        if own_sql:
            sql.close()
    return reading.out


@dataclass(frozen=True)
class _Reading:
    """One `read_inputs` call: what its chains read and where they put it."""
    lake: Lake
    config: DetectionConfig
    r: TimeRange
    parallelism: int
    baseline_cache: BaselineCache | None
    out: DetectorInputs
    window_cache: WindowReadCache | None = None
    commit_seed: CommitSeedCache | None = None
    sql: LakeSql | None = None

    @property
    def evidence_s(self) -> float:
        return self.config.offset_rewind.evidence_window_s

    @property
    def meter_s(self) -> float:
        return self.config.unclean_election.meter_match_window_s

    def by_window(self, name: str, read: Callable[[TimeRange], list[T]],
                  stream: str | None = None, **cached) -> list[T]:
        """`read(r)` of a per-window read, timed; with the detector query's cache, the
        older windows from its last read and only the newest read again (window_cache.py;
        `stream`, the silver stream read, for what silver says it wrote since; `cached`,
        WindowReadCache.read's other options)."""
        if self.window_cache is None:
            return self.out.timed(name, lambda: read(self.r))
        return self.out.timed(name, lambda: self.window_cache.read(
            name, self.r, self.config.slow_broker.window_ms, read, stream=stream, **cached))

    def side_by_side(self, *reads: Callable[[], None]) -> None:
        """Two reads of one chain at once (when parallelism allows)."""
        _run_all(reads, min(self.parallelism, 2))


def _request_stage_chain(x: _Reading) -> None:
    """The request windows: the stage windows (then the clients' sends) beside the follower
    fetches (and the replicas' sends, then the requests kept whole that the brokers held).
    With the detector query's cache, each read reads only its newest windows
    (window_cache.py)."""
    sb = x.config.slow_broker
    clients: list[ClientSendWindow] = []

    def stage_windows() -> None:
        x.out.stage_windows = x.by_window("stage_windows", lambda sub: read_window_stage_windows(
            x.sql, sb, sub), stream="request_windows")
        clients.extend(x.by_window("client_sends", lambda sub: read_window_client_sends(
            x.sql, sb, sub), stream="client_send_windows"))

    def window_followers() -> None:
        # silver.follower_fetch_windows once for the fetches and the replicas' sends
        both = x.by_window("follower_windows", lambda sub: read_window_follower_windows(
            x.sql, sb, sub), stream="follower_fetch_windows")
        x.out.follower_fetches = [w for w in both if isinstance(w, FollowerFetchWindow)]
        clients.extend(w for w in both if isinstance(w, ClientSendWindow))
        x.out.held_requests = x.by_window("held_requests", lambda sub: read_held_requests(
            x.sql, sb, sub), stream="request_exemplars", time_of=lambda h: h.end_ms)

    x.side_by_side(stage_windows, window_followers)
    x.out.client_sends = clients


def _baseline_chain(x: _Reading) -> None:
    def read() -> list[LatencyBaseline]:
        return read_window_baselines(x.sql, x.config.slow_broker, x.r)

    x.out.baselines = x.out.timed("baselines", lambda: (
        read() if x.baseline_cache is None else x.baseline_cache(x.r.start_ms, read)))


def _client_rtt_chain(x: _Reading) -> None:
    """The producers' round trips, then their own Produce requests' times from the edge's
    client rows."""
    x.out.client_rtts = x.by_window("client_rtts", lambda sub: read_client_rtts(
        x.sql, x.config.slow_broker, sub))
    producers = {c.client_id for c in x.out.client_rtts if c.client_type == "producer"}
    x.out.producer_times = x.by_window("producer_times", lambda sub: (
        read_window_producer_times(x.sql, x.config.slow_broker, sub, producers)))


def _partition_signal_chain(x: _Reading) -> None:
    """The longest chain: the log events and the client resets (read side by side), then
    the commits they point at, then those groups' memberships and commit request lines
    and partitions' offsets."""
    found: dict[str, list] = {}

    def log_events() -> None:
        found["events"] = x.out.timed("log_events", lambda: read_log_events(
            x.sql, x.r.back(max(ISR_SEED_S, x.evidence_s, x.meter_s))))

    def resets() -> None:
        x.out.resets = x.out.timed("resets", lambda: read_resets(
            x.sql, x.r.back(x.evidence_s)))

    x.side_by_side(log_events, resets)
    _inputs_from_log_events(x, found["events"])
    _commits_and_what_they_point_at(x)


def _inputs_from_log_events(x: _Reading, events: list[dict]) -> None:
    """ISR shrinks, truncations, coordinator loads and elections from the one log-event
    read."""
    r, out = x.r, x.out
    out.isr_shrinks = shrinks_from_isr_events(
        [e for e in events if e["kind"] in ("isr_shrink", "isr_update", "isr_expand",
                                            "leader_change")], since_ms=r.start_ms)
    out.broker_outages = outages_from(events, x.config.slow_broker)
    out.replica_starts = replica_starts_from(events, r.start_ms - max(
        span_ms(k, x.config.slow_broker.disruption_grace_s) for k in (Kind.LEADERSHIP_HANDOVER,
                                                   Kind.REPLICAS_CREATED)))
    out.truncations = truncations_from(events, r.start_ms - int(x.evidence_s * 1000))
    out.coordinator_loads = coordinator_loads_from(events, r.start_ms - int(x.evidence_s * 1000))
    election_since = r.start_ms - int(x.meter_s * 1000)
    topics = topic_ids(events)
    out.elections = dedupe_elections(
        [e for e in events
         if e["kind"] == "unclean_election" and e["ts_ms"] >= election_since], topics)
    if out.elections:
        # Is an election line new, or a restarted controller re-logging an old one? The
        # partition's leader epochs, over the metadata log's replay horizon.
        tps = {(e.cluster, e.topic, e.partition) for e in out.elections}
        out.leader_epochs = out.timed("leader_epochs", lambda: read_leader_epochs(
            x.sql, r.back(
                x.config.unclean_election.replay_lookback_s), tps, topics))


def _commits_and_what_they_point_at(x: _Reading) -> None:
    """The commits of elected, reset, removed (tombstoned) or rewound partitions, then
    (side by side) their groups' memberships and commit request lines and their
    partitions' offsets, and the removals' positions and delete requests."""
    sql, r, out = x.sql, x.r, x.out
    election_tps = {(e.cluster, e.topic, e.partition) for e in out.elections}
    reset_gtps = {(e.cluster, e.group, e.topic, e.partition) for e in out.resets if e.group}
    removals = out.timed("removal_tombstones", lambda: read_removals(sql, r))
    removed_gtps = {(y.cluster, y.group, y.topic, y.partition) for y in removals}
    out.commits = out.timed("commits", lambda: read_commits(
        sql, r, election_tps, reset_gtps | removed_gtps, seed=x.commit_seed))
    offset_tps = (election_tps | {(c.cluster, c.topic, c.partition) for c in out.commits}
                  | {(y.cluster, y.topic, y.partition) for y in removals}
                  | {(e.cluster, e.topic, e.partition) for e in out.resets}
                  | {(t.cluster, t.topic, t.partition) for t in out.truncations})
    groups = {(c.cluster, c.group) for c in out.commits}

    def memberships() -> None:
        out.memberships = out.timed("memberships", lambda: read_memberships(sql, r, groups))

    def partition_offsets() -> None:
        out.partition_offsets = out.timed("partition_offsets", lambda: (
            read_partition_offsets(sql, r.back(x.evidence_s), offset_tps)))
        # the positions and delete requests of removals whose topic is still sampled
        # after them (a deleted topic's offsets go with it): rare, and days back at most
        last = {}
        for o in out.partition_offsets:
            last[(o.cluster, o.topic, o.partition)] = o.observed_ms
        kept = [y for y in removals
                if last.get((y.cluster, y.topic, y.partition), -1) >= y.removed_ms]
        cache = x.commit_seed.positions if x.commit_seed is not None else None
        out.removals = out.timed("removals", lambda: with_delete_requests(
            sql, with_positions(sql, kept, cache)))

    def commit_requests() -> None:
        out.commit_requests = out.timed("commit_requests", lambda: read_commit_requests(
            sql, r.back(x.evidence_s), groups))

    x.side_by_side(memberships, commit_requests, partition_offsets)


def _meter_tick_chain(x: _Reading) -> None:
    x.out.meter_ticks = x.out.timed("meter_ticks", lambda: read_meter_ticks(
        x.sql, x.r, int(x.meter_s * 1000)))


# JMX samples reach silver later than request lines under load (a scrape interval, the
# agent's flush, silver batches of up to a minute): the cached metric and cleaner reads
# read this much again.
HISTORY_REREAD_MS = 120_000


def _incremental(x: _Reading, name: str, r: TimeRange, step_ms: int,
                 read: Callable[[TimeRange], list[T]], time_of: Callable[[T], int],
                 order: Callable[[T], Any]) -> list[T]:
    """`read(r)`, or, with the detector query's cache, the rows of the steps it read
    before (older than HISTORY_REREAD_MS) and a read of the rest only, in the read's own
    `order`: these reads span the growing-partition rule's two hours, hundreds of small
    files each evaluation."""
    if x.window_cache is None:
        return read(r)
    return sorted(x.window_cache.read(name, r, step_ms, read, time_of=time_of,
                                      reread_ms=HISTORY_REREAD_MS), key=order)


def _cleaner_gauge_chain(x: _Reading) -> None:
    x.out.cleaner_gauges = x.out.timed("cleaner_gauges", lambda: _incremental(
        x, "cleaner_gauges", x.r, x.config.slow_broker.window_ms,
        lambda sub: read_cleaner_gauges(x.sql, sub), lambda g: g.observed_ms,
        lambda g: (g.cluster, g.broker, g.observed_ms)))


def _compaction_history_chain(x: _Reading) -> None:
    """The cleaner runs and the compacted partitions' sizes (side by side), over the
    growing-partition rule's window: longer than the range, so read on their own; and
    beside them the finer sizes of the topics with a short max.compaction.lag.ms, over
    rule 5c's span."""
    r = growth_range(x.r, x.config.compaction_lag.growth_window_s)
    step_ms = int(SIZE_STEP_S * 1000)

    def order(p: PartitionSize) -> tuple:
        return p.cluster, p.topic, p.partition, p.observed_ms, p.broker

    def runs() -> None:
        x.out.cleaner_runs = x.out.timed("cleaner_runs", lambda: _incremental(
            x, "cleaner_runs", r, step_ms, lambda sub: read_cleaner_runs(x.sql, sub),
            lambda c: c.end_ms, lambda c: (c.end_ms, c.cluster, c.broker, c.topic, c.partition)))

    def sizes() -> None:
        topics = compacted_topics(x.out.topic_configs)
        # Another set of compacted topics is another read (the cache keeps it by name).
        name = "partition_sizes " + repr(sorted((c, sorted(t)) for c, t in topics.items()))
        x.out.partition_sizes = x.out.timed("partition_sizes", lambda: _incremental(
            x, name, r, step_ms, lambda sub: read_partition_sizes(x.sql, sub, topics),
            lambda p: p.observed_ms - p.observed_ms % step_ms, order))

    def contract_sizes() -> None:
        steps = contract_steps(x.out.topic_configs)
        span = contract_range(x.r, x.out.topic_configs,
                              x.config.compaction_lag.cleaner_backoff_s)
        if span is None:
            return
        # Each topic's step divides the minute: the cache keeps and reads again whole
        # minutes, as for the other sizes.
        name = "contract_sizes " + repr(sorted((c, sorted(t.items()))
                                               for c, t in steps.items()))
        x.out.contract_sizes = x.out.timed("contract_sizes", lambda: _incremental(
            x, name, span, step_ms, lambda sub: read_contract_sizes(x.sql, sub, steps),
            lambda p: p.observed_ms - p.observed_ms % step_ms, order))

    x.side_by_side(runs, sizes, contract_sizes)


def _run_all(tasks: Sequence[Callable[[], None]], parallelism: int) -> None:
    """Run the tasks, `parallelism` at a time; the first error is raised once all ended."""
    if parallelism <= 1 or len(tasks) <= 1:
        for task in tasks:
            task()
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=parallelism, thread_name_prefix="detector-read") as pool:
        futures = [pool.submit(task) for task in tasks]
    for f in futures:
        f.result()
