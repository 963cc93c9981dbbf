"""Compaction lag: the log cleaner falls behind, stalls or dies.

Why it matters: compacted topics only stay bounded while the cleaner keeps up. When it
does not, they grow without limit; for __consumer_offsets that means every coordinator
move (a broker restart, a leader change) loads an ever longer log before it can serve
offsets, and consumers meanwhile see stale offsets or none (the LinkedIn incident where
a dead cleaner left __consumer_offsets at hundreds of GB).

Signal (typed below; the adapter collects the last `lookback` of each):
- `CleanerGauges`: one scrape of a broker's cleaner gauges (kafka.log:type=LogCleanerManager
  max-dirty-percent, time-since-last-run-ms, uncleanable-partitions-count,
  uncleanable-bytes, summed over log directories; kafka.log:type=LogCleaner
  max-compaction-delay-secs, DeadThreadCount). A gauge missing from a scrape is None.
- `CleanerRun`: one "Log cleaner thread N cleaned log <tp>" event from log-cleaner.log.
- `CompactedTopicConfig`: a compacted topic's min.cleanable.dirty.ratio and
  max.compaction.lag.ms (None when left at the broker default).
- `PartitionSize`: a compacted partition's size on disk over time (JMX
  kafka.log:type=Log,name=Size,topic=T,partition=P, a gauge of bytes, one per replica).
Adapter (evaluation/inputs/compaction.py): CleanerGauges <- silver.broker_metrics;
CleanerRun <- silver.log_events kind = cleaner_run (end_ms = ts_ms, duration_s = seconds,
size_reduction_pct = reduction_pct); CompactedTopicConfig <- the topic configs
(AdminClient describeConfigs); PartitionSize <- silver.broker_metrics kafka_log_log_size
(`topic`, `labels.partition`; scraped by ingest/jmx_scraper.py through the exporter rule
in infra/resources/jmx-exporter.yaml), compacted topics only (those configs, plus
__consumer_offsets), the largest replica per partition, one point per minute; the
partitions of a topic whose max.compaction.lag.ms asks a finer step (contract_step_s) are
read again at that step over rule 5c's span only. Sizes and runs are read over
growth_window_s (plus two minutes), not the detector's lookback: rule 5 needs the whole
window.

Facts about the gauges the rules rely on (apache/kafka LogCleanerManager):
- time-since-last-run-ms is live: "now - the last time a cleaner thread looked for a log
  to clean". An idle cleaner looks every log.cleaner.backoff.ms (15 s), so it stays small
  unless the threads are dead, stuck, or busy on one huge log.
- max-dirty-percent and max-compaction-delay-secs are computed when a thread picks a log,
  so they freeze when the threads stop: never read them alone as "all is well".
- max-compaction-delay-secs is already the delay beyond each log's max.compaction.lag.ms
  (0 while every log is within its limit, and always 0 for logs left at the default
  infinite lag); any positive value means the cleaner misses a topic's contract.

Rules, per broker, in order of severity; the first that holds names the finding's cause,
and the evidence lists every rule's result:
1. cleaner_dead: DeadThreadCount > 0. A thread died on an exception (often a corrupt
   segment or an unsupported message format) and is never restarted until the broker is.
2. cleaner_stalled: time-since-last-run > max(stall_floor_s, stall_factor x the median of
   the broker's earlier samples) (the median only once min_history_samples exist). Catches
   hung threads and a cleaner stuck on one enormous log.
3. uncleanable_partitions: uncleanable-partitions-count > 0: logs the cleaner gave up on
   (marked uncleanable after an error); they grow until an operator intervenes.
4. falling_behind: max-dirty-percent non-decreasing over the last rising_observations
   samples with a net rise and never 0 among them (0: nothing was cleanable at that
   look), AND behind its contract: max-compaction-delay-secs above
   compaction_delay_tolerance_s, or max-dirty-percent above the most lenient
   min.cleanable.dirty.ratio of the compacted topics (x100) plus dirty_margin_pct (for
   clusters that never set max.compaction.lag.ms, where the delay gauge stays 0).
   Or: a pass that does not end while a topic's contract is missed. A pass is running
   when no thread has looked for work for longer than the brokers' log.cleaner.backoff.ms
   (cleaner_backoff_s; an idle thread looks that often). It counts once seen at two
   scrapes in a row (time-since-last-run above the backoff at both and grown between
   them: the same pass, still running). The contract is missed when
   max-compaction-delay-secs is above the tolerance, or no thread has looked for work
   for longer than the strictest max.compaction.lag.ms of the compacted topics. A
   throttled or overloaded cleaner spends minutes on one log; the dirty and delay gauges
   then freeze (they are computed when a thread picks a log), so a dirty share that was
   already high never "rises" again, but time-since-last-run does, by one scrape
   interval per scrape. Seen in the demo: dirty 70% and delay 0 frozen at the pick,
   time-since-last-run 10 s, 20 s, ... 214 s, on a topic that promises 5 s. Two looks,
   not rising_observations: the demo's first throttled pass can end within 30 s (27 s,
   seen at two scrapes at 8 and 18 s), and waiting for four looks then waits for the
   next long pass.
6. cleaner_not_running: the broker publishes no cleaner gauge (none within CLEANER_SILENT_MS
   of its latest size sample, counted from its return if it was out: a starting broker
   publishes its logs' sizes as it loads them and starts its cleaner after the last, and
   an outage explains every signal a broker does not send, core/outages.py; a broker
   still out is not judged) while another broker of the cluster does, and its replica
   of a compacted partition is larger than the dirty allowance 1/(1 - r) times the
   largest other replica of it (r: the topic's min.cleanable.dirty.ratio) at the same
   step. Replicas hold the same records and each broker cleans its own; between two
   cleanings one can outgrow another only by what the cleaner lets accumulate, so a copy
   past that, on a broker whose cleaner has gone silent, is not being cleaned: cleaner
   threads that never started (log.cleaner.enable=false) register no gauges, a missing
   signal no other rule reads. Either sign alone is weaker (an exporter rule missing on
   one broker; a replica still catching up is smaller, never larger). Checked first:
   nothing else runs on that broker.
Per compacted partition (its largest replica per step):
5. compacted_partition_growing: over at least growth_window_s with growth_min_samples
   samples, the size never dropped by more than growth_drop_tolerance between samples,
   and grew by growth_min_ratio or more, and by more than the cleaner lets a partition
   grow on purpose; and no cleaner run on that partition in the window (a partition that
   is cleaned but still grows has a growing key space, which is not lag: rule 5b).
5b. compacted_key_space_growing: the same growth (growth_min_ratio, no drop beyond
   growth_drop_tolerance; the runs show it is past the active segment), while the cleaner
   ran on the partition key_space_min_runs times or more on one replica in the window and
   no run removed more than key_space_max_reduction_pct of it: its keys are new rather than
   updates (a key that should repeat does not, e.g. a timestamp in it), so compaction
   cannot bound it and it grows until retention (if any) or the disk stops it. Not the
   cleaner's fault; a warning. A stable key space drops at each cleaning by what the
   updates superseded (up to half the partition at min.cleanable.dirty.ratio 0.5), and
   a partition cleaned often in small steps does not grow.
5c. past its topic's promise: the topic sets max.compaction.lag.ms L, and over the last
   L + 2 x cleaner_backoff_s (from a sample with data in it; L no shorter than six
   scrapes, below) the partition grew (by more than growth_drop_tolerance), never shrank
   by more than that, and no cleaner run on it was seen. Kafka rolls a segment
   when its first record is L old and the cleaner then cleans it within a backoff, so a
   partition of such a topic shrinks or is cleaned at least that often; one that does not
   is not compacted, whatever holds it back (an open transaction pins the last stable
   offset and the cleaner stops there; every replica grows alike and every broker's
   cleaner looks well). The topic's own promise replaces the long growth window.
   The span starts at a step's last sample and ends at the latest one, so the step's
   coarseness delays the rule by up to a step or two: nothing against an L of hours, as
   much as L itself against a minute. So the sizes it judges are at a step of at most
   L / 6 (contract_step_s: a divisor of the minute, no finer than the 10-s scrape), and
   the span holds six steps at least: a promise shorter than six scrapes is judged over
   six (contract_span_ms): over two scrapes or three, a cleaner busy with other logs (a
   thread cleans one log at a time) or on a loaded broker is seconds late, which is not
   a partition left uncompacted.
   __consumer_offsets gets its own cause (consumer_offsets_not_compacted) and severity
   high: slow coordinator loads, stale offsets.
   What the cleaner lets grow, and is not lag: the active segment is never cleaned, so a
   partition no larger than its topic's segment.bytes has nothing to clean (a young
   __consumer_offsets partition grows toward 100 MB for hours on a quiet cluster); and the
   cleaner picks a log only once its dirty share reaches min.cleanable.dirty.ratio r, so
   a partition grows by up to 1/(1 - r) - 1 of its clean size between two cleanings (100%
   at the default 0.5). Growth within either is how compaction works; the rule asks for
   more (with the topic's config unknown: the dirty allowance at
   default_min_cleanable_dirty_ratio, and no segment size).

Scoring: dead, not running and stalled high; uncleanable and falling behind warning; a growing
compacted partition warning, __consumer_offsets high. Unfixable by kmon: every finding
suggests page_human (a dead cleaner thread comes back only with a broker restart; an
uncleanable log needs its bad segment dealt with).

Config keys ([compaction_lag] section, `CompactionLagSection`), defaults:
stall_floor_s = 1800, stall_factor = 5.0, min_history_samples = 6,
rising_observations = 4, dirty_margin_pct = 20.0, default_min_cleanable_dirty_ratio = 0.5,
compaction_delay_tolerance_s = 0.0, growth_window_s = 7200, growth_min_ratio = 0.25,
growth_drop_tolerance = 0.02, growth_min_samples = 6, key_space_max_reduction_pct = 5.0,
key_space_min_runs = 2, topic_config_refresh_s = 300, cleaner_backoff_s = 15.0.

Output: `Detection`s of type compaction_lag, entity "broker:<id>" (rules 1-4) or
"<topic>-<p>" (rules 5 and 5b).
"""

from __future__ import annotations

import dataclasses

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass
from enum import StrEnum
from typing import Iterable, Sequence

from core.config_keys import _key
from core.findings import (
    ActionKind,
    AnomalyType,
    Detection,
    EntityKind,
    Severity,
    broker_entity,
    partition_entity,
)
from core.outages import BrokerOutage, back_since

CONSUMER_OFFSETS = "__consumer_offsets"
PASS_LOOKS = 2   # scrapes in a row at which one cleaner pass must be seen running


# One size per replica per this many seconds (the reader's step: the growth rule's two
# hours of history stay a few thousand rows).
SIZE_STEP_S = 60
# The finest step: the JMX scrape interval (ingest/jmx_scraper.py INTERVAL_S); a finer
# one holds no more samples.
SIZE_STEP_MIN_S = 10
# Rule 5c reads a topic's sizes at a step of at most its max.compaction.lag.ms / this.
CONTRACT_STEPS = 6
# A broker's cleaner gauges missing this long before its latest size sample (several
# scrapes at any usual interval) are gone, not late.
CLEANER_SILENT_MS = 30_000


class CompactionCause(StrEnum):
    """The `cause` of compaction_lag findings, broker rules in order of severity."""
    CLEANER_NOT_RUNNING = "cleaner_not_running"
    CLEANER_DEAD = "cleaner_dead"
    CLEANER_STALLED = "cleaner_stalled"
    UNCLEANABLE_PARTITIONS = "uncleanable_partitions"
    CLEANER_FALLING_BEHIND = "cleaner_falling_behind"
    CONSUMER_OFFSETS_NOT_COMPACTED = "consumer_offsets_not_compacted"
    COMPACTED_PARTITION_GROWING = "compacted_partition_growing"
    COMPACTED_KEY_SPACE_GROWING = "compacted_key_space_growing"


@dataclass(frozen=True)
class CompactionLagSection:
    stall_floor_s: float = _key("time-since-last-run above this (and above stall_factor x its "
                                "median) is a stalled cleaner", 1800.0, min=1, max=30 * 86400)
    stall_factor: float = _key("time-since-last-run above this many times its trailing median "
                               "(and above stall_floor_s) is a stalled cleaner", 5.0, min=1,
                               max=1000)
    min_history_samples: int = _key("Earlier samples needed before the trailing median is "
                                    "trusted", 6, min=1, max=100000)
    rising_observations: int = _key("Consecutive samples over which max-dirty-percent must keep "
                                    "rising to count as falling behind", 4, min=2, max=10000)
    dirty_margin_pct: float = _key("Percentage points above the most lenient "
                                   "min.cleanable.dirty.ratio at which dirty data counts as "
                                   "behind", 20.0, min=0, max=100)
    default_min_cleanable_dirty_ratio: float = _key("min.cleanable.dirty.ratio of topics that do "
                                                    "not set it (the broker's "
                                                    "log.cleaner.min.cleanable.ratio)", 0.5,
                                                    min=0, max=1)
    compaction_delay_tolerance_s: float = _key("max-compaction-delay-secs above this means the "
                                               "cleaner misses a topic's max.compaction.lag.ms",
                                               0.0, min=0, max=30 * 86400)
    growth_window_s: float = _key("A compacted partition must grow for at least this long "
                                  "(several cleaner cycles) to count as not compacted", 7200.0,
                                  min=60, max=30 * 86400)
    growth_min_ratio: float = _key("Growth over the window, as a fraction of the first size, "
                                   "that counts, at least: a partition also has to outgrow "
                                   "what its topic's min.cleanable.dirty.ratio lets it grow "
                                   "between two cleanings (100% at 0.5)", 0.25, min=0,
                                   max=1000)
    growth_drop_tolerance: float = _key("A shrink smaller than this fraction between two samples "
                                        "is noise, not a clean", 0.02, min=0, max=1)
    growth_min_samples: int = _key("Size samples needed in the window", 6, min=2, max=100000)
    key_space_max_reduction_pct: float = _key(
        "A cleaner run on a partition that removed at most this share of it removed next to "
        "nothing: a partition that grows although its runs in the growth window all removed "
        "so little has keys that are new, not updated (its key space grows)", 5.0, min=0,
        max=100)
    key_space_min_runs: int = _key("Cleaner runs on one replica of the partition in the growth "
                                   "window needed to say its key space grows", 2, min=1,
                                   max=100000)
    topic_config_refresh_s: float = _key(
        "How often the watched cluster's topic configs are described (which topics are "
        "compacted, their min.cleanable.dirty.ratio, segment.bytes and max.compaction.lag.ms): "
        "a new compacted topic's partitions are judged from the next description on", 300.0,
        min=5, max=86400)
    cleaner_backoff_s: float = _key("The brokers' log.cleaner.backoff.ms, in seconds: an idle "
                                    "cleaner thread looks for work this often, so a longer time "
                                    "since the last look means a pass is running", 15.0, min=0.1,
                                    max=86400)


@dataclass(frozen=True)
class CleanerGauges:
    cluster: str
    broker: int
    observed_ms: int
    max_dirty_percent: float | None = None
    time_since_last_run_ms: float | None = None
    max_compaction_delay_secs: float | None = None
    dead_thread_count: int | None = None
    uncleanable_partitions_count: int | None = None
    uncleanable_bytes: float | None = None


@dataclass(frozen=True)
class CleanerRun:
    cluster: str
    broker: int
    topic: str
    partition: int
    end_ms: int
    duration_s: float | None = None
    size_reduction_pct: float | None = None


@dataclass(frozen=True)
class CompactedTopicConfig:
    cluster: str
    topic: str
    min_cleanable_dirty_ratio: float | None = None
    max_compaction_lag_ms: int | None = None
    segment_bytes: int | None = None


@dataclass(frozen=True)
class PartitionSize:
    cluster: str
    topic: str
    partition: int
    observed_ms: int
    size_bytes: float
    broker: int | None = None


@dataclass(frozen=True)
class CleanerAssessment:
    """Every rule's result for one broker at its latest scrape."""
    broker: int
    latest: CleanerGauges
    cleaner_dead: bool
    cleaner_stalled: bool
    stall_limit_ms: float
    uncleanable_partitions: bool
    dirty_rising: bool
    behind_contract: bool
    pass_not_ending: bool        # with a topic past its max.compaction.lag.ms
    falling_behind: bool
    cause: str | None            # the first rule that holds, None when healthy
    since_ms: int                # when the condition the cause names began


@dataclass(frozen=True)
class GrowthAssessment:
    topic: str
    partition: int
    window_ms: int
    samples: int
    first_bytes: float
    last_bytes: float
    largest_drop: float          # the largest shrink between two samples, as a fraction
    cleaned_in_window: bool
    growing: bool
    required_ratio: float = 0.0  # the growth that counts (growth_min_ratio or the dirty allowance)
    segment_bytes: int | None = None   # the topic's segment.bytes, when known
    key_space_growing: bool = False    # rule 5b: cleaned, and grew all the same
    runs_in_window: int = 0            # cleaner runs on the busiest replica in the window
    max_reduction_pct: float | None = None   # the most any run in the window removed


# --- broker rules ----------------------------------------------------------------------

def cleaner_dead(g: CleanerGauges) -> bool:
    """A cleaner thread died; Kafka does not restart it."""
    return (g.dead_thread_count or 0) > 0


def stall_limit_ms(history: Sequence[CleanerGauges], config: CompactionLagSection) -> float:
    """How long since the last run is too long: the floor, or far above the usual."""
    floor = config.stall_floor_s * 1000
    earlier = [g.time_since_last_run_ms for g in history if g.time_since_last_run_ms is not None]
    if len(earlier) < config.min_history_samples:
        return floor
    return max(floor, config.stall_factor * statistics.median(earlier))


def cleaner_stalled(g: CleanerGauges, limit_ms: float) -> bool:
    """No cleaner thread has looked for work for far longer than usual."""
    return g.time_since_last_run_ms is not None and g.time_since_last_run_ms > limit_ms


def has_uncleanable_partitions(g: CleanerGauges) -> bool:
    """The cleaner gave up on some logs; they grow until someone intervenes."""
    return (g.uncleanable_partitions_count or 0) > 0


def dirty_rising(series: Sequence[CleanerGauges], n: int) -> bool:
    """max-dirty-percent never fell over the last n samples, rose overall, and was above
    zero at each. The gauge is the dirtiest compacted log's cleanable share at a look for
    work: 0 means nothing was cleanable then, the cleaner had caught up. A small
    compacted log jumps from 0 to 70% or so when a segment rolls and is cleaned at once
    (the demo's healthy runs); that is one jump, not dirt piling up run after run."""
    values = [g.max_dirty_percent for g in series if g.max_dirty_percent is not None][-n:]
    if len(values) < n:
        return False
    return (values[0] > 0 and all(b >= a for a, b in zip(values, values[1:]))
            and values[-1] > values[0])


def pass_not_ending(series: Sequence[CleanerGauges], backoff_ms: float,
                    looks: int = PASS_LOOKS) -> bool:
    """The same cleaner pass seen running at the last `looks` scrapes: time-since-last-run
    above the backoff (an idle thread would have looked for work by then) at each, and
    grown at each (no thread has come back to pick another log since)."""
    values = [g.time_since_last_run_ms for g in series
              if g.time_since_last_run_ms is not None][-looks:]
    return (len(values) >= looks and all(v > backoff_ms for v in values)
            and all(b > a for a, b in zip(values, values[1:])))


def past_max_compaction_lag(g: CleanerGauges, config: CompactionLagSection,
                            strictest_lag_ms: float | None = None) -> bool:
    """A topic's max.compaction.lag.ms is missed: the delay gauge says so, or no cleaner
    thread has looked for work for longer than the strictest topic allows."""
    if (g.max_compaction_delay_secs or 0) > config.compaction_delay_tolerance_s:
        return True
    return (strictest_lag_ms is not None and g.time_since_last_run_ms is not None
            and g.time_since_last_run_ms
            > strictest_lag_ms + config.compaction_delay_tolerance_s * 1000)


def strictest_lag_ms(configs: Iterable[CompactedTopicConfig]) -> float | None:
    """The smallest max.compaction.lag.ms a compacted topic sets (None: none sets one)."""
    return min((c.max_compaction_lag_ms for c in configs
                if c.max_compaction_lag_ms is not None), default=None)


def cleanable_point_pct(configs: Iterable[CompactedTopicConfig],
                        config: CompactionLagSection) -> float:
    """The dirty percentage above which every compacted topic is due for cleaning."""
    ratios = [c.min_cleanable_dirty_ratio if c.min_cleanable_dirty_ratio is not None
              else config.default_min_cleanable_dirty_ratio for c in configs]
    return 100 * max(ratios, default=config.default_min_cleanable_dirty_ratio)


def behind_contract(g: CleanerGauges, cleanable_pct: float, config: CompactionLagSection) -> bool:
    """Dirty data older than a topic's max.compaction.lag.ms, or far above the cleaning point."""
    late = (g.max_compaction_delay_secs or 0) > config.compaction_delay_tolerance_s
    dirty = (g.max_dirty_percent is not None
             and g.max_dirty_percent > cleanable_pct + config.dirty_margin_pct)
    return late or dirty


def _streak_start(series: Sequence[CleanerGauges], holds) -> int:
    """observed_ms of the first sample of the run of samples, ending at the latest, where
    `holds` is true."""
    start = series[-1].observed_ms
    for g in reversed(series):
        if not holds(g):
            break
        start = g.observed_ms
    return start


def assess_cleaner(series: Sequence[CleanerGauges], cleanable_pct: float,
                   config: CompactionLagSection,
                   strictest_lag: float | None = None) -> CleanerAssessment:
    """Apply rules 1-4 to one broker's time-ordered scrapes.

    Order: a dead thread explains a stall and frozen gauges, so it comes first; a stall
    explains why dirty data piles up, so it comes before falling_behind; uncleanable logs
    are a specific, actionable cause, so they come before the general falling_behind.
    """
    latest = series[-1]
    limit = stall_limit_ms(series[:-1], config)
    dead = cleaner_dead(latest)
    stalled = cleaner_stalled(latest, limit)
    uncleanable = has_uncleanable_partitions(latest)
    rising = dirty_rising(series, config.rising_observations)
    behind = behind_contract(latest, cleanable_pct, config)
    long_pass = (pass_not_ending(series, config.cleaner_backoff_s * 1000)
                 and past_max_compaction_lag(latest, config, strictest_lag))
    falling = (rising and behind) or long_pass
    if dead:
        cause = CompactionCause.CLEANER_DEAD
        since = _streak_start(series, cleaner_dead)
    elif stalled:
        cause = CompactionCause.CLEANER_STALLED
        since = int(latest.observed_ms - latest.time_since_last_run_ms)
    elif uncleanable:
        cause = CompactionCause.UNCLEANABLE_PARTITIONS
        since = _streak_start(series, has_uncleanable_partitions)
    elif falling and rising and behind:
        cause = CompactionCause.CLEANER_FALLING_BEHIND
        dirty = [g for g in series if g.max_dirty_percent is not None]
        since = dirty[-config.rising_observations].observed_ms
    elif falling:
        cause = CompactionCause.CLEANER_FALLING_BEHIND
        since = int(latest.observed_ms - latest.time_since_last_run_ms)
    else:
        cause, since = None, latest.observed_ms
    return CleanerAssessment(
        broker=latest.broker, latest=latest, cleaner_dead=dead, cleaner_stalled=stalled,
        stall_limit_ms=limit, uncleanable_partitions=uncleanable, dirty_rising=rising,
        behind_contract=behind, pass_not_ending=long_pass, falling_behind=falling, cause=cause,
        since_ms=since)


# --- rule 6: a broker whose cleaner does not run ----------------------------------------

@dataclass(frozen=True)
class Diverged:
    """A broker's replica past the dirty allowance of the partition's other replicas."""
    topic: str
    partition: int
    own_bytes: float
    largest_other_bytes: float
    allowance: float


@dataclass(frozen=True)
class NotRunning:
    broker: int
    last_size_ms: int                 # its latest size sample
    last_gauge_ms: int | None         # its last cleaner gauge, if any was read
    diverged: tuple[Diverged, ...]


def dirty_allowance(topic: CompactedTopicConfig | None, config: CompactionLagSection) -> float:
    """How much larger than a just-cleaned replica one the cleaner has not reached yet may
    be: 1/(1 - r) (r: min.cleanable.dirty.ratio, the brokers' default when unknown)."""
    r = topic.min_cleanable_dirty_ratio if topic is not None and \
        topic.min_cleanable_dirty_ratio is not None else config.default_min_cleanable_dirty_ratio
    return float("inf") if r >= 1 else 1 / (1 - r)


def _step(ms: int, step_s: int = SIZE_STEP_S) -> int:
    return ms - ms % (step_s * 1000)


def cleaners_not_running(sizes: Sequence[PartitionSize], gauges: Sequence[CleanerGauges],
                         topics: dict[tuple[str, str], CompactedTopicConfig],
                         config: CompactionLagSection,
                         outages: Sequence[BrokerOutage] = ()) -> list[NotRunning]:
    """Rule 6 over one cluster's per-replica sizes, cleaner gauges and broker outages."""
    last_gauge: dict[int, int] = {}
    for g in gauges:
        last_gauge[g.broker] = max(g.observed_ms, last_gauge.get(g.broker, g.observed_ms))
    by_step: dict[tuple[str, int, int], dict[int, PartitionSize]] = defaultdict(dict)
    latest: dict[int, int] = {}
    for x in sizes:
        if x.broker is None:
            continue
        by_step[(x.topic, x.partition, _step(x.observed_ms))][x.broker] = x
        latest[x.broker] = max(x.observed_ms, latest.get(x.broker, x.observed_ms))
    out = []
    for broker, last_ms in sorted(latest.items()):
        since = last_ms - CLEANER_SILENT_MS
        back = back_since(outages, sizes[0].cluster, broker, last_ms)
        heard = max(last_gauge.get(broker, since - 1), since - 1 if back is None else back)
        if heard >= since or not any(ms >= since for b, ms in last_gauge.items() if b != broker):
            continue          # it publishes them, is out or just back, or no broker does
        step = _step(last_ms)
        diverged = []
        for (topic, partition, at), replicas in sorted(by_step.items()):
            own = replicas.get(broker)
            others = [r.size_bytes for b, r in replicas.items() if b != broker]
            if at != step or own is None or not others or max(others) <= 0:
                continue
            allowance = dirty_allowance(topics.get((own.cluster, topic)), config)
            if own.size_bytes > allowance * max(others):
                diverged.append(Diverged(topic, partition, own.size_bytes, max(others),
                                         allowance))
        if diverged:
            out.append(NotRunning(broker, last_ms, last_gauge.get(broker), tuple(diverged)))
    return out


def not_running_detection(cluster: str, a: NotRunning) -> Detection:
    worst = max(a.diverged, key=lambda d: d.own_bytes / d.largest_other_bytes)
    silent = (f"none since {_duration(a.last_size_ms - a.last_gauge_ms)} before its latest "
              f"scrape" if a.last_gauge_ms is not None else "none in the range read")
    return Detection(
        cluster=cluster, type=AnomalyType.COMPACTION_LAG, severity=Severity.HIGH,
        entity_kind=EntityKind.BROKER, entity=broker_entity(a.broker),
        first_seen_ms=a.last_size_ms, last_seen_ms=a.last_size_ms,
        cause=CompactionCause.CLEANER_NOT_RUNNING,
        explanation=(f"Broker {a.broker}'s log cleaner is not running: it publishes no cleaner "
                     f"metrics ({silent}) while its peers do, and its replicas of "
                     f"{len(a.diverged)} compacted partition(s) outgrew the others, e.g. "
                     f"{worst.topic}-{worst.partition} at {worst.own_bytes:,.0f} bytes against "
                     f"{worst.largest_other_bytes:,.0f} (at most {worst.allowance:.2f}x between "
                     f"two cleanings). Its compacted topics, __consumer_offsets included, now "
                     f"grow unbounded (log.cleaner.enable=false, or threads that never "
                     f"started)."),
        suggested_action=ActionKind.PAGE_HUMAN,
        evidence={"broker": a.broker, "last_size_ms": a.last_size_ms,
                  "last_cleaner_gauge_ms": a.last_gauge_ms,
                  "diverged": [{"topic": d.topic, "partition": d.partition,
                                "own_bytes": d.own_bytes,
                                "largest_other_bytes": d.largest_other_bytes,
                                "allowance": round(d.allowance, 4)} for d in a.diverged]})


# --- partition rule --------------------------------------------------------------------

def largest_per_step(series: Sequence[PartitionSize],
                     step_s: int = SIZE_STEP_S) -> list[PartitionSize]:
    """One partition's replica sizes as its largest replica per step (of equal ones the
    lowest broker), stamped with the step's last scrape: what rule 5 judges. `step_s`:
    the step the reader read them at."""
    steps: dict[int, list[PartitionSize]] = defaultdict(list)
    for x in series:
        steps[_step(x.observed_ms, step_s)].append(x)
    out = []
    for at in sorted(steps):
        xs = steps[at]
        top = max(xs, key=lambda x: (x.size_bytes, -(x.broker if x.broker is not None else -1)))
        out.append(dataclasses.replace(top, observed_ms=max(x.observed_ms for x in xs)))
    return out


def growth_allowance(topic: CompactedTopicConfig | None, config: CompactionLagSection) -> float:
    """How much a partition of the topic grows between two cleanings on purpose: up to a
    dirty share of min.cleanable.dirty.ratio r, 1/(1 - r) - 1 of its clean size (with r
    unknown, the brokers' default from default_min_cleanable_dirty_ratio); at least
    growth_min_ratio; infinite for r = 1 (never cleaned by ratio)."""
    r = topic.min_cleanable_dirty_ratio if topic is not None and \
        topic.min_cleanable_dirty_ratio is not None else config.default_min_cleanable_dirty_ratio
    if r >= 1:
        return float("inf")
    return max(config.growth_min_ratio, 1 / (1 - r) - 1)


def assess_growth(series: Sequence[PartitionSize], runs: Sequence[CleanerRun],
                  config: CompactionLagSection,
                  topic: CompactedTopicConfig | None = None) -> GrowthAssessment:
    """Rule 5 for one compacted partition's time-ordered sizes; `topic`: its topic's
    config, when known (the dirty allowance and the active segment's size)."""
    window_start = series[-1].observed_ms - config.growth_window_s * 1000
    in_window = [s for s in series if s.observed_ms >= window_start]
    # The window must really span growth_window_s: start from the last sample at or before
    # its start when there is one.
    earlier = [s for s in series if s.observed_ms < window_start]
    if earlier:
        in_window = [earlier[-1]] + in_window
    first, last = in_window[0], in_window[-1]
    drops = [max(0.0, (a.size_bytes - b.size_bytes) / a.size_bytes)
             for a, b in zip(in_window, in_window[1:]) if a.size_bytes > 0]
    largest_drop = max(drops, default=0.0)
    runs_in = [r for r in runs if first.observed_ms <= r.end_ms <= last.observed_ms]
    cleaned = bool(runs_in)
    span_ms = last.observed_ms - first.observed_ms
    required = growth_allowance(topic, config)
    segment = topic.segment_bytes if topic is not None else None
    steady = (span_ms >= config.growth_window_s * 1000
              and len(in_window) >= config.growth_min_samples
              and largest_drop <= config.growth_drop_tolerance
              and first.size_bytes > 0)
    growing = (steady and last.size_bytes >= first.size_bytes * (1 + required)
               and (segment is None or last.size_bytes > segment) and not cleaned)
    # Rule 5b needs no segment bound: cleaner runs show segments rolled (segment.ms rolls
    # them long before segment.bytes on a slow topic).
    runs_on_one = max(Counter(r.broker for r in runs_in).values(), default=0)
    reductions = [r.size_reduction_pct for r in runs_in]
    known = [x for x in reductions if x is not None]
    key_space = (steady and not growing
                 and runs_on_one >= config.key_space_min_runs
                 and len(known) == len(reductions)
                 and max(known) <= config.key_space_max_reduction_pct
                 and last.size_bytes >= first.size_bytes * (1 + config.growth_min_ratio))
    return GrowthAssessment(topic=last.topic, partition=last.partition, window_ms=span_ms,
                            samples=len(in_window), first_bytes=first.size_bytes,
                            last_bytes=last.size_bytes, largest_drop=largest_drop,
                            cleaned_in_window=cleaned, growing=growing,
                            required_ratio=required, segment_bytes=segment,
                            key_space_growing=key_space,
                            runs_in_window=runs_on_one,
                            max_reduction_pct=max(known, default=None))


def contract_step_s(max_compaction_lag_ms: int | None) -> int:
    """The size step rule 5c judges a topic at: the coarsest divisor of SIZE_STEP_S no
    coarser than max.compaction.lag.ms / CONTRACT_STEPS and no finer than SIZE_STEP_MIN_S
    (SIZE_STEP_S for a topic that sets none). Divisors, so each of these steps lies in one
    of the growth rule's and a read that starts on a minute starts on a whole step."""
    if max_compaction_lag_ms is None:
        return SIZE_STEP_S
    fits = max_compaction_lag_ms / 1000 / CONTRACT_STEPS
    return max((s for s in range(SIZE_STEP_MIN_S, SIZE_STEP_S + 1)
                if SIZE_STEP_S % s == 0 and s <= fits), default=SIZE_STEP_MIN_S)


def contract_span_ms(max_compaction_lag_ms: int, cleaner_backoff_s: float) -> int:
    """Rule 5c's span: the promise, no shorter than CONTRACT_STEPS of the finest step,
    and two backoffs."""
    return (max(max_compaction_lag_ms, CONTRACT_STEPS * SIZE_STEP_MIN_S * 1000)
            + int(2 * cleaner_backoff_s * 1000))


@dataclass(frozen=True)
class ContractMissed:
    topic: str
    partition: int
    max_compaction_lag_ms: int
    span_ms: int
    first_bytes: float
    last_bytes: float


def contract_missed(series: Sequence[PartitionSize], runs: Sequence[CleanerRun],
                    topic: CompactedTopicConfig | None,
                    config: CompactionLagSection) -> ContractMissed | None:
    """Rule 5c for one partition's largest replica per step."""
    if topic is None or topic.max_compaction_lag_ms is None or not series:
        return None
    last = series[-1]
    start = last.observed_ms - contract_span_ms(topic.max_compaction_lag_ms,
                                                config.cleaner_backoff_s)
    earlier = [x for x in series if x.observed_ms <= start and x.size_bytes > 0]
    if not earlier:
        return None                          # not watched (or not written) that long yet
    span = [earlier[-1]] + [x for x in series if x.observed_ms > start]
    tol = config.growth_drop_tolerance
    shrank = any(b.size_bytes < a.size_bytes * (1 - tol) for a, b in zip(span, span[1:]))
    cleaned = any(span[0].observed_ms <= r.end_ms <= last.observed_ms for r in runs)
    if shrank or cleaned or not last.size_bytes > span[0].size_bytes * (1 + tol):
        return None
    return ContractMissed(last.topic, last.partition, topic.max_compaction_lag_ms,
                          last.observed_ms - span[0].observed_ms, span[0].size_bytes,
                          last.size_bytes)


# --- detections ------------------------------------------------------------------------

_BROKER_CAUSES = {
    CompactionCause.CLEANER_DEAD: (
        Severity.HIGH, "{n} log cleaner thread(s) died and will not restart until the broker "
                       "does; compacted topics now grow unbounded"),
    CompactionCause.CLEANER_STALLED: (
        Severity.HIGH, "the log cleaner has not looked for work for {idle} (limit {limit})"),
    CompactionCause.UNCLEANABLE_PARTITIONS: (
        Severity.WARNING, "the log cleaner gave up on {n} partition(s) ({bytes:,.0f} bytes "
                          "uncleanable)"),
    CompactionCause.CLEANER_FALLING_BEHIND: (
        Severity.WARNING, "dirty data keeps rising ({dirty:.0f}% dirty, {behind})"),
}


def _duration(ms: float) -> str:
    s = ms / 1000
    return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.0f} min" if s >= 60 else f"{s:.0f} s"


def broker_detection(cluster: str, a: CleanerAssessment, last_run: CleanerRun | None,
                     cleanable_pct: float, strictest: float | None = None) -> Detection:
    g = a.latest
    severity, template = _BROKER_CAUSES[a.cause]
    delay_s = g.max_compaction_delay_secs or 0
    behind = (f"{delay_s:,.0f} s past a topic's max.compaction.lag.ms" if delay_s > 0
              else f"above the {cleanable_pct:.0f}% cleaning point")
    text = template.format(n=g.dead_thread_count if a.cause == CompactionCause.CLEANER_DEAD
                           else g.uncleanable_partitions_count,
                           idle=_duration(g.time_since_last_run_ms or 0),
                           limit=_duration(a.stall_limit_ms), bytes=g.uncleanable_bytes or 0,
                           dirty=g.max_dirty_percent or 0, behind=behind)
    if a.cause == CompactionCause.CLEANER_FALLING_BEHIND and not a.dirty_rising:
        waits = (f"dirty data waits {behind}" if delay_s > 0 else
                 f"a compacted topic promises compaction within {_duration(strictest or 0)} "
                 f"(max.compaction.lag.ms)")
        text = (f"a cleaner pass has run for {_duration(g.time_since_last_run_ms or 0)} without "
                f"ending while {waits}")
    return Detection(
        cluster=cluster, type=AnomalyType.COMPACTION_LAG, severity=severity,
        entity_kind=EntityKind.BROKER, entity=broker_entity(a.broker),
        first_seen_ms=min(a.since_ms, g.observed_ms), last_seen_ms=g.observed_ms,
        cause=a.cause, explanation=f"Broker {a.broker}: {text}.",
        suggested_action=ActionKind.PAGE_HUMAN,
        evidence={"broker": a.broker,
                  "rules": {"cleaner_dead": a.cleaner_dead, "cleaner_stalled": a.cleaner_stalled,
                            "uncleanable_partitions": a.uncleanable_partitions,
                            "dirty_rising": a.dirty_rising, "behind_contract": a.behind_contract,
                            "pass_not_ending": a.pass_not_ending,
                            "falling_behind": a.falling_behind},
                  "dead_thread_count": g.dead_thread_count,
                  "time_since_last_run_ms": g.time_since_last_run_ms,
                  "stall_limit_ms": a.stall_limit_ms,
                  "strictest_max_compaction_lag_ms": strictest,
                  "max_dirty_percent": g.max_dirty_percent,
                  "max_compaction_delay_secs": g.max_compaction_delay_secs,
                  "uncleanable_partitions_count": g.uncleanable_partitions_count,
                  "uncleanable_bytes": g.uncleanable_bytes,
                  "last_cleaned": None if last_run is None else
                  {"topic": last_run.topic, "partition": last_run.partition,
                   "end_ms": last_run.end_ms}})


def growth_detection(cluster: str, a: GrowthAssessment, last_ms: int) -> Detection:
    offsets_topic = a.topic == CONSUMER_OFFSETS
    growth = a.last_bytes / a.first_bytes - 1
    what = (f"{a.topic}-{a.partition} grew {growth:.0%} over {_duration(a.window_ms)} with no "
            f"compaction")
    if offsets_topic:
        explanation = (f"{what}: the group coordinator that loads it after a move will take "
                       f"ever longer, and consumers will see stale offsets meanwhile.")
    else:
        explanation = f"{what}: the log cleaner is not keeping up with this partition."
    return Detection(
        cluster=cluster, type=AnomalyType.COMPACTION_LAG,
        severity=Severity.HIGH if offsets_topic else Severity.WARNING,
        entity_kind=EntityKind.PARTITION, entity=partition_entity(a.topic, a.partition),
        first_seen_ms=last_ms - a.window_ms, last_seen_ms=last_ms,
        cause=(CompactionCause.CONSUMER_OFFSETS_NOT_COMPACTED if offsets_topic
               else CompactionCause.COMPACTED_PARTITION_GROWING),
        explanation=explanation, suggested_action=ActionKind.PAGE_HUMAN,
        evidence={**_growth_evidence(a, growth),
                  "required_growth_ratio": round(a.required_ratio, 4)})


def _growth_evidence(a: GrowthAssessment, growth: float) -> dict:
    """The evidence rules 5 and 5b share: the sizes and the window."""
    return {"topic": a.topic, "partition": a.partition, "first_bytes": a.first_bytes,
            "last_bytes": a.last_bytes, "growth_ratio": round(growth, 4),
            "window_ms": a.window_ms, "samples": a.samples,
            "largest_drop": round(a.largest_drop, 4), "segment_bytes": a.segment_bytes}


def contract_detection(cluster: str, c: ContractMissed, last_ms: int) -> Detection:
    return Detection(
        cluster=cluster, type=AnomalyType.COMPACTION_LAG, severity=Severity.WARNING,
        entity_kind=EntityKind.PARTITION, entity=partition_entity(c.topic, c.partition),
        first_seen_ms=last_ms - c.span_ms, last_seen_ms=last_ms,
        cause=CompactionCause.COMPACTED_PARTITION_GROWING,
        explanation=(f"{c.topic}-{c.partition} grew from {c.first_bytes:,.0f} to "
                     f"{c.last_bytes:,.0f} bytes over {_duration(c.span_ms)} with no "
                     f"compaction, past its topic's max.compaction.lag.ms of "
                     f"{_duration(c.max_compaction_lag_ms)}: something keeps the cleaner "
                     f"from it (an open transaction pins its last stable offset, or its "
                     f"replicas' cleaners are stuck)."),
        suggested_action=ActionKind.PAGE_HUMAN,
        evidence={"topic": c.topic, "partition": c.partition,
                  "max_compaction_lag_ms": c.max_compaction_lag_ms, "window_ms": c.span_ms,
                  "first_bytes": c.first_bytes, "last_bytes": c.last_bytes})


def key_space_detection(cluster: str, a: GrowthAssessment, last_ms: int) -> Detection:
    """Rule 5b: cleaned, and growing all the same. Not the cleaner's fault: compaction keeps
    the last record of each key, and these keys are new, so the partition grows until
    retention or the disk stops it. Warning (for __consumer_offsets too: many groups or
    partitions, not a stuck coordinator log)."""
    growth = a.last_bytes / a.first_bytes - 1
    return Detection(
        cluster=cluster, type=AnomalyType.COMPACTION_LAG, severity=Severity.WARNING,
        entity_kind=EntityKind.PARTITION, entity=partition_entity(a.topic, a.partition),
        first_seen_ms=last_ms - a.window_ms, last_seen_ms=last_ms,
        cause=CompactionCause.COMPACTED_KEY_SPACE_GROWING,
        explanation=(f"{a.topic}-{a.partition} grew {growth:.0%} over "
                     f"{_duration(a.window_ms)} although the log cleaner ran on it "
                     f"{a.runs_in_window} times, removing at most "
                     f"{a.max_reduction_pct or 0:.1f}% each time: its records have new keys, "
                     f"not updates of old ones, so compaction cannot bound it (a key "
                     f"that should repeat but does not, or a topic that wants retention)."),
        suggested_action=ActionKind.PAGE_HUMAN,
        evidence={**_growth_evidence(a, growth), "cleaner_runs": a.runs_in_window,
                  "max_reduction_pct": a.max_reduction_pct})


def detect_compaction_lag(gauges: Iterable[CleanerGauges], *,
                          runs: Iterable[CleanerRun] = (),
                          topic_configs: Iterable[CompactedTopicConfig] = (),
                          sizes: Iterable[PartitionSize] = (),
                          contract_sizes: Iterable[PartitionSize] = (),
                          outages: Iterable[BrokerOutage] = (),
                          config: CompactionLagSection | None = None) -> list[Detection]:
    """compaction_lag detections: one per unhealthy broker, one per growing partition.
    `sizes`: every replica's, at SIZE_STEP_S (rule 6 compares them; rule 5 takes the
    largest); `contract_sizes`: every replica's of the topics whose contract_step_s is
    finer, at that step over rule 5c's span (rule 5c judges those partitions by them);
    `outages`: when brokers were out (rule 6 counts a broker's silence from its return)."""
    config = config or CompactionLagSection()
    gauges_by_broker: dict[tuple[str, int], list[CleanerGauges]] = defaultdict(list)
    for g in gauges:
        gauges_by_broker[(g.cluster, g.broker)].append(g)
    runs = list(runs)
    configs_by_cluster: dict[str, list[CompactedTopicConfig]] = defaultdict(list)
    for c in topic_configs:
        configs_by_cluster[c.cluster].append(c)
    sizes = list(sizes)
    topics = {(c.cluster, c.topic): c for cs in configs_by_cluster.values() for c in cs}
    outages = list(outages)
    detections, not_running = [], set()
    for cluster in sorted({x.cluster for x in sizes}):
        for a in cleaners_not_running(
                [x for x in sizes if x.cluster == cluster],
                [g for (c, _), gs in gauges_by_broker.items() if c == cluster for g in gs],
                topics, config, [o for o in outages if o.cluster == cluster]):
            detections.append(not_running_detection(cluster, a))
            not_running.add((cluster, a.broker))
    for (cluster, broker), series in sorted(gauges_by_broker.items()):
        if (cluster, broker) in not_running:
            continue
        series.sort(key=lambda g: g.observed_ms)
        cleanable_pct = cleanable_point_pct(configs_by_cluster[cluster], config)
        strictest = strictest_lag_ms(configs_by_cluster[cluster])
        a = assess_cleaner(series, cleanable_pct, config, strictest)
        if a.cause is None:
            continue
        mine = [r for r in runs if r.cluster == cluster and r.broker == broker]
        last_run = max(mine, key=lambda r: r.end_ms, default=None)
        detections.append(broker_detection(cluster, a, last_run, cleanable_pct, strictest))

    sizes_by_tp: dict[tuple[str, str, int], list[PartitionSize]] = defaultdict(list)
    for s in sizes:
        sizes_by_tp[(s.cluster, s.topic, s.partition)].append(s)
    finer_by_tp: dict[tuple[str, str, int], list[PartitionSize]] = defaultdict(list)
    for s in contract_sizes:
        finer_by_tp[(s.cluster, s.topic, s.partition)].append(s)
    for (cluster, topic, partition), replicas in sorted(sizes_by_tp.items()):
        series = largest_per_step(replicas)
        tp_runs = [r for r in runs
                   if (r.cluster, r.topic, r.partition) == (cluster, topic, partition)]
        tc = topics.get((cluster, topic))
        a = assess_growth(series, tp_runs, config, tc)
        if a.growing:
            detections.append(growth_detection(cluster, a, series[-1].observed_ms))
        elif a.key_space_growing:
            detections.append(key_space_detection(cluster, a, series[-1].observed_ms))
        else:
            step = contract_step_s(tc.max_compaction_lag_ms if tc is not None else None)
            finer = finer_by_tp.get((cluster, topic, partition))
            judged = largest_per_step(finer, step) if finer and step < SIZE_STEP_S else series
            if (c := contract_missed(judged, tp_runs, tc, config)) is not None:
                detections.append(contract_detection(cluster, c, judged[-1].observed_ms))
    return detections
