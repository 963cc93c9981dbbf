"""The slow-broker detector's order of rules: every rule over each window, then
attribution, then cluster-wide judgement (`assess_window`), every window of the input
(`assess_windows`), then persistence (`detect_slow_brokers`)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Iterable, Mapping, Sequence, TypeVar

from core.findings import Detection
from detectors.slow_broker.blame import (
    Blame,
    Waits,
    attribute,
    blame_slow_followers,
    corroborated_by_follower,
    holdback_view,
    is_cluster_wide,
    leader_blames,
    quiet_but_slow,
    replication_waits,
)
from detectors.slow_broker.client_links import judge_links
from detectors.slow_broker.clients import judge_clients
from detectors.slow_broker.config import SlowBrokerSection
from detectors.slow_broker.inputs import (
    ClientRttWindow,
    ClientSendWindow,
    FollowerFetchWindow,
    IsrShrink,
    LatencyBaseline,
    ProducerServerWindow,
    RequestStageWindow,
)
from detectors.slow_broker.latency import (
    POOL_WINDOWS,
    dominant_stage,
    has_enough_traffic,
    is_over_threshold,
    is_slow_vs_history,
    is_slow_vs_peers,
    is_watched,
    latency_ms,
    norm_api,
    peer_median,
    pooled_traffic,
    threshold_for,
)
from detectors.slow_broker.disruptions import (Disruption, active_in, counts_as_before,
                                               disruptions_from, explain, not_named_by_margin)
from detectors.slow_broker.handovers import LeadershipGain
from detectors.slow_broker.outages import BrokerOutage
from detectors.slow_broker.persistence import detections_from
from detectors.slow_broker.verdicts import (
    BLAMED_ROLES,
    ROLE_ORDER,
    ApiVerdict,
    BrokerVerdict,
    WindowAssessment,
)


# Earlier healthy windows needed before the in-input baseline is trusted (one minute of
# 10-s windows): a median of fewer says little more than one window.
MIN_HISTORY_WINDOWS = 6
# Rule 1b's traffic floor: a second, independent sign (the follower's fetches) lowers the
# floor, and 20 requests still make a wait at the edge unlikely to be one request.
CORROBORATED_MIN_REQUESTS = 20


def _verdict_rank(v: BrokerVerdict) -> tuple:
    av = v.api_verdict
    severity_of_latency = -(av.latency_ms / av.threshold_ms) if av else 0.0
    return ROLE_ORDER.index(v.attribution.role), severity_of_latency


@dataclass
class _History:
    """Latencies of each broker/API's earlier non-suspect windows (the in-input baseline),
    and every earlier window's requests and latency (for pooling low-traffic windows).

    `healthy` holds the windows with enough traffic of their own; `quiet` the others that
    had requests, as (requests, latency). A broker too quiet to judge one window alone (a
    few dozen Produce requests a window, on a quiet cluster) never had a baseline of the
    first kind, so a pooled slow window (rule 1) could be judged against neither its
    history nor its peers, who are as quiet: a frozen broker was never named.
    The quiet windows are its baseline then (`baseline`): each one's TP99 is about its
    slowest request, more than its true p99, so the baseline they give is high and the
    history rule (latency >= history_ratio x baseline) only harder to meet."""
    healthy: dict[tuple[int, str], list[float]] = field(default_factory=lambda: defaultdict(list))
    quiet: dict[tuple[int, str], list[tuple[int, float]]] = field(
        default_factory=lambda: defaultdict(list))
    windows: dict[tuple[int, str], dict[int, tuple[int, float]]] = field(
        default_factory=lambda: defaultdict(dict))

    def earlier(self, row: RequestStageWindow, config: SlowBrokerSection
                ) -> list[tuple[int, float] | None]:
        """(requests, latency) of the row's broker/API in the windows just before it,
        newest first (None: no row then), as many as a pool can use."""
        seen = self.windows.get((row.broker, norm_api(row.api)), {})
        return [seen.get(row.window_start_ms - k * config.window_ms)
                for k in range(1, POOL_WINDOWS)]

    def note(self, row: RequestStageWindow, latency: float, config: SlowBrokerSection) -> None:
        seen = self.windows[(row.broker, norm_api(row.api))]
        seen[row.window_start_ms] = (row.requests, latency)
        for start in [s for s in seen
                      if s <= row.window_start_ms - POOL_WINDOWS * config.window_ms]:
            del seen[start]

    def baseline(self, broker: int, api: str, external: Mapping[tuple[int, str], float],
                 config: SlowBrokerSection) -> float | None:
        """The external baseline; else the median of the earlier healthy windows, once
        MIN_HISTORY_WINDOWS of them; else, for a broker that had too few of those, the
        median of its earlier quiet windows, once there are MIN_HISTORY_WINDOWS of them
        holding min_requests_per_window requests together."""
        key = (broker, norm_api(api))
        if key in external:
            return external[key]
        past = self.healthy.get(key, [])
        if len(past) >= MIN_HISTORY_WINDOWS:
            return statistics.median(past)
        quiet = self.quiet.get(key, [])
        if (len(quiet) >= MIN_HISTORY_WINDOWS
                and sum(n for n, _ in quiet) >= config.min_requests_per_window):
            return statistics.median(lat for _, lat in quiet)
        return None

    def remember(self, verdicts: Sequence[ApiVerdict]) -> None:
        """Keep the window's non-suspect latencies for later windows: with enough traffic
        of their own in `healthy`, the others with requests in `quiet` (whatever their
        latency: a quiet window over the threshold that was not judged slow is part of
        the broker's usual too)."""
        for v in verdicts:
            if v.suspect:
                continue
            key = (v.row.broker, norm_api(v.row.api))
            if v.enough_traffic and v.pooled_windows == 1:
                self.healthy[key].append(v.latency_ms)
            elif not v.enough_traffic and v.row.requests > 0:
                self.quiet[key].append((v.row.requests, v.latency_ms))


def judge_rows(rows: Sequence[RequestStageWindow], history: _History,
               external: Mapping[tuple[int, str], float],
               config: SlowBrokerSection) -> list[ApiVerdict]:
    """Rules 1-5 and the dominant stage for each row of one window (the peer rule needs
    every broker's latency for the API first)."""
    latency = {id(r): latency_ms(r, config) for r in rows}
    traffic = {id(r): has_enough_traffic(r, config) for r in rows}
    # Too few requests alone: judged with the windows before it (latency.pooled_traffic).
    pooled = {id(r): pool for r in rows if not traffic[id(r)] and (pool := pooled_traffic(
        r.requests, latency[id(r)], threshold_for(r.api, config), history.earlier(r, config),
        config))}
    # Rule 1b: the same with CORROBORATED_MIN_REQUESTS, used only once the follower the
    # row waits on is corroborated (blame.corroborated_by_follower).
    quiet = {id(r): pool for r in rows if not traffic[id(r)] and id(r) not in pooled
             and (pool := pooled_traffic(
                 r.requests, latency[id(r)], threshold_for(r.api, config),
                 history.earlier(r, config), config, floor=CORROBORATED_MIN_REQUESTS))}
    for r in rows:
        history.note(r, latency[id(r)], config)
    by_api: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if traffic[id(r)]:
            by_api[norm_api(r.api)].append(latency[id(r)])
    for lats in by_api.values():
        lats.sort()

    verdicts: list[ApiVerdict] = []
    for r in rows:
        windows, requests, lat = pooled.get(id(r), (1, None, latency[id(r)]))
        threshold = threshold_for(r.api, config)
        baseline = history.baseline(r.broker, r.api, external, config)
        # A pooled row is compared with its peers too (their own windows' median), but
        # stays out of their medians: its latency is a bound over several windows.
        peers = peer_median(by_api.get(norm_api(r.api), []), lat if traffic[id(r)] else None,
                            config)
        stage, share = dominant_stage(r, config)
        verdicts.append(ApiVerdict(
            row=r, latency_ms=lat, threshold_ms=threshold,
            enough_traffic=traffic[id(r)] or id(r) in pooled,
            over_threshold=is_over_threshold(lat, threshold), baseline_ms=baseline,
            slow_vs_history=is_slow_vs_history(lat, baseline, config), peer_median_ms=peers,
            slow_vs_peers=is_slow_vs_peers(lat, peers, config), dominant_stage=stage,
            stage_share=share, pooled_windows=windows, pooled_requests=requests,
            quiet_pool=quiet.get(id(r))))
    return verdicts


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
                        if x.api is None or norm_api(x.api) == norm_api(v.row.api)]
        candidate = BrokerVerdict(b, attribute(v, blame_of, broker_sends, config), v)
        current = brokers.get(b)
        slow_apis = (current.slow_apis if current else []) + [v.row.api]
        if current is None or _verdict_rank(candidate) < _verdict_rank(current):
            brokers[b] = candidate
        brokers[b].slow_apis = slow_apis
    return brokers


def assess_window(cluster: str, window_start_ms: int, rows: Sequence[RequestStageWindow],
                  history: _History, external: Mapping[tuple[int, str], float],
                  waits: Waits, sends: Sequence[ClientSendWindow],
                  config: SlowBrokerSection, active: Sequence[Disruption] = (),
                  followers_seen: Mapping[int, Mapping[int, int]] = MappingProxyType({}),
                  blamed_before: set[int] = frozenset(),
                  rtts: Sequence[ClientRttWindow] = (),
                  own: Sequence[ProducerServerWindow] = ()) -> WindowAssessment:
    """Apply every rule to one window, then attribute, then let the known disruptions in
    effect (`active`) explain what they cause (disruptions.py), then judge cluster-wide
    (counting the brokers too quiet to judge that were as slow, blame.quiet_but_slow);
    the clients are judged on their own requests beside it (clients.py), and producers on
    their own round trips against their own requests' times (`own`, client_links.py).

    The order matters: attribution needs the suspect rows of every broker (a follower is
    blamed by other brokers' rows), and the cluster-wide judgement needs attribution (a
    slow follower that makes every leader slow is one broker's fault, not the cluster's)
    and the disruptions (what they explain is no broker's slowness).
    """
    rows = [r for r in rows if is_watched(r.api, config)]
    blame_of = leader_blames(waits, config)
    verdicts = corroborated_by_follower(judge_rows(rows, history, external, config), blame_of,
                                        config)
    brokers = broker_verdicts(verdicts, blame_of, sends, config)
    blame_slow_followers(brokers)
    x = explain(brokers, active, waits, followers_seen, set(blamed_before))
    brokers = x.kept
    with_traffic = {r.broker for r in rows if has_enough_traffic(r, config)}
    blamed_set = {b for b, v in brokers.items() if v.attribution.role in BLAMED_ROLES}
    # Brokers too quiet to judge but as slow count as slow brokers here (blame.py).
    quiet = quiet_but_slow(verdicts, x.own_stages_explained, config) - blamed_set
    wide = is_cluster_wide(blamed_set | quiet, with_traffic | blamed_set | quiet, config)
    history.remember(verdicts)
    return WindowAssessment(cluster=cluster, window_start_ms=window_start_ms,
                            api_verdicts=verdicts, brokers=brokers,
                            brokers_with_traffic=with_traffic, blamed=blamed_set,
                            cluster_wide=wide, clients=judge_clients(sends, rows, config),
                            links=judge_links(rtts, rows, config, own), excused=x.set_aside,
                            quiet_slow=quiet)


Windowed = TypeVar("Windowed", RequestStageWindow, FollowerFetchWindow, ClientSendWindow,
                   ClientRttWindow, ProducerServerWindow)


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
                   leadership_gains: Sequence[LeadershipGain] = (),
                   client_rtts: Iterable[ClientRttWindow] = (),
                   producer_times: Iterable[ProducerServerWindow] = (),
                   config: SlowBrokerSection | None = None) -> list[WindowAssessment]:
    """Every window of the input, oldest first, per cluster (see `assess_window`)."""
    config = config or SlowBrokerSection()
    window_ms = config.window_ms
    rows_by_cw = by_cluster_window(rows)
    fetches_by_cw = by_cluster_window(follower_fetches)
    grid_origin = {cluster: start for cluster, start in rows_by_cw}
    shrinks_by_cw = shrinks_by_cluster_window(isr_shrinks, grid_origin, window_ms)
    sends_by_cw = by_cluster_window(client_sends)
    rtts_by_cw = by_cluster_window(client_rtts)
    own_by_cw = by_cluster_window(producer_times)
    external_by_cluster: dict[str, dict[tuple[int, str], float]] = defaultdict(dict)
    for b in baselines:
        external_by_cluster[b.cluster][(b.broker, norm_api(b.api))] = b.p99_ms

    disruptions = disruptions_from(outages, leadership_gains)
    out = []
    histories: dict[str, _History] = defaultdict(_History)
    last_seen: dict[str, dict[int, dict[int, int]]] = defaultdict(lambda: defaultdict(dict))
    # per cluster, the brokers blamed in the last window that counts as before a disruption
    blamed_before: dict[str, set[int]] = defaultdict(set)
    for cluster, start in sorted(rows_by_cw):
        window_rows = rows_by_cw[(cluster, start)]
        fetches = fetches_by_cw.get((cluster, start), [])
        logging = {r.broker for r in window_rows} | {f.leader for f in fetches}
        by_leader = holdback_view(fetches, start, last_seen[cluster], logging, window_ms)
        for f in fetches:
            last_seen[cluster][f.leader][f.follower] = start
        active = active_in(disruptions, cluster, start, start + window_ms, config)
        waits = replication_waits(by_leader, shrinks_by_cw.get((cluster, start), ()),
                                  not_named_by_margin(active))
        a = assess_window(cluster, start, window_rows, histories[cluster],
                          external_by_cluster[cluster], waits,
                          sends_by_cw.get((cluster, start), []), config, active,
                          last_seen[cluster], blamed_before[cluster],
                          rtts_by_cw.get((cluster, start), ()),
                          own_by_cw.get((cluster, start), ()))
        if counts_as_before(active):
            blamed_before[cluster] = set(a.blamed)
        out.append(a)
    return out


def detect_slow_brokers(rows: Iterable[RequestStageWindow], *,
                        follower_fetches: Iterable[FollowerFetchWindow] = (),
                        isr_shrinks: Iterable[IsrShrink] = (),
                        client_sends: Iterable[ClientSendWindow] = (),
                        baselines: Iterable[LatencyBaseline] = (),
                        outages: Sequence[BrokerOutage] = (),
                        leadership_gains: Sequence[LeadershipGain] = (),
                        client_rtts: Iterable[ClientRttWindow] = (),
                        producer_times: Iterable[ProducerServerWindow] = (),
                        config: SlowBrokerSection | None = None) -> list[Detection]:
    """slow_broker, cluster_wide_slowness and slow_client detections from the input
    windows; `outages` (outages.py): when brokers were out, and `leadership_gains`
    (handovers.py): when brokers became leaders, the known disruptions (disruptions.py)
    that explain what they cause; `client_rtts`
    (client_links.py): the producers' own round trips, from their statistics, and
    `producer_times` what the brokers took for their Produce requests."""
    config = config or SlowBrokerSection()
    assessments = assess_windows(rows, follower_fetches=follower_fetches,
                                 isr_shrinks=isr_shrinks, client_sends=client_sends,
                                 baselines=baselines, outages=outages,
                                 leadership_gains=leadership_gains, client_rtts=client_rtts,
                                 producer_times=producer_times, config=config)
    return detections_from(assessments, config)
