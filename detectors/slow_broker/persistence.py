"""Persistence and decay: a broker (or the cluster, or a client) is detected when at least
persistence_windows of the last persistence_lookback_windows windows hold a verdict for it
(a verdict on quiet windows pooled together holds for each of them: `covered_windows`);
one noisy window never fires, and a recovered broker clears within two windows."""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from core.findings import Detection
from detectors.slow_broker.client_links import link_detection
from detectors.slow_broker.clients import client_detection
from detectors.slow_broker.config import SlowBrokerSection
from detectors.slow_broker.evidence import broker_detection, cluster_wide_detection
from detectors.slow_broker.verdicts import (ROLE_ORDER, ApiVerdict, BrokerVerdict, Role,
                                           SlowBrokerCause, WindowAssessment)

# A pooled verdict counts for each of its windows from this x its threshold: a pool's
# least TP99 just over the threshold is one request at the edge.
POOLED_STRONG_RATIO = 2.0


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


Key = tuple  # ("cluster",), ("broker", id), ("client", client_id) or ("link", client_id)


def flagged_keys(a: WindowAssessment) -> set[Key]:
    """What a window holds a verdict for: the cluster, or the brokers; and the clients
    slow by their own requests. A broker whose verdict is only its slow clients
    (Role.CLIENT) holds none: the clients are the findings (clients.py)."""
    keys: set[Key] = {("client", c) for c in a.clients} | {("link", c) for c in a.links}
    if a.cluster_wide:
        return keys | {("cluster",)}
    return keys | {("broker", b) for b, v in a.brokers.items()
                   if v.attribution.role is not Role.CLIENT}


def covered_windows(a: WindowAssessment, key: Key, config: SlowBrokerSection) -> list[int]:
    """The windows a verdict of this window speaks for: its own, and for a broker judged
    on its own requests pooled over earlier windows (rules.pool_quiet), those too.

    A pooled verdict already holds several windows of evidence: each of them over the
    threshold, together enough requests. Counting them for persistence finds a quiet
    broker as soon as a busy one, instead of one window later (a leader held back by a
    follower serves few writes, so its first verdict often pools several windows). Only a
    pool far over its threshold (POOLED_STRONG_RATIO) counts so: the least TP99 of a few
    dozen requests a window is one request, and just over the threshold it is weak
    evidence. A follower blamed only through the leaders it holds back (no verdict of its
    own) speaks for the windows of the longest such pool among them: that leader's pooled
    slowness is put on it."""
    pooled = 1
    if key[0] == "broker" and not a.cluster_wide:
        verdict = a.brokers[key[1]]
        if verdict.api_verdict is not None:
            pooled = strong_pool(verdict.api_verdict, config)
        else:
            pooled = max((strong_pool(a.brokers[leader].api_verdict, config)
                          for leader in verdict.held_back_leaders
                          if leader in a.brokers and a.brokers[leader].api_verdict is not None),
                         default=1)
    return [a.window_start_ms - k * config.window_ms for k in range(pooled)]


def strong_pool(v: ApiVerdict, config: SlowBrokerSection) -> int:
    """The windows a verdict counts for: its pool's, when far enough over the threshold."""
    if v.pooled_windows > 1 and v.latency_ms >= POOLED_STRONG_RATIO * v.threshold_ms:
        return v.pooled_windows
    return 1


def _rank(v: BrokerVerdict) -> float:
    """A verdict's place in `strongest`'s order: its role's, except that "acks=all writes
    wait for followers, but no follower stands out" comes after a victim's verdict, which
    names the follower: it is the same wait, told less."""
    a = v.attribution
    if a.role is Role.UNATTRIBUTED and a.cause == SlowBrokerCause.REMOTE_PRODUCE_UNKNOWN_FOLLOWER:
        return ROLE_ORDER.index(Role.VICTIM) + 0.5
    return ROLE_ORDER.index(a.role)


def strongest(recent: Sequence[WindowAssessment], broker: int) -> WindowAssessment:
    """The window whose verdict on `broker` its finding reports: of the recent windows
    holding one, the first in `_rank`'s order (the roles' `Role` order), then the newest.
    A culprit named in one of the last windows stays named when a newer window can only
    say "unattributed", and so does the follower a victim's verdict names when a newer
    window cannot confirm it at the other leaders: a fault's last window, or one in its
    middle, often holds less evidence than those before, and the finding should not end
    on the vaguer cause."""
    held = [a for a in recent if ("broker", broker) in flagged_keys(a)]
    return min(reversed(held), key=lambda a: _rank(a.brokers[broker]))


def detections_from(assessments: Sequence[WindowAssessment],
                    config: SlowBrokerSection) -> list[Detection]:
    """Apply persistence to assessed windows: at least persistence_windows of the last
    persistence_lookback_windows must hold a verdict for the same broker (or client);
    all of them for the cluster (it names no broker and no action)."""
    grid = recent_windows(assessments, config)
    by_cw = {(a.cluster, a.window_start_ms): a for a in assessments}
    detections = []
    for cluster, starts in sorted(grid.items()):
        recent = [by_cw[(cluster, s)] for s in starts if (cluster, s) in by_cw]
        in_grid = set(starts)
        flagged: dict[Key, set[int]] = defaultdict(set)
        for a in recent:
            for k in flagged_keys(a):
                # A verdict covers its own window and earlier ones only, so the newest
                # covered window is the newest verdict's.
                flagged[k].update(w for w in covered_windows(a, k, config)
                                  if w in in_grid)
        for k, covered in sorted(flagged.items(), key=lambda kv: tuple(map(str, kv[0]))):
            windows = sorted(covered)
            needed = (config.persistence_lookback_windows if k[0] == "cluster"
                      else config.persistence_windows)
            if len(windows) < needed:
                continue
            if k[0] == "link" and len(flagged.get(("client", k[1]), ())) >= needed:
                continue   # one slow_client finding per client: its slow reads say more
            latest = by_cw[(cluster, windows[-1])]
            if k[0] == "broker":
                latest = strongest(recent, k[1])
            if k[0] == "cluster":
                detections.append(cluster_wide_detection(latest, windows, config))
            elif k[0] == "client":
                detections.append(client_detection(cluster, latest.clients[k[1]], windows,
                                                   config))
            elif k[0] == "link":
                detections.append(link_detection(cluster, latest.links[k[1]], windows, config))
            else:
                detections.append(broker_detection(cluster, latest.brokers[k[1]], windows,
                                                   config))
    return detections
