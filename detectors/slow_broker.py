"""Slow broker: a broker whose requests are slow, the stage that makes them slow, and who
is to blame (the broker, one of its followers, its clients, or nobody in particular).

Signal (typed below; gold computes them from the request log, which has every request's
exact stage times; the JMX histograms are smoothed over minutes and too late for the
detection target):
- `RequestStageWindow`: per cluster/broker/API/window, the request count and the p99 of
  TotalTime and of each stage: RequestQueue, Local, Remote, Throttle, ResponseQueue,
  ResponseSend. Optionally `total_excl_remote_p99_ms`, the exact p99 of (total - remote)
  per request, which gold can compute from the request log.
- `FollowerFetchWindow`: per leader/follower/window, what the leader saw of the follower's
  replica fetches (request log FETCH lines with replicaId >= 0): how many, the longest
  silence between two of them (`max_fetch_gap_ms`: a fetch's arrival minus the previous
  one's completion) and the p99 ResponseSend time (a follower that reads slowly).
- `IsrShrink`: "Shrinking ISR from ... Out of sync replicas: (...)" lines of a leader.
- `ClientSendWindow`: per broker/client/window, the p99 ResponseSend time of a client.
- `LatencyBaseline` (optional): a broker/API's usual latency from a longer history than
  the detector is given (e.g. gold's trailing median over the last hour, computed with
  `latency_ms`'s definition). Without it, the baseline is the median of the broker's
  earlier non-suspect windows in the input.

Adapter (Spark -> these dataclasses):
- RequestStageWindow <- the gold stage-percentile table (jobs/gold.py): window_start_ms =
  unix_millis(window_start), cluster, broker, api, requests, <stage>_p99_ms. Gold must
  run with window = window_s and a watermark of a few seconds for the detection target
  (its defaults, 1-minute windows and a 2-minute watermark, emit a window 3 minutes after
  it starts). Splitting Fetch into FetchConsumer and FetchFollower by fetch_kind helps
  attribution; both are purgatory APIs either way.
- FollowerFetchWindow <- silver.request_stages where fetch_kind = 'follower': leader =
  broker, follower = fetch_replica_id; per connection (broker, follower, remote_addr: each
  replica fetcher thread fetches in sequence) ordered by ts_ms (the completion time),
  gap = (ts_ms - total_ms) - lag(ts_ms), i.e. a fetch's arrival minus the previous one's
  completion, so purgatory time is not in it; max per window; send_p99_ms = p99 of
  send_ms.
- ClientSendWindow <- silver.request_stages grouped by window, broker, client_id, api:
  count and p99 of send_ms (only the brokers and windows that matter, if it is large).
- IsrShrink <- silver.log_events kind = isr_shrink (leader = broker).

Algorithm, per window (`window_s`, default 10 s), per broker and API (rules in order):
1. enough_traffic: requests >= min_requests_per_minute scaled to the window, and >=
   min_requests_per_window (100). Few requests make a p99 of one or two samples; a
   broker serving almost nothing must never be "slow" (cruise-control #1142:
   negligible-traffic brokers were its main false positive). Below 100 requests the p99
   is the slowest request alone: a demo healthy run (2026-11-25 19:32) flagged broker 2
   for OffsetCommit, 20 commits a window at 104 ms usually, at 377 ms in two windows of
   three: one slow commit each time.
2. latency: TotalTime TP99, except for APIs that wait in purgatory on purpose
   (`purgatory_apis`: Fetch, FetchConsumer, FetchFollower, JoinGroup, SyncGroup). A
   Fetch waits in Remote time until fetch.min.bytes arrive or fetch.max.wait.ms
   (replica.fetch.wait.max.ms for followers) runs out, 500 ms by default: on a quiet,
   healthy cluster Fetch TotalTime sits near 500 ms. That wait measures the absence of
   data, not the broker, so for those APIs the latency is the time outside Remote: the
   exact p99 of (total - remote) when gold gives it, else the larger of
   p99(total) - p99(remote) and the largest non-remote stage p99 (the latter is a true
   lower bound of p99(total - remote); the former is close when one population of
   requests dominates the tail). We chose this over a higher Fetch threshold because a
   threshold would either hide real Fetch slowness below ~800 ms or fire for every
   client that sets fetch.max.wait.ms above it; subtracting Remote is independent of
   client settings. Remote time still counts for Produce (acks=all waits for followers,
   which is real latency) and every other API.
3. over_threshold: latency > threshold_ms (300 ms) or api_threshold_ms[api]. An absolute
   floor: a broker at 40 ms when it usually does 10 is not a problem (cruise-control
   #1185 added the same floor after false positives).
4. slow_vs_history: latency >= history_ratio (3) x the broker's own baseline for the API.
5. slow_vs_peers: latency >= peer_ratio (3) x the median of the other brokers' latency
   for the same API in the same window (at least min_peers of them with traffic).
   suspect = 1 and 3 and (4 or 5). History catches a fleet-wide rise (every broker above
   its own past); peers catch a broker that has always been slow. A cluster that always
   runs at 320 ms is neither, however close to the threshold.
6. attribution of a suspect row: the dominant stage is the one with the largest p99
   share (Remote left out for purgatory APIs):
   - request_queue -> request_handlers_saturated; local -> local_disk_or_page_cache;
     response_queue -> network_threads_saturated. The broker is the culprit:
     move_leadership.
   - remote on Produce (or OffsetCommit / TxnOffsetCommit: the coordinator's acks=all
     append to __consumer_offsets) -> the follower that holds acks=all back (see below). The finding
     names the reporting leader (role victim, cause remote_produce_slow_follower, action
     none: moving its leadership would not help) and its evidence names the follower;
     the follower is blamed in its own finding (cause slow_follower, or its own stage
     cause when it is slow itself; held_back_leaders lists the leaders).
   - remote on another non-purgatory API -> remote_wait, unattributed, page_human.
   - send -> the clients: when the slow clients (ResponseSend p99 >= the API's threshold)
     are at most slow_client_share of the broker's clients, client_slow_read naming them
     (max_named_clients), action none; when most are slow, network_send_slow (the
     broker's network path), page_human; without client data response_send_slow,
     page_human.
   - throttle -> quota_throttled, info, action none: quotas doing their job.
   - no stage data -> slow_unattributed, page_human.
   One verdict per broker per window, by role: culprit, unattributed, victim, client,
   quota (a broker blamed for anything is reported as that).

Slow-follower attribution for a leader L (a Produce verdict dominated by Remote):
the follower's "holdback" at a leader is max(max_fetch_gap_ms, send_p99_ms): how long the
leader waited on it outside purgatory. A follower L had fetching in earlier windows that
sends nothing in this one (while L logs other requests) stopped fetching entirely: its
holdback is the whole window. Candidates are the followers named by L's ISR shrinks in
the window and those with holdback >= follower_holdback_floor_ms at L. A candidate F is
confirmed when its median holdback at the other leaders it follows is also above the
floor (slow everywhere: F is slow), and refuted when it is below (F fetches fine
elsewhere). When no other leader sees F, F is confirmed if L's ISR shrink named it but
not all of L's followers, or if its holdback is follower_ratio (3) x the median of L's
other followers. The confirmed candidate with the largest holdback is blamed. If every
follower of L was waited on but all fetch normally elsewhere, L itself is slow to serve
replication (a paused or overloaded leader makes all its followers look late, and on
resuming it even shrinks its ISR to drop them): cause leader_replication_stalled, L is
the culprit. Otherwise remote_produce_unknown_follower, unattributed.
Acceptance scenario (one broker paused in bursts, acks=all, RF=3): the other leaders'
Produce Remote time is attributed to it (victims naming it); it is blamed in its own
finding, with its own stage cause when its own requests were slow.

Cluster-wide: in each window, the blamed brokers are the culprits (self or as followers)
and the unattributed; victims, slow clients and quotas are not blamed. If more than
cluster_wide_share (0.5) of the brokers with traffic are blamed, and at least
cluster_wide_min_brokers (2), the window yields one cluster_wide_slowness verdict
instead of any broker verdict: a fleet-wide signal is not a broker's fault (and the
remediation step must not move leadership off half the fleet).

Persistence and decay: a broker (or the cluster) is detected when it has a verdict in at
least persistence_windows (2) of the last persistence_lookback_windows (3) windows. One
noisy window never fires; a broker paused in bursts that spare a window now and then
still fires; after recovery the detection lasts until fewer than 2 of the last 3 windows
hold a verdict (at most two more windows), and the finding resolves resolve_after_s later
(findings.py). Detection-time budget, the acceptance target being under 60 s from fault
start: the first faulty window closes within window_s of the fault, the second one
window_s later, so the evidence is complete 2 x window_s = 20 s after the fault; the
time for a window to count as closed (window_close_slack_s once every broker's rows are
past it, gold's watermark delay at the latest: detectors/inputs.py), the pipeline's
latency and the detector's trigger interval come on top. With 1-minute windows the same
rule would need 2-3 minutes: window_s is a parameter, and its default is 10 s for that
reason.

Unfixable (suggested page_human instead of move_leadership): cluster-wide slowness,
unattributed slowness, a slow follower seen only through the leaders it holds back
(moving leadership does not shorten acks=all waits on other leaders; the follower must
catch up or drop out of the ISR), and a broker whose clients' network is slow.

Config keys ([slow_broker] section, `SlowBrokerSection`), defaults:
window_s = 10, min_requests_per_minute = 50, min_requests_per_window = 100,
threshold_ms = 300, api_threshold_ms = {},
watched_apis = [Produce, Fetch, FetchConsumer, FetchFollower, Metadata, OffsetCommit,
OffsetFetch, ListOffsets], purgatory_apis = [Fetch, FetchConsumer, FetchFollower,
JoinGroup, SyncGroup], history_ratio = 3.0, min_history_windows = 6, peer_ratio = 3.0,
min_peers = 2, persistence_windows = 2, persistence_lookback_windows = 3,
cluster_wide_share = 0.5, cluster_wide_min_brokers = 2, follower_holdback_floor_ms = 1000,
follower_ratio = 3.0, slow_client_share = 0.5, max_named_clients = 5.

Input: pass closed windows only (an open window's p99 is of a partial population), at
least persistence_lookback_windows of them, and min_history_windows more when no
`LatencyBaseline` is given. Output: `Detection`s of type slow_broker (entity
"broker:<id>") and cluster_wide_slowness (entity "cluster:<name>").
"""

from __future__ import annotations

import bisect
import functools
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Iterable, Mapping, Sequence

from detectors.findings import (ActionKind, AnomalyType, Detection, EntityKind, Severity,
                                broker_entity, cluster_entity)
from kmon.config_keys import ConfigError, _key

STAGES = ("request_queue", "local", "remote", "throttle", "response_queue", "send")
STAGE_NAMES = {"request_queue": "RequestQueue", "local": "Local", "remote": "Remote",
               "throttle": "Throttle", "response_queue": "ResponseQueue", "send": "ResponseSend"}
# A baseline or peer median below this is treated as this: ratios to ~0 ms mean nothing.
MIN_REFERENCE_MS = 1.0
# How many windows a leader remembers a follower that stopped sending fetches.
FOLLOWER_MEMORY_WINDOWS = 3


@dataclass(frozen=True)
class SlowBrokerSection:
    window_s: float = _key("Length of the request-stage windows the detector is given; keep it "
                           "short enough for persistence_windows of them to fit the detection "
                           "target", 10.0, min=1, max=3600)
    window_close_slack_s: float = _key("A window the lake has not closed yet (computed from "
                                       "silver.request_stages) counts as closed once every "
                                       "broker of its cluster has its newest row this far "
                                       "past its end: each broker logs its requests in time "
                                       "order. At the latest "
                                       "it closes pipeline.fast_watermark_s after the newest "
                                       "row of any broker (a broker that stopped logging "
                                       "holds no window back longer)", 1.0, min=0, max=3600)
    min_requests_per_minute: float = _key("A broker/API with fewer requests (scaled to the "
                                          "window) is ignored in that window", 50.0, min=0,
                                          max=1e9)
    min_requests_per_window: int = _key("A broker/API with fewer requests than this in a "
                                        "window is ignored in it, whatever the window's "
                                        "length: below 100 requests a TP99 is the slowest "
                                        "request alone, and one slow request is not a slow "
                                        "broker", 100, min=0, max=1_000_000_000)
    threshold_ms: float = _key("Latency TP99 above which a broker/API can be slow", 300.0,
                               min=1, max=600000)
    api_threshold_ms: dict = _key("Per-API thresholds overriding threshold_ms, e.g. "
                                  "{\"Metadata\" = 1000}", {})
    watched_apis: list = _key("APIs whose latency is judged (JMX names)",
                              ["Produce", "Fetch", "FetchConsumer", "FetchFollower", "Metadata",
                               "OffsetCommit", "OffsetFetch", "ListOffsets"])
    purgatory_apis: list = _key("APIs that wait in Remote time on purpose (fetch.max.wait.ms, "
                                "rebalances): their Remote time never counts as slowness",
                                ["Fetch", "FetchConsumer", "FetchFollower", "JoinGroup",
                                 "SyncGroup"])
    history_ratio: float = _key("Slow against its own history: latency >= this x its baseline",
                                3.0, min=1, max=1000)
    min_history_windows: int = _key("Earlier healthy windows needed before the in-input "
                                    "baseline is trusted", 6, min=1, max=100000)
    peer_ratio: float = _key("Slow against its peers: latency >= this x the other brokers' "
                             "median for the same API and window", 3.0, min=1, max=1000)
    min_peers: int = _key("Other brokers with traffic needed for the peer comparison", 2,
                          min=1, max=100000)
    persistence_windows: int = _key("Windows with a verdict needed (out of "
                                    "persistence_lookback_windows) to detect", 2, min=1,
                                    max=1000)
    persistence_lookback_windows: int = _key("The last this many windows are counted for "
                                             "persistence", 3, min=1, max=1000)
    cluster_wide_share: float = _key("More than this share of the brokers with traffic blamed "
                                     "in one window is one cluster-wide event", 0.5, min=0,
                                     max=1)
    cluster_wide_min_brokers: int = _key("Fewest blamed brokers that can make a cluster-wide "
                                         "event", 2, min=1, max=100000)
    follower_holdback_floor_ms: float = _key("A follower that leaves its leader waiting this "
                                             "long (longest gap between its fetches) is late",
                                             1000.0, min=1, max=600000)
    follower_ratio: float = _key("A follower late at one leader and seen by no other is blamed "
                                 "when it is this many times later than the leader's other "
                                 "followers", 3.0, min=1, max=1000)
    slow_client_share: float = _key("Slow ResponseSend is blamed on the slow clients when they "
                                    "are at most this share of the broker's clients", 0.5,
                                    min=0, max=1)
    max_named_clients: int = _key("Clients named in a client_slow_read finding", 5, min=1,
                                  max=1000)

    def __post_init__(self) -> None:
        if self.persistence_windows > self.persistence_lookback_windows:
            raise ConfigError(
                f"slow_broker.persistence_windows ({self.persistence_windows}) must be <= "
                f"slow_broker.persistence_lookback_windows ({self.persistence_lookback_windows})")
        for api, ms in self.api_threshold_ms.items():
            if not isinstance(ms, (int, float)) or isinstance(ms, bool) or ms <= 0:
                raise ConfigError(f"slow_broker.api_threshold_ms.{api} must be a positive "
                                  f"number of milliseconds, got {ms!r}")

    @property
    def window_ms(self) -> int:
        return int(self.window_s * 1000)


# --- inputs ----------------------------------------------------------------------------

@dataclass(frozen=True)
class RequestStageWindow:
    cluster: str
    broker: int
    api: str
    window_start_ms: int
    requests: int
    total_p99_ms: float
    request_queue_p99_ms: float = 0.0
    local_p99_ms: float = 0.0
    remote_p99_ms: float = 0.0
    throttle_p99_ms: float = 0.0
    response_queue_p99_ms: float = 0.0
    send_p99_ms: float = 0.0
    total_excl_remote_p99_ms: float | None = None

    def stage_p99(self, stage: str) -> float:
        return getattr(self, f"{stage}_p99_ms") or 0.0


@dataclass(frozen=True)
class FollowerFetchWindow:
    cluster: str
    window_start_ms: int
    leader: int
    follower: int
    requests: int
    max_fetch_gap_ms: float | None = None
    send_p99_ms: float = 0.0


@dataclass(frozen=True)
class IsrShrink:
    """A leader's "Shrinking ISR from <before> to <after>" (silver.log_events kind
    isr_shrink: broker is the leader)."""
    cluster: str
    event_ms: int
    leader: int
    topic: str
    partition: int
    isr_before: tuple[int, ...]
    isr_after: tuple[int, ...]

    @property
    def out_of_sync(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.isr_before) - set(self.isr_after)))


@dataclass(frozen=True)
class ClientSendWindow:
    cluster: str
    window_start_ms: int
    broker: int
    client_id: str
    requests: int
    send_p99_ms: float
    api: str | None = None


@dataclass(frozen=True)
class LatencyBaseline:
    cluster: str
    broker: int
    api: str
    p99_ms: float


# --- verdicts --------------------------------------------------------------------------

class SlowBrokerCause(StrEnum):
    """The `cause` of this detector's findings (alerts and runbooks key on these)."""
    # The broker itself (move_leadership helps):
    REQUEST_HANDLERS_SATURATED = "request_handlers_saturated"
    LOCAL_DISK_OR_PAGE_CACHE = "local_disk_or_page_cache"
    NETWORK_THREADS_SATURATED = "network_threads_saturated"
    LEADER_REPLICATION_STALLED = "leader_replication_stalled"
    # The broker as a follower of other leaders:
    SLOW_FOLLOWER = "slow_follower"
    # A leader held back by a follower named in the evidence:
    REMOTE_PRODUCE_SLOW_FOLLOWER = "remote_produce_slow_follower"
    # Slow, fault not attributable:
    REMOTE_PRODUCE_UNKNOWN_FOLLOWER = "remote_produce_unknown_follower"
    REMOTE_WAIT = "remote_wait"
    RESPONSE_SEND_SLOW = "response_send_slow"
    NETWORK_SEND_SLOW = "network_send_slow"
    SLOW_UNATTRIBUTED = "slow_unattributed"
    # Not a broker fault:
    CLIENT_SLOW_READ = "client_slow_read"
    QUOTA_THROTTLED = "quota_throttled"
    # Too many brokers at once:
    CLUSTER_WIDE_SLOWNESS = "cluster_wide_slowness"


class Role(StrEnum):
    # Declared in the order a broker's verdict is chosen when it has several in a window.
    CULPRIT = "culprit"            # the broker itself is slow (or is the slow follower)
    UNATTRIBUTED = "unattributed"  # slow, and we cannot tell whose fault it is
    VICTIM = "victim"              # slow because a follower holds it back
    CLIENT = "client"              # slow because clients read slowly
    QUOTA = "quota"                # slow because clients are throttled


ROLE_ORDER = list(Role)
BLAMED_ROLES = (Role.CULPRIT, Role.UNATTRIBUTED)


@dataclass(frozen=True)
class ApiVerdict:
    """Every rule's result for one broker/API/window (kept for tests and evidence)."""
    row: RequestStageWindow
    latency_ms: float
    threshold_ms: float
    enough_traffic: bool
    over_threshold: bool
    baseline_ms: float | None
    slow_vs_history: bool
    peer_median_ms: float | None
    slow_vs_peers: bool
    dominant_stage: str | None
    stage_share: float

    @property
    def suspect(self) -> bool:
        return self.enough_traffic and self.over_threshold and (
            self.slow_vs_history or self.slow_vs_peers)


@dataclass(frozen=True)
class FollowerBlame:
    follower: int | None          # the follower that holds the leader back, if one does
    leader_at_fault: bool         # every follower waited on here fetches fine elsewhere
    via: str                      # isr_shrink | fetch_holdback | none
    holdback_ms: float | None     # the blamed follower's holdback at this leader
    elsewhere_ms: float | None    # its median holdback at the other leaders it follows
    candidates: tuple[int, ...] = ()


@dataclass(frozen=True)
class Attribution:
    role: Role
    cause: str
    blamed_broker: int | None
    action: ActionKind
    severity: Severity
    why: str
    details: Mapping = field(default_factory=dict)


@dataclass
class BrokerVerdict:
    broker: int
    attribution: Attribution
    api_verdict: ApiVerdict | None         # None for a follower blamed only by its leaders
    slow_apis: list[str] = field(default_factory=list)
    held_back_leaders: list[int] = field(default_factory=list)
    victim_latency_ms: float = 0.0         # the worst Produce latency it caused on a leader


@dataclass
class WindowAssessment:
    cluster: str
    window_start_ms: int
    api_verdicts: list[ApiVerdict]
    brokers: dict[int, BrokerVerdict]
    brokers_with_traffic: set[int]
    blamed: set[int]
    cluster_wide: bool


# --- rules: one broker/API/window --------------------------------------------------------

@functools.lru_cache(maxsize=1024)
def _norm(api: str) -> str:
    """"FetchConsumer", "FETCH_CONSUMER" and "fetchconsumer" are one API."""
    return api.replace("_", "").lower()


@functools.lru_cache(maxsize=64)
def _norm_set(names: tuple[str, ...]) -> frozenset[str]:
    return frozenset(_norm(a) for a in names)


def is_watched(api: str, config: SlowBrokerSection) -> bool:
    return _norm(api) in _norm_set(tuple(config.watched_apis))


def waits_in_purgatory(api: str, config: SlowBrokerSection) -> bool:
    """APIs whose Remote time is a deliberate wait (fetch.max.wait.ms, rebalances)."""
    return _norm(api) in _norm_set(tuple(config.purgatory_apis))


def latency_ms(row: RequestStageWindow, config: SlowBrokerSection) -> float:
    """TotalTime TP99, without the purgatory wait for the APIs that wait on purpose."""
    if not waits_in_purgatory(row.api, config):
        return row.total_p99_ms
    if row.total_excl_remote_p99_ms is not None:
        return row.total_excl_remote_p99_ms
    own_stages = [row.stage_p99(s) for s in STAGES if s != "remote"]
    return max(row.total_p99_ms - row.remote_p99_ms, *own_stages, 0.0)


def has_enough_traffic(row: RequestStageWindow, config: SlowBrokerSection) -> bool:
    """Enough requests in the window for a p99 to mean something: the per-minute rate
    scaled to the window, and at least min_requests_per_window (with fewer than 100, the
    TP99 is the window's slowest request)."""
    return (row.requests >= config.min_requests_per_minute * config.window_s / 60.0
            and row.requests >= config.min_requests_per_window)


def threshold_for(api: str, config: SlowBrokerSection) -> float:
    for name, ms in config.api_threshold_ms.items():
        if _norm(name) == _norm(api):
            return float(ms)
    return config.threshold_ms


def is_over_threshold(latency: float, threshold: float) -> bool:
    """Above the absolute floor below which no latency is a problem."""
    return latency > threshold


def is_slow_vs_history(latency: float, baseline: float | None, config: SlowBrokerSection) -> bool:
    """Far above the broker's own usual latency for this API."""
    return baseline is not None and latency >= config.history_ratio * max(baseline,
                                                                          MIN_REFERENCE_MS)


def is_slow_vs_peers(latency: float, peer_median: float | None, config: SlowBrokerSection) -> bool:
    """Far above the other brokers' latency for the same API in the same window."""
    return peer_median is not None and latency >= config.peer_ratio * max(peer_median,
                                                                         MIN_REFERENCE_MS)


def dominant_stage(row: RequestStageWindow, config: SlowBrokerSection) -> tuple[str | None, float]:
    """The stage with the largest p99, and its share of the stage p99s considered."""
    stages = [s for s in STAGES if not (s == "remote" and waits_in_purgatory(row.api, config))]
    values = {s: row.stage_p99(s) for s in stages}
    total = sum(values.values())
    if total <= 0:
        return None, 0.0
    stage = max(stages, key=lambda s: values[s])  # ties: the earlier stage in the request path
    return stage, values[stage] / total


def median_without(sorted_values: Sequence[float], value: float) -> float | None:
    """The median of a sorted list with one occurrence of `value` left out, in O(log n)
    (a 2,000-broker cluster would make the obvious way quadratic)."""
    i = bisect.bisect_left(sorted_values, value)
    m = len(sorted_values) - 1
    if m <= 0:
        return None

    def kth(k: int) -> float:
        return sorted_values[k] if k < i else sorted_values[k + 1]

    return kth(m // 2) if m % 2 else (kth(m // 2 - 1) + kth(m // 2)) / 2


def peer_median(latencies: Sequence[float], own: float | None,
                config: SlowBrokerSection) -> float | None:
    """Median latency of the other brokers with traffic (sorted `latencies` include this
    broker's `own` when it has traffic), when there are at least min_peers of them."""
    peers = len(latencies) - (own is not None)
    if peers < config.min_peers:
        return None
    return median_without(latencies, own) if own is not None else statistics.median(latencies)


# --- rules: who is to blame ---------------------------------------------------------------

def follower_holdback_ms(f: FollowerFetchWindow) -> float:
    """How long the leader waited on this follower outside purgatory: its longest silence
    between fetches, or how slowly it read its responses."""
    return max(f.max_fetch_gap_ms or 0.0, f.send_p99_ms or 0.0)


def holdback_view(fetches: Sequence[FollowerFetchWindow], window_start_ms: int,
                  last_seen: Mapping[int, Mapping[int, int]], leaders_logging: set[int],
                  window_ms: int) -> dict[int, dict[int, float]]:
    """holdback[leader][follower] in one window.

    A follower the leader saw in the last FOLLOWER_MEMORY_WINDOWS windows that sent
    nothing in this one, while the leader logged other requests, stopped fetching: it
    held the leader back the whole window. (If the leader logged nothing, it is the one
    that stopped.) The memory is short because replicas move: a follower reassigned away
    must not stay "missing" for the rest of the input.
    """
    view: dict[int, dict[int, float]] = defaultdict(dict)
    for f in fetches:
        if f.window_start_ms == window_start_ms:
            view[f.leader][f.follower] = follower_holdback_ms(f)
    for leader, followers in last_seen.items():
        if leader not in leaders_logging:
            continue
        for follower, seen_ms in followers.items():
            if window_start_ms - seen_ms <= FOLLOWER_MEMORY_WINDOWS * window_ms:
                view[leader].setdefault(follower, float(window_ms))
    return dict(view)


@dataclass(frozen=True)
class FollowerView:
    """What the leaders saw of their followers in one window, indexed both ways."""
    by_leader: Mapping[int, Mapping[int, float]]    # leader -> follower -> holdback ms
    by_follower: Mapping[int, Mapping[int, float]]  # follower -> leader -> holdback ms
    shrinks_by_leader: Mapping[int, Sequence[IsrShrink]]

    @classmethod
    def build(cls, by_leader: Mapping[int, Mapping[int, float]],
              shrinks: Iterable[IsrShrink] = ()) -> "FollowerView":
        by_follower: dict[int, dict[int, float]] = defaultdict(dict)
        for leader, followers in by_leader.items():
            for follower, ms in followers.items():
                by_follower[follower][leader] = ms
        by_shrinker: dict[int, list[IsrShrink]] = defaultdict(list)
        for x in shrinks:
            by_shrinker[x.leader].append(x)
        return cls(dict(by_leader), dict(by_follower), dict(by_shrinker))


def isr_shrink_names(shrinks: Sequence[IsrShrink], leader: int) -> Counter:
    """How often each replica was named out of sync by this leader's shrinks.

    A shrink that leaves the leader alone in the ISR names nobody: a leader that stalled
    drops all its followers at once when it resumes, which points at the leader.
    """
    names: Counter = Counter()
    for x in shrinks:
        if tuple(x.isr_after) != (leader,):
            names.update(r for r in x.out_of_sync if r != leader)
    return names


def holdback_elsewhere(view: FollowerView, follower: int, leader: int) -> float | None:
    """The follower's median holdback at the other leaders it follows, None if none see it."""
    seen = [ms for other, ms in view.by_follower.get(follower, {}).items() if other != leader]
    return statistics.median(seen) if seen else None


def stands_out(follower: int, mine: Mapping[int, float], config: SlowBrokerSection) -> bool:
    """Far later than the leader's other followers (needs at least one other)."""
    others = [h for g, h in mine.items() if g != follower]
    if follower not in mine or not others:
        return False
    return mine[follower] >= config.follower_ratio * max(statistics.median(others),
                                                         MIN_REFERENCE_MS)


def blame_follower(leader: int, view: FollowerView, config: SlowBrokerSection) -> FollowerBlame:
    """The follower that holds back acks=all Produce on `leader` (see the module docstring)."""
    mine = dict(view.by_leader.get(leader, {}))
    named = isr_shrink_names(view.shrinks_by_leader.get(leader, ()), leader)
    floor = config.follower_holdback_floor_ms
    # Every follower we know of named at once points at the leader, as above.
    all_named = bool(mine) and set(mine) <= set(named)
    candidates = sorted(set(named) | {f for f, h in mine.items() if h >= floor})
    confirmed, refuted = [], []
    for f in candidates:
        elsewhere = holdback_elsewhere(view, f, leader)
        if elsewhere is not None:
            (confirmed if elsewhere >= floor else refuted).append((f, elsewhere))
        elif (f in named and not all_named) or stands_out(f, mine, config):
            confirmed.append((f, None))
    if confirmed:
        f, elsewhere = max(confirmed, key=lambda c: (mine.get(c[0], 0.0), named[c[0]], -c[0]))
        via = "+".join(source for source, holds in (("isr_shrink", f in named),
                                                    ("fetch_holdback", mine.get(f, 0.0) >= floor))
                       if holds)
        return FollowerBlame(follower=f, leader_at_fault=False, via=via,
                             holdback_ms=mine.get(f), elsewhere_ms=elsewhere,
                             candidates=tuple(candidates))
    waited_on_all = bool(mine) and all(h >= floor for h in mine.values())
    if refuted and waited_on_all:
        return FollowerBlame(follower=None, leader_at_fault=True, via="fetch_holdback",
                             holdback_ms=max(mine.values()),
                             elsewhere_ms=max(e for _, e in refuted), candidates=tuple(candidates))
    return FollowerBlame(follower=None, leader_at_fault=False, via="none", holdback_ms=None,
                         elsewhere_ms=None, candidates=tuple(candidates))


def slow_clients(sends: Sequence[ClientSendWindow], threshold: float) -> tuple[list, int]:
    """The broker's clients whose ResponseSend p99 is over the threshold (slowest first),
    and how many clients it had in the window."""
    worst: dict[str, float] = {}
    for s in sends:
        worst[s.client_id] = max(worst.get(s.client_id, 0.0), s.send_p99_ms)
    slow = sorted(((c, ms) for c, ms in worst.items() if ms >= threshold),
                  key=lambda x: (-x[1], x[0]))
    return slow, len(worst)


# Requests whose Remote time is waiting for the followers to copy a write (acks=all):
# Produce, and the offset commits the group coordinator appends to __consumer_offsets with
# acks=all. A slow follower holds all of them back on every leader it follows.
REPLICATED_WRITE_APIS = frozenset({"produce", "offsetcommit", "txnoffsetcommit"})

_SELF_CAUSES = {
    "request_queue": (SlowBrokerCause.REQUEST_HANDLERS_SATURATED,
                      "requests wait for a free request handler thread (CPU or handler "
                      "saturation)"),
    "local": (SlowBrokerCause.LOCAL_DISK_OR_PAGE_CACHE,
              "the broker's own work is slow (disk or page-cache misses)"),
    "response_queue": (SlowBrokerCause.NETWORK_THREADS_SATURATED,
                       "responses wait for a free network thread"),
}


def attribute_send(v: ApiVerdict, sends: Sequence[ClientSendWindow],
                   config: SlowBrokerSection) -> Attribution:
    """Slow ResponseSend: a few slow clients are theirs to fix; most clients slow is the
    broker's network path; without per-client data we cannot tell."""
    slow, seen = slow_clients(sends, v.threshold_ms)
    named = [{"client_id": c, "send_p99_ms": round(ms, 3)}
             for c, ms in slow[:config.max_named_clients]]
    if not seen:
        return Attribution(Role.UNATTRIBUTED, SlowBrokerCause.RESPONSE_SEND_SLOW, None,
                           ActionKind.PAGE_HUMAN, Severity.WARNING,
                           "responses are slow to send (no per-client data to tell a slow "
                           "client from the broker's network)")
    if slow and (len(slow) <= config.slow_client_share * seen or seen == 1):
        names = ", ".join(c for c, _ in slow[:config.max_named_clients])
        return Attribution(Role.CLIENT, SlowBrokerCause.CLIENT_SLOW_READ, None, ActionKind.NONE,
                           Severity.WARNING,
                           f"clients read their responses slowly ({names}); not a broker fault",
                           {"slow_clients": named, "clients_seen": seen})
    return Attribution(Role.UNATTRIBUTED, SlowBrokerCause.NETWORK_SEND_SLOW, None,
                       ActionKind.PAGE_HUMAN, Severity.WARNING,
                       f"{len(slow)} of its {seen} clients receive slowly: the broker's network "
                       f"path rather than one client",
                       {"slow_clients": named, "clients_seen": seen})


def attribute_produce_remote(broker: int, view: FollowerView,
                             config: SlowBrokerSection) -> Attribution:
    """Produce waiting in Remote time: the follower that holds acks=all back, or the
    leader itself when all its followers are fine elsewhere."""
    blame = blame_follower(broker, view, config)
    details = {"follower_evidence": blame.via, "follower_holdback_ms": blame.holdback_ms,
               "follower_holdback_elsewhere_ms": blame.elsewhere_ms,
               "follower_candidates": list(blame.candidates)}
    if blame.follower is not None:
        return Attribution(Role.VICTIM, SlowBrokerCause.REMOTE_PRODUCE_SLOW_FOLLOWER,
                           blame.follower, ActionKind.NONE, Severity.WARNING,
                           f"acks=all writes wait for follower broker {blame.follower}, which is "
                           f"slow (see its finding); moving leadership off broker {broker} would "
                           f"not help", {**details, "slow_follower": broker_entity(blame.follower)})
    if blame.leader_at_fault:
        return Attribution(Role.CULPRIT, SlowBrokerCause.LEADER_REPLICATION_STALLED, broker,
                           ActionKind.MOVE_LEADERSHIP, Severity.HIGH,
                           "all its followers wait on it but fetch normally from other leaders: "
                           "the broker itself is slow to serve replication", details)
    return Attribution(Role.UNATTRIBUTED, SlowBrokerCause.REMOTE_PRODUCE_UNKNOWN_FOLLOWER, None,
                       ActionKind.PAGE_HUMAN, Severity.WARNING,
                       "acks=all writes wait for followers, but no follower stands out", details)


def attribute(v: ApiVerdict, view: FollowerView, sends: Sequence[ClientSendWindow],
              config: SlowBrokerSection) -> Attribution:
    """Whose fault a suspect row is, from its dominant stage."""
    broker, stage = v.row.broker, v.dominant_stage
    if stage in _SELF_CAUSES:
        cause, why = _SELF_CAUSES[stage]
        return Attribution(Role.CULPRIT, cause, broker, ActionKind.MOVE_LEADERSHIP,
                           Severity.HIGH, why)
    if stage == "throttle":
        return Attribution(Role.QUOTA, SlowBrokerCause.QUOTA_THROTTLED, None, ActionKind.NONE,
                           Severity.INFO, "clients are held back by their quotas; not a broker "
                                          "fault")
    if stage == "send":
        return attribute_send(v, sends, config)
    if stage == "remote" and _norm(v.row.api) in REPLICATED_WRITE_APIS:
        return attribute_produce_remote(broker, view, config)
    if stage == "remote":
        return Attribution(Role.UNATTRIBUTED, SlowBrokerCause.REMOTE_WAIT, None,
                           ActionKind.PAGE_HUMAN, Severity.WARNING,
                           "requests wait in purgatory for other brokers")
    return Attribution(Role.UNATTRIBUTED, SlowBrokerCause.SLOW_UNATTRIBUTED, None,
                       ActionKind.PAGE_HUMAN, Severity.WARNING,
                       "no stage breakdown to attribute it")


def slow_follower_attribution(follower: int) -> Attribution:
    """A broker blamed only by the leaders it follows (its own requests are not slow)."""
    return Attribution(Role.CULPRIT, SlowBrokerCause.SLOW_FOLLOWER, follower,
                       ActionKind.PAGE_HUMAN, Severity.HIGH,
                       "as a follower it holds back acks=all writes on the leaders it replicates "
                       "from; moving leadership would not shorten those waits, it must catch up "
                       "or drop out of the ISR")


def is_cluster_wide(blamed: set[int], with_traffic: set[int], config: SlowBrokerSection) -> bool:
    """Too many brokers blamed at once to be any one broker's fault."""
    if not with_traffic or len(blamed) < config.cluster_wide_min_brokers:
        return False
    return len(blamed) / len(with_traffic) > config.cluster_wide_share


def _verdict_rank(v: BrokerVerdict) -> tuple:
    av = v.api_verdict
    severity_of_latency = -(av.latency_ms / av.threshold_ms) if av else 0.0
    return ROLE_ORDER.index(v.attribution.role), severity_of_latency


# --- windows -------------------------------------------------------------------------------

@dataclass
class _History:
    """Latencies of each broker/API's earlier non-suspect windows (the in-input baseline)."""
    healthy: dict[tuple[int, str], list[float]] = field(default_factory=lambda: defaultdict(list))

    def baseline(self, broker: int, api: str, external: Mapping[tuple[int, str], float],
                 config: SlowBrokerSection) -> float | None:
        key = (broker, _norm(api))
        if key in external:
            return external[key]
        past = self.healthy.get(key, [])
        return statistics.median(past) if len(past) >= config.min_history_windows else None


def assess_window(cluster: str, window_start_ms: int, rows: Sequence[RequestStageWindow],
                  history: _History, external: Mapping[tuple[int, str], float],
                  view: FollowerView, sends: Sequence[ClientSendWindow],
                  config: SlowBrokerSection) -> WindowAssessment:
    """Apply every rule to one window, then attribute, then judge cluster-wide.

    The order matters: attribution needs the suspect rows of every broker (a follower is
    blamed by other brokers' rows), and the cluster-wide judgement needs attribution (a
    slow follower that makes every leader slow is one broker's fault, not the cluster's).
    """
    rows = [r for r in rows if is_watched(r.api, config)]
    latency = {id(r): latency_ms(r, config) for r in rows}
    traffic = {id(r): has_enough_traffic(r, config) for r in rows}
    by_api: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if traffic[id(r)]:
            by_api[_norm(r.api)].append(latency[id(r)])
    for lats in by_api.values():
        lats.sort()
    sends_by_broker: dict[int, list[ClientSendWindow]] = defaultdict(list)
    for x in sends:
        sends_by_broker[x.broker].append(x)

    verdicts: list[ApiVerdict] = []
    for r in rows:
        lat = latency[id(r)]
        threshold = threshold_for(r.api, config)
        baseline = history.baseline(r.broker, r.api, external, config)
        peers = peer_median(by_api.get(_norm(r.api), []), lat if traffic[id(r)] else None,
                            config)
        stage, share = dominant_stage(r, config)
        verdicts.append(ApiVerdict(
            row=r, latency_ms=lat, threshold_ms=threshold, enough_traffic=traffic[id(r)],
            over_threshold=is_over_threshold(lat, threshold), baseline_ms=baseline,
            slow_vs_history=is_slow_vs_history(lat, baseline, config), peer_median_ms=peers,
            slow_vs_peers=is_slow_vs_peers(lat, peers, config), dominant_stage=stage,
            stage_share=share))

    brokers: dict[int, BrokerVerdict] = {}
    for v in verdicts:
        if not v.suspect:
            continue
        b = v.row.broker
        broker_sends = [x for x in sends_by_broker.get(b, ())
                        if x.api is None or _norm(x.api) == _norm(v.row.api)]
        candidate = BrokerVerdict(b, attribute(v, view, broker_sends, config), v)
        current = brokers.get(b)
        slow_apis = (current.slow_apis if current else []) + [v.row.api]
        if current is None or _verdict_rank(candidate) < _verdict_rank(current):
            brokers[b] = candidate
        brokers[b].slow_apis = slow_apis

    for v in list(brokers.values()):
        f = v.attribution.blamed_broker
        if v.attribution.role is not Role.VICTIM or f is None:
            continue
        # A follower slow in its own right keeps its own cause; otherwise (not slow, or
        # only a victim or a client problem itself) it is blamed as the slow follower.
        blamed = brokers.get(f)
        if blamed is None or blamed.attribution.role is not Role.CULPRIT:
            own = blamed
            blamed = BrokerVerdict(f, slow_follower_attribution(f),
                                   own.api_verdict if own else None,
                                   slow_apis=own.slow_apis if own else [])
            brokers[f] = blamed
        blamed.held_back_leaders.append(v.broker)
        blamed.victim_latency_ms = max(blamed.victim_latency_ms, v.api_verdict.latency_ms)

    with_traffic = {r.broker for r in rows if has_enough_traffic(r, config)}
    blamed_set = {b for b, v in brokers.items() if v.attribution.role in BLAMED_ROLES}
    wide = is_cluster_wide(blamed_set, with_traffic | blamed_set, config)
    for v in verdicts:
        if v.enough_traffic and not v.suspect:
            history.healthy[(v.row.broker, _norm(v.row.api))].append(v.latency_ms)
    return WindowAssessment(cluster=cluster, window_start_ms=window_start_ms,
                            api_verdicts=verdicts, brokers=brokers,
                            brokers_with_traffic=with_traffic, blamed=blamed_set,
                            cluster_wide=wide)


def assess_windows(rows: Iterable[RequestStageWindow], *,
                   follower_fetches: Iterable[FollowerFetchWindow] = (),
                   isr_shrinks: Iterable[IsrShrink] = (),
                   client_sends: Iterable[ClientSendWindow] = (),
                   baselines: Iterable[LatencyBaseline] = (),
                   config: SlowBrokerSection | None = None) -> list[WindowAssessment]:
    """Every window of the input, oldest first, per cluster (see `assess_window`)."""
    config = config or SlowBrokerSection()
    window_ms = config.window_ms
    rows_by_cw: dict[tuple[str, int], list[RequestStageWindow]] = defaultdict(list)
    for r in rows:
        rows_by_cw[(r.cluster, r.window_start_ms)].append(r)
    fetches_by_cw: dict[tuple[str, int], list[FollowerFetchWindow]] = defaultdict(list)
    for f in follower_fetches:
        fetches_by_cw[(f.cluster, f.window_start_ms)].append(f)
    # Events are placed on each cluster's window grid (any of its window starts fixes it).
    grid_origin = {cluster: start for cluster, start in rows_by_cw}
    shrinks_by_cw: dict[tuple[str, int], list[IsrShrink]] = defaultdict(list)
    for x in isr_shrinks:
        if x.cluster in grid_origin:
            offset = (x.event_ms - grid_origin[x.cluster]) % window_ms
            shrinks_by_cw[(x.cluster, x.event_ms - offset)].append(x)
    sends_by_cw: dict[tuple[str, int], list[ClientSendWindow]] = defaultdict(list)
    for x in client_sends:
        sends_by_cw[(x.cluster, x.window_start_ms)].append(x)
    external_by_cluster: dict[str, dict[tuple[int, str], float]] = defaultdict(dict)
    for b in baselines:
        external_by_cluster[b.cluster][(b.broker, _norm(b.api))] = b.p99_ms

    out = []
    histories: dict[str, _History] = defaultdict(_History)
    last_seen: dict[str, dict[int, dict[int, int]]] = defaultdict(lambda: defaultdict(dict))
    for cluster, start in sorted(rows_by_cw):
        window_rows = rows_by_cw[(cluster, start)]
        fetches = fetches_by_cw.get((cluster, start), [])
        logging = {r.broker for r in window_rows} | {f.leader for f in fetches}
        by_leader = holdback_view(fetches, start, last_seen[cluster], logging, window_ms)
        for f in fetches:
            last_seen[cluster][f.leader][f.follower] = start
        view = FollowerView.build(by_leader, shrinks_by_cw.get((cluster, start), ()))
        out.append(assess_window(cluster, start, window_rows, histories[cluster],
                                 external_by_cluster[cluster], view,
                                 sends_by_cw.get((cluster, start), []), config))
    return out


# --- persistence and detections ------------------------------------------------------------

def recent_windows(assessments: Sequence[WindowAssessment], config: SlowBrokerSection
                   ) -> dict[str, list[int]]:
    """Per cluster, the starts of the last persistence_lookback_windows windows of the grid
    ending at its latest window (a window with no rows at all still counts, as clear)."""
    latest: dict[str, int] = {}
    for a in assessments:
        latest[a.cluster] = max(latest.get(a.cluster, a.window_start_ms), a.window_start_ms)
    n = config.persistence_lookback_windows
    return {c: [end - k * config.window_ms for k in range(n - 1, -1, -1)]
            for c, end in latest.items()}


def flagged_keys(a: WindowAssessment) -> set[int | str]:
    """What a window holds a verdict for: "cluster", or the brokers."""
    return {"cluster"} if a.cluster_wide else set(a.brokers)


def _round(x: float | None) -> float | None:
    return None if x is None else round(float(x), 3)


def _api_evidence(v: ApiVerdict | None) -> dict:
    if v is None:
        return {}
    stage = v.dominant_stage
    return {"api": v.row.api, "stage": stage,
            "stage_p99_ms": _round(v.row.stage_p99(stage)) if stage else None,
            "stage_share": _round(v.stage_share), "latency_ms": _round(v.latency_ms),
            "total_p99_ms": _round(v.row.total_p99_ms), "threshold_ms": _round(v.threshold_ms),
            "requests": v.row.requests, "baseline_ms": _round(v.baseline_ms),
            "peer_median_ms": _round(v.peer_median_ms),
            "stage_p99s_ms": {s: _round(v.row.stage_p99(s)) for s in STAGES},
            "rules": {"enough_traffic": v.enough_traffic, "over_threshold": v.over_threshold,
                      "slow_vs_history": v.slow_vs_history, "slow_vs_peers": v.slow_vs_peers}}


def _describe_latency(v: ApiVerdict) -> str:
    parts = [f"{v.row.api} TP99 {v.latency_ms:,.0f} ms over the {v.threshold_ms:,.0f} ms threshold"]
    ratios = []
    if v.baseline_ms:
        ratios.append(f"{v.latency_ms / max(v.baseline_ms, MIN_REFERENCE_MS):.1f}x its usual")
    if v.peer_median_ms:
        ratios.append(f"{v.latency_ms / max(v.peer_median_ms, MIN_REFERENCE_MS):.1f}x its peers")
    if ratios:
        parts.append(f" ({', '.join(ratios)})")
    if v.dominant_stage:
        parts.append(f", mostly {STAGE_NAMES[v.dominant_stage]} ({v.stage_share:.0%})")
    return "".join(parts)


def broker_detection(cluster: str, v: BrokerVerdict, flagged: list[int],
                     config: SlowBrokerSection) -> Detection:
    at = v.attribution
    evidence = {"broker": v.broker, "role": at.role.value, "window_s": config.window_s,
                "windows_flagged": len(flagged),
                "windows_considered": config.persistence_lookback_windows,
                "slow_apis": sorted(set(v.slow_apis)), **_api_evidence(v.api_verdict),
                **at.details}
    if v.held_back_leaders:
        evidence["held_back_leaders"] = sorted(set(v.held_back_leaders))
        evidence["held_back_produce_latency_ms"] = _round(v.victim_latency_ms)
        if v.api_verdict is None:
            evidence.update({"api": "Produce", "stage": "remote",
                             "stage_observed_on": "held_back_leaders"})
    if v.api_verdict is not None:
        head = f"Broker {v.broker} {_describe_latency(v.api_verdict)}: {at.why}"
    else:
        head = f"Broker {v.broker} is slow: {at.why}"
    if v.held_back_leaders:
        leaders = ", ".join(str(b) for b in sorted(set(v.held_back_leaders)))
        head += f"; it holds back Produce Remote time on leader(s) {leaders}"
    return Detection(
        cluster=cluster, type=AnomalyType.SLOW_BROKER, severity=at.severity,
        entity_kind=EntityKind.BROKER, entity=broker_entity(v.broker),
        first_seen_ms=min(flagged), last_seen_ms=max(flagged) + config.window_ms,
        cause=at.cause, explanation=head + ".", suggested_action=at.action, evidence=evidence)


def cluster_wide_detection(a: WindowAssessment, flagged: list[int],
                           config: SlowBrokerSection) -> Detection:
    causes = Counter(a.brokers[b].attribution.cause for b in a.blamed)
    stages = Counter(a.brokers[b].api_verdict.dominant_stage for b in a.blamed
                     if a.brokers[b].api_verdict is not None)
    medians = {}
    for api in sorted({v.row.api for v in a.api_verdicts if v.enough_traffic}):
        lats = [v.latency_ms for v in a.api_verdicts if v.row.api == api and v.enough_traffic]
        medians[api] = _round(statistics.median(lats))
    stage = stages.most_common(1)[0][0] if stages else None
    share = len(a.blamed) / max(1, len(a.brokers_with_traffic | a.blamed))
    return Detection(
        cluster=a.cluster, type=AnomalyType.CLUSTER_WIDE_SLOWNESS, severity=Severity.HIGH,
        entity_kind=EntityKind.CLUSTER, entity=cluster_entity(a.cluster),
        first_seen_ms=min(flagged), last_seen_ms=max(flagged) + config.window_ms,
        cause=SlowBrokerCause.CLUSTER_WIDE_SLOWNESS,
        explanation=(f"{len(a.blamed)} of {len(a.brokers_with_traffic | a.blamed)} brokers with "
                     f"traffic are slow at once"
                     f"{f' (mostly {STAGE_NAMES[stage]})' if stage else ''}: a cluster-wide "
                     f"event, not one broker's fault; no broker is blamed."),
        suggested_action=ActionKind.PAGE_HUMAN,
        evidence={"brokers_blamed": sorted(a.blamed)[:100], "brokers_blamed_count": len(a.blamed),
                  "brokers_with_traffic": len(a.brokers_with_traffic), "share": _round(share),
                  "causes": dict(causes), "dominant_stage": stage,
                  "median_latency_ms_by_api": medians, "window_s": config.window_s,
                  "windows_flagged": len(flagged),
                  "windows_considered": config.persistence_lookback_windows})


def detect_slow_brokers(rows: Iterable[RequestStageWindow], *,
                        follower_fetches: Iterable[FollowerFetchWindow] = (),
                        isr_shrinks: Iterable[IsrShrink] = (),
                        client_sends: Iterable[ClientSendWindow] = (),
                        baselines: Iterable[LatencyBaseline] = (),
                        config: SlowBrokerSection | None = None) -> list[Detection]:
    """slow_broker and cluster_wide_slowness detections from the input windows."""
    config = config or SlowBrokerSection()
    assessments = assess_windows(rows, follower_fetches=follower_fetches,
                                 isr_shrinks=isr_shrinks, client_sends=client_sends,
                                 baselines=baselines, config=config)
    return detections_from(assessments, config)


def detections_from(assessments: Sequence[WindowAssessment],
                    config: SlowBrokerSection) -> list[Detection]:
    """Apply persistence to assessed windows: at least persistence_windows of the last
    persistence_lookback_windows must hold a verdict for the same broker (or cluster)."""
    grid = recent_windows(assessments, config)
    by_cw = {(a.cluster, a.window_start_ms): a for a in assessments}
    detections = []
    for cluster, starts in sorted(grid.items()):
        recent = [by_cw[(cluster, s)] for s in starts if (cluster, s) in by_cw]
        flagged: dict[int | str, list[int]] = defaultdict(list)
        for a in recent:
            for k in flagged_keys(a):
                flagged[k].append(a.window_start_ms)
        for k, windows in sorted(flagged.items(), key=lambda kv: str(kv[0])):
            if len(windows) < config.persistence_windows:
                continue
            latest = by_cw[(cluster, max(windows))]
            if k == "cluster":
                detections.append(cluster_wide_detection(latest, windows, config))
            else:
                detections.append(broker_detection(cluster, latest.brokers[k], windows, config))
    return detections
