"""The rules on one window (`assess_window`), on every window (`assess_windows`), then
persistence (`detect_slow_brokers`)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import AbstractSet, Callable, Iterable, Mapping, Sequence

from core.disruptions import Disruption, ReplicaStart, active_in, disruptions_from
from core.findings import Detection
from core.outages import BrokerOutage
from detectors.explaining_away import Blame, Waits
from detectors.slow_broker.blame import (attribute, blame_slow_followers, holdback_view,
                                         is_cluster_wide, leader_blames, quiet_but_slow,
                                         replication_waits, waits_on_culprit)
from detectors.slow_broker.config import SlowBrokerSection
from detectors.slow_broker.excuses import counts_as_before, explain, not_named_by_margin
from detectors.slow_broker.inputs import (ClientSendWindow, FollowerFetchWindow, HeldRequest,
                                          IsrShrink, LatencyBaseline, RequestStageWindow)
from detectors.slow_broker.judged import ClusterJudgements, Judged, JudgedWindows
from detectors.slow_broker.persistence import detections_from
from detectors.slow_broker.rules import History, enough_traffic, judge_rows, risen
from detectors.slow_broker.stalls import Holds, set_aside_shared_stalls
from detectors.slow_broker.verdicts import (BLAMED_ROLES, ApiVerdict, BrokerVerdict, Role,
                                            WindowAssessment, rank)
from detectors.windowed import by_cluster_window


def broker_verdicts(verdicts: Sequence[ApiVerdict], blame_of: Callable[[int], Blame],
                    sends: Sequence[ClientSendWindow],
                    config: SlowBrokerSection) -> dict[int, BrokerVerdict]:
    """Rule 6 on the rows given, and one verdict per broker: the first in `rank`'s order
    wins, then the latency furthest over its threshold; slow_apis lists them all."""
    sends_by_broker: dict[int, list[ClientSendWindow]] = defaultdict(list)
    for x in sends:
        sends_by_broker[x.broker].append(x)
    candidates: dict[int, list[BrokerVerdict]] = defaultdict(list)
    for v in verdicts:
        b = v.row.broker
        mine = [x for x in sends_by_broker.get(b, ()) if x.api in (None, v.row.api)]
        candidates[b].append(BrokerVerdict(b, attribute(v, blame_of, mine, config), v))
    brokers = {}
    for b, cs in candidates.items():
        brokers[b] = best = min(cs, key=lambda c: (rank(c), -c.api_verdict.latency_ms
                                                 / c.api_verdict.threshold_ms))
        best.others = [c for c in cs if c is not best]
        best.slow_apis = [c.api_verdict.row.api for c in cs]
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
    """Judge one window's watched rows in the package docstring's order; cluster-wide
    comes after blame and the disruptions (a follower that slows every leader is one
    broker's fault; what a disruption explains is no one's). Besides the blamed brokers it
    counts those slow alike but blamed for nothing: too quiet (`quiet_but_slow`), held in
    a shared stall, or `risen` but not suspect whose rise would blame them: each is no
    evidence alone, most brokers at once are a shared cause. This can take blame off one
    broker, never put it on one."""
    watched = frozenset(cfg.watched_apis)
    rows = [r for r in w.rows if r.api in watched]
    blame_of = leader_blames(w.waits, cfg)
    with_traffic = {r.broker for r in rows
                    if enough_traffic(r.requests, cfg.min_requests_per_window)}
    verdicts = set_aside_shared_stalls(judge_rows(rows, history, w.external, cfg, lambda b: (
        (blame := blame_of(b)).party is not None and blame.corroborated)),
        w.holds, with_traffic, cfg)
    brokers = broker_verdicts([v for v in verdicts if v.suspect], blame_of, w.sends, cfg)
    blame_slow_followers(brokers)
    x = explain(brokers, w.active, w.waits, w.followers_seen, set(w.blamed_before))
    brokers = x.kept
    blamed_set = {b for b, v in brokers.items() if v.attribution.role in BLAMED_ROLES}
    quiet = quiet_but_slow(verdicts, x.own_stages_explained, cfg) - blamed_set
    shared = {v.row.broker for v in verdicts if v.shared_stall} - x.own_stages_explained
    shared -= blamed_set | quiet
    culprits = {b for b, v in brokers.items() if v.attribution.role is Role.CULPRIT}
    would_blame = explain(broker_verdicts(
        [v for v in verdicts if v.enough_traffic and not v.suspect and not v.shared_stall
         and risen(v) and not waits_on_culprit(v, w.waits, culprits)],
        blame_of, w.sends, cfg), w.active, w.waits, w.followers_seen,
        set(w.blamed_before)).kept
    rose = {b for b, v in would_blame.items() if v.attribution.role in BLAMED_ROLES}
    history.remember(verdicts)
    a = WindowAssessment(cluster=w.cluster, window_start_ms=w.window_start_ms,
                         api_verdicts=verdicts, brokers=brokers,
                         brokers_with_traffic=with_traffic, blamed=blamed_set,
                         cluster_wide=False, excused=x.set_aside, quiet_slow=quiet,
                         shared_stall=shared,
                         risen=rose - set(brokers) - set(x.set_aside) - quiet - shared)
    a.cluster_wide = is_cluster_wide(a.slow, with_traffic | a.slow, cfg)
    return a


def assess_windows(rows: Iterable[RequestStageWindow], *,
                   follower_fetches: Iterable[FollowerFetchWindow] = (),
                   isr_shrinks: Iterable[IsrShrink] = (),
                   client_sends: Iterable[ClientSendWindow] = (),
                   baselines: Iterable[LatencyBaseline] = (),
                   outages: Sequence[BrokerOutage] = (),
                   replica_starts: Sequence[ReplicaStart] = (),
                   held_requests: Iterable[HeldRequest] = (),
                   config: SlowBrokerSection | None = None,
                   judged: JudgedWindows | None = None) -> list[WindowAssessment]:
    """Every window of the input, oldest first (see `assess_window`). `judged`: the
    windows judged by the caller's earlier evaluations, kept where their inputs are the
    same, and updated (judged.py); None judges every window."""
    config = config or SlowBrokerSection()
    window_ms = config.window_ms
    rows_by_cw = by_cluster_window(rows)
    fetches_by_cw = by_cluster_window(follower_fetches)
    grid = {cluster: start for cluster, start in rows_by_cw}   # any window start fixes it
    shrinks_by_cw: dict[tuple[str, int], list[IsrShrink]] = defaultdict(list)
    for x in isr_shrinks:   # on the cluster's window grid; a cluster without rows has none
        if x.cluster in grid:
            start = x.event_ms - (x.event_ms - grid[x.cluster]) % window_ms
            shrinks_by_cw[(x.cluster, start)].append(x)
    sends_by_cw = by_cluster_window(client_sends)
    external_by_cluster: dict[str, dict[tuple[int, str], float]] = defaultdict(dict)
    for b in baselines:
        external_by_cluster[b.cluster][(b.broker, b.api)] = b.p99_ms
    held = list(held_requests)
    holds = {c: Holds(h for h in held if h.cluster == c) for c in {h.cluster for h in held}}

    disruptions = disruptions_from(outages, replica_starts)
    carry = judged if judged is not None else JudgedWindows()
    out = []
    try:
        for cluster in sorted(grid):
            starts = sorted(s for c, s in rows_by_cw if c == cluster)
            state = carry.cluster(cluster, config, starts[0])
            out += _assess_cluster(
                cluster, starts, state, config, rows_by_cw, fetches_by_cw, shrinks_by_cw,
                sends_by_cw, external_by_cluster[cluster], holds.get(cluster), disruptions)
    except BaseException:
        carry.clear()   # a state half rolled back must not be judged from
        raise
    return out


def _assess_cluster(cluster: str, starts: list[int], state: ClusterJudgements,
                    config: SlowBrokerSection, rows_by_cw, fetches_by_cw, shrinks_by_cw,
                    sends_by_cw, external: Mapping[tuple[int, str], float],
                    holds: Holds | None, disruptions: Sequence[Disruption]
                    ) -> list[WindowAssessment]:
    """One cluster's windows in order: those judged before on the same inputs kept,
    from the first that differs on judged again (judged.py)."""
    window_ms = config.window_ms
    carried = list(state.windows)
    out = []
    kept, judged = True, 0
    blamed_before: set[int] = set()   # blamed in the last window that counts as before
    for i, start in enumerate(starts):
        window_rows = rows_by_cw[(cluster, start)]
        fetches = fetches_by_cw.get((cluster, start), [])
        sends = sends_by_cw.get((cluster, start), [])
        shrinks = shrinks_by_cw.get((cluster, start), [])
        active = active_in(disruptions, cluster, start, start + window_ms,
                           config.disruption_grace_s)
        inputs = (window_rows, fetches, sends,
                  holds.could_overlap(start, start + window_ms) if holds is not None else ())
        values = (tuple(shrinks), tuple(active), frozenset(blamed_before))
        if (kept and i < len(carried) and carried[i] == start
                and state.windows[start].same(inputs, values)):
            a = state.windows[start].assessment
        else:
            if kept:   # from here (or from a carried window the input no longer has)
                state.forget_from(min(start, carried[i]) if i < len(carried) else start)
                kept = False
            logged = {r.broker for r in window_rows} | {f.leader for f in fetches}
            by_leader = holdback_view(fetches, start, state.last_seen, logged, window_ms)
            seen_before = state.see(fetches, start)
            waits = replication_waits(by_leader, shrinks, not_named_by_margin(active))
            a = assess_window(WindowInputs(
                cluster, start, window_rows, waits, external, sends, active, state.last_seen,
                blamed_before, holds), state.history, config)
            state.windows[start] = Judged(inputs, values, a, seen_before)
            judged += 1
        if counts_as_before(active):
            blamed_before = set(a.blamed)
        out.append(a)
    state.judged_last = judged
    return out


def detect_slow_brokers(rows: Iterable[RequestStageWindow], *,
                        config: SlowBrokerSection | None = None,
                        carried: JudgedWindows | None = None, **inputs) -> list[Detection]:
    """slow_broker and cluster_wide_slowness detections (`inputs`: `assess_windows`';
    `carried`: its `judged`)."""
    config = config or SlowBrokerSection()
    return detections_from(assess_windows(rows, config=config, judged=carried, **inputs),
                           config)
