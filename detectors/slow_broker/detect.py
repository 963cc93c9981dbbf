"""The slow-broker detector's order: rules, blame, known disruptions and cluster-wide on
each window (`assess_window`), every window of the input (`assess_windows`), then
persistence (`detect_slow_brokers`)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import AbstractSet, Callable, Iterable, Mapping, Sequence, TypeVar

from core.disruptions import Disruption, ReplicaStart, active_in, disruptions_from
from core.findings import Detection
from core.outages import BrokerOutage
from detectors.explaining_away import Blame, Waits
from detectors.slow_broker.blame import (attribute, blame_slow_followers,
                                         corroborated_by_follower, holdback_view,
                                         is_cluster_wide, leader_blames, quiet_but_slow,
                                         replication_waits)
from detectors.slow_broker.config import SlowBrokerSection
from detectors.slow_broker.excuses import counts_as_before, explain, not_named_by_margin
from detectors.slow_broker.inputs import (ClientSendWindow, FollowerFetchWindow, HeldRequest,
                                          IsrShrink, LatencyBaseline, RequestStageWindow)
from detectors.slow_broker.persistence import detections_from
from detectors.slow_broker.rules import History, enough_traffic, judge_rows
# The read side reads as many minutes for the external baseline.
from detectors.slow_broker.rules import MIN_HISTORY_WINDOWS  # noqa: F401
from detectors.slow_broker.stalls import Holds, set_aside_shared_stalls
from detectors.slow_broker.verdicts import (BLAMED_ROLES, ROLE_ORDER, ApiVerdict, BrokerVerdict,
                                            WindowAssessment)


def _verdict_rank(v: BrokerVerdict) -> tuple:
    av = v.api_verdict
    severity_of_latency = -(av.latency_ms / av.threshold_ms) if av else 0.0
    return ROLE_ORDER.index(v.attribution.role), severity_of_latency


def broker_verdicts(verdicts: Sequence[ApiVerdict], blame_of: Callable[[int], Blame],
                    sends: Sequence[ClientSendWindow],
                    config: SlowBrokerSection) -> dict[int, BrokerVerdict]:
    """Rule 6 on every suspect row, and one verdict per broker: the first role in `Role`'s
    order wins, then the latency furthest over its threshold; slow_apis lists them all."""
    sends_by_broker: dict[int, list[ClientSendWindow]] = defaultdict(list)
    for x in sends:
        sends_by_broker[x.broker].append(x)
    brokers: dict[int, BrokerVerdict] = {}
    for v in verdicts:
        if not v.suspect:
            continue
        b = v.row.broker
        broker_sends = [x for x in sends_by_broker.get(b, ())
                        if x.api is None or x.api == v.row.api]
        candidate = BrokerVerdict(b, attribute(v, blame_of, broker_sends, config), v)
        current = brokers.get(b)
        slow_apis = (current.slow_apis if current else []) + [v.row.api]
        if current is None or _verdict_rank(candidate) < _verdict_rank(current):
            if current is not None:
                candidate.others = current.others + [current]
                current.others = []
            brokers[b] = candidate
        else:
            current.others.append(candidate)
        brokers[b].slow_apis = slow_apis
    return brokers


@dataclass(frozen=True)
class WindowInputs:
    """What one window of one cluster gives the rules."""
    cluster: str
    window_start_ms: int
    rows: Sequence[RequestStageWindow]
    waits: Waits                                 # replication waits, leader x follower
    external: Mapping[tuple[int, str], float] = field(default_factory=dict)  # baselines
    sends: Sequence[ClientSendWindow] = ()
    active: Sequence[Disruption] = ()             # the known disruptions in effect
    followers_seen: Mapping[int, Mapping[int, int]] = field(default_factory=dict)
    blamed_before: AbstractSet[int] = frozenset()  # blamed in the last window before them
    holds: Holds | None = None                   # the cluster's held requests (rule 6b)


def assess_window(w: WindowInputs, history: History,
                  cfg: SlowBrokerSection) -> WindowAssessment:
    """Judge one window, the watched APIs' rows only, in this order: rules 1-5 on each
    row (rules.judge_rows); 6, blame (blame.py), which needs every broker's rows and the
    replication waits, and whose follower evidence lowers the bars of rules 2 and 4
    (2b, 4b), after a stall the brokers share is set aside (6b, stalls.py); 7, the known
    disruptions (disruptions.py); 8, cluster-wide, which needs blame (a follower that slows
    every leader is one broker's fault) and the disruptions (what they explain is no
    one's), and counts 6b's shared stalls (a stall over the threshold on most brokers is
    the cluster's). Persistence comes after, over the windows (`detect_slow_brokers`)."""
    watched = frozenset(cfg.watched_apis)
    rows = [r for r in w.rows if r.api in watched]
    blame_of = leader_blames(w.waits, cfg)
    with_traffic = {r.broker for r in rows
                    if enough_traffic(r.requests, cfg.min_requests_per_window)}
    verdicts = set_aside_shared_stalls(corroborated_by_follower(
        judge_rows(rows, history, w.external, cfg), blame_of, cfg), w.holds, with_traffic, cfg)
    brokers = broker_verdicts(verdicts, blame_of, w.sends, cfg)
    blame_slow_followers(brokers)
    x = explain(brokers, w.active, w.waits, w.followers_seen, set(w.blamed_before))
    brokers = x.kept
    blamed_set = {b for b, v in brokers.items() if v.attribution.role in BLAMED_ROLES}
    quiet = quiet_but_slow(verdicts, x.own_stages_explained, cfg) - blamed_set
    shared = {v.row.broker for v in verdicts if v.shared_stall} - x.own_stages_explained
    shared -= blamed_set | quiet
    slow = blamed_set | quiet | shared
    wide = is_cluster_wide(slow, with_traffic | slow, cfg)
    history.remember(verdicts)
    return WindowAssessment(cluster=w.cluster, window_start_ms=w.window_start_ms,
                            api_verdicts=verdicts, brokers=brokers,
                            brokers_with_traffic=with_traffic, blamed=blamed_set,
                            cluster_wide=wide, excused=x.set_aside, quiet_slow=quiet,
                            shared_stall=shared)


Windowed = TypeVar("Windowed")


def by_cluster_window(items: Iterable[Windowed]) -> dict[tuple[str, int], list[Windowed]]:
    grouped: dict[tuple[str, int], list[Windowed]] = defaultdict(list)
    for x in items:
        grouped[(x.cluster, x.window_start_ms)].append(x)
    return grouped


def shrinks_by_cluster_window(isr_shrinks: Iterable[IsrShrink], grid_origin: Mapping[str, int],
                              window_ms: int) -> dict[tuple[str, int], list[IsrShrink]]:
    """ISR shrinks placed on each cluster's window grid (any of its window starts fixes
    it); a cluster without request rows has no grid and its shrinks are dropped."""
    grouped: dict[tuple[str, int], list[IsrShrink]] = defaultdict(list)
    for x in isr_shrinks:
        if x.cluster in grid_origin:
            offset = (x.event_ms - grid_origin[x.cluster]) % window_ms
            grouped[(x.cluster, x.event_ms - offset)].append(x)
    return grouped


def assess_windows(rows: Iterable[RequestStageWindow], *,
                   follower_fetches: Iterable[FollowerFetchWindow] = (),
                   isr_shrinks: Iterable[IsrShrink] = (),
                   client_sends: Iterable[ClientSendWindow] = (),
                   baselines: Iterable[LatencyBaseline] = (),
                   outages: Sequence[BrokerOutage] = (),
                   replica_starts: Sequence[ReplicaStart] = (),
                   held_requests: Iterable[HeldRequest] = (),
                   config: SlowBrokerSection | None = None) -> list[WindowAssessment]:
    """Every window of the input, oldest first, per cluster (see `assess_window`)."""
    config = config or SlowBrokerSection()
    window_ms = config.window_ms
    rows_by_cw = by_cluster_window(rows)
    fetches_by_cw = by_cluster_window(follower_fetches)
    grid_origin = {cluster: start for cluster, start in rows_by_cw}
    shrinks_by_cw = shrinks_by_cluster_window(isr_shrinks, grid_origin, window_ms)
    sends_by_cw = by_cluster_window(client_sends)
    external_by_cluster: dict[str, dict[tuple[int, str], float]] = defaultdict(dict)
    for b in baselines:
        external_by_cluster[b.cluster][(b.broker, b.api)] = b.p99_ms
    held_by_cluster: dict[str, list[HeldRequest]] = defaultdict(list)
    for h in held_requests:
        held_by_cluster[h.cluster].append(h)
    holds = {cluster: Holds(held) for cluster, held in held_by_cluster.items()}

    disruptions = disruptions_from(outages, replica_starts)
    out = []
    histories: dict[str, History] = defaultdict(History)
    last_seen: dict[str, dict[int, dict[int, int]]] = defaultdict(lambda: defaultdict(dict))
    # per cluster, the brokers blamed in the last window that counts as before a disruption
    blamed_before: dict[str, set[int]] = defaultdict(set)
    for cluster, start in sorted(rows_by_cw):
        window_rows = rows_by_cw[(cluster, start)]
        fetches = fetches_by_cw.get((cluster, start), [])
        logged = {r.broker for r in window_rows} | {f.leader for f in fetches}
        by_leader = holdback_view(fetches, start, last_seen[cluster], logged, window_ms)
        for f in fetches:
            last_seen[cluster][f.leader][f.follower] = start
        active = active_in(disruptions, cluster, start, start + window_ms,
                           config.disruption_grace_s)
        waits = replication_waits(by_leader, shrinks_by_cw.get((cluster, start), ()),
                                  not_named_by_margin(active))
        a = assess_window(WindowInputs(
            cluster, start, window_rows, waits, external_by_cluster[cluster],
            sends_by_cw.get((cluster, start), []), active, last_seen[cluster],
            blamed_before[cluster], holds.get(cluster)), histories[cluster], config)
        if counts_as_before(active):
            blamed_before[cluster] = set(a.blamed)
        out.append(a)
    return out


def detect_slow_brokers(rows: Iterable[RequestStageWindow], *,
                        config: SlowBrokerSection | None = None, **inputs) -> list[Detection]:
    """slow_broker and cluster_wide_slowness detections from the input windows (`inputs`:
    those of `assess_windows`; `outages` and `replica_starts` are the events of the
    known disruptions)."""
    config = config or SlowBrokerSection()
    return detections_from(assess_windows(rows, config=config, **inputs), config)
