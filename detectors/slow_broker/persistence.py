"""Persistence and decay: a broker (or the cluster, or a client) is detected when at least
persistence_windows of the last persistence_lookback_windows windows hold a verdict for it;
one noisy window never fires, and a recovered broker clears within two windows."""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from core.findings import Detection
from detectors.slow_broker.client_links import link_detection
from detectors.slow_broker.clients import client_detection
from detectors.slow_broker.config import SlowBrokerSection
from detectors.slow_broker.evidence import broker_detection, cluster_wide_detection
from detectors.slow_broker.verdicts import Role, WindowAssessment


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


def detections_from(assessments: Sequence[WindowAssessment],
                    config: SlowBrokerSection) -> list[Detection]:
    """Apply persistence to assessed windows: at least persistence_windows of the last
    persistence_lookback_windows must hold a verdict for the same broker (or client);
    cluster_wide_persistence_windows for the cluster."""
    grid = recent_windows(assessments, config)
    by_cw = {(a.cluster, a.window_start_ms): a for a in assessments}
    detections = []
    for cluster, starts in sorted(grid.items()):
        recent = [by_cw[(cluster, s)] for s in starts if (cluster, s) in by_cw]
        flagged: dict[Key, list[int]] = defaultdict(list)
        for a in recent:
            for k in flagged_keys(a):
                flagged[k].append(a.window_start_ms)
        for k, windows in sorted(flagged.items(), key=lambda kv: tuple(map(str, kv[0]))):
            needed = (config.cluster_wide_persistence_windows if k[0] == "cluster"
                      else config.persistence_windows)
            if len(windows) < needed:
                continue
            if k[0] == "link" and len(flagged.get(("client", k[1]), ())) >= needed:
                continue   # one slow_client finding per client: its slow reads say more
            latest = by_cw[(cluster, max(windows))]
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
