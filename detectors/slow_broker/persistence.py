"""Persistence (rule 9): a broker is detected when persistence_windows of the last
persistence_lookback_windows windows hold a verdict for it, the cluster when all do; the
cause it names persisted too (`strongest`). One noisy window never fires; a recovered
broker clears within two windows."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import AbstractSet
from typing import Sequence

from core.findings import Detection
from detectors.slow_broker.config import SlowBrokerSection
from detectors.slow_broker.evidence import broker_detection, cluster_wide_detection
from detectors.slow_broker.verdicts import (ApiVerdict, BrokerVerdict, Role,
                                            WindowAssessment, rank)
from detectors.windowed import recent_windows

# A pooled verdict counts for each of its windows only from this x its threshold (just
# over it, the pool's least TP99 is one request at the edge).
POOLED_STRONG_RATIO = 2.0
CLUSTER = None   # the key of a cluster-wide verdict; a broker's is its id


def flagged(a: WindowAssessment) -> set[int | None]:
    """What a window holds a verdict for: the cluster, or its brokers (not for slow
    clients: they are judged on their own)."""
    if a.cluster_wide:
        return {CLUSTER}
    return {b for b, v in a.brokers.items() if v.attribution.role is not Role.CLIENT}


def strong_pool(v: ApiVerdict) -> int:
    """The windows a verdict counts for: its pool's, when far enough over the threshold."""
    if v.pooled_windows > 1 and v.latency_ms >= POOLED_STRONG_RATIO * v.threshold_ms:
        return v.pooled_windows
    return 1


def covered_windows(a: WindowAssessment, key: int | None, config: SlowBrokerSection
                    ) -> list[int]:
    """The windows a verdict speaks for: its own and a strong pool's earlier ones; a
    follower blamed only through its leaders takes their longest such pool."""
    pooled = 1
    if key is not CLUSTER:
        verdict = a.brokers[key]
        if verdict.api_verdict is not None:
            pooled = strong_pool(verdict.api_verdict)
        else:
            pooled = max((strong_pool(a.brokers[leader].api_verdict)
                          for leader in verdict.held_back_leaders
                          if leader in a.brokers and a.brokers[leader].api_verdict is not None),
                         default=1)
    return [a.window_start_ms - k * config.window_ms for k in range(pooled)]


def strongest(recent: Sequence[WindowAssessment], broker: int,
              config: SlowBrokerSection) -> BrokerVerdict | None:
    """The verdict `broker`'s finding reports: of the strongest `rank` persistence_windows
    of the windows support, the newest; None when none did. A window supports each of its
    slow rows' causes and, when its verdict blames no one, any cause: a fault's last
    window often tells less, and windows that disagree are not yet a finding."""
    held = []
    for a in recent:
        if broker in flagged(a):
            v = a.brokers[broker]
            held.append((v, {rank(x): x for x in (*v.others, v)
                             if x.attribution.role is not Role.CLIENT},
                         len(covered_windows(a, broker, config)),
                         v.attribution.role is Role.UNATTRIBUTED))
    ranks = sorted({r for _, verdicts, _, _ in held for r in verdicts})
    persisted = next((r for r in ranks
                      if sum(n for _, verdicts, n, vague in held if r in verdicts or vague)
                      >= config.persistence_windows), None)
    if persisted is None:
        return None
    chosen, verdicts = next((v, verdicts) for v, verdicts, _, _ in reversed(held)
                            if persisted in verdicts)
    found = verdicts[persisted]
    if found is chosen:
        return chosen
    # another row's verdict of that window: it reports the broker's slow APIs all the same
    return replace(found, slow_apis=chosen.slow_apis, others=[],
                   held_back_leaders=chosen.held_back_leaders,
                   victim_latency_ms=chosen.victim_latency_ms)


def leans_on(v: BrokerVerdict) -> int | None:
    """The follower a victim verdict stands on: its leader was a suspect only by rule 4b,
    not by its own history or peers."""
    av = v.api_verdict
    if (v.attribution.role is Role.VICTIM and av is not None and av.follower_corroborated
            and not (av.slow_vs_history or av.slow_vs_peers)):
        return v.attribution.blamed_broker
    return None


def without_leaning_on(a: WindowAssessment, unfound: AbstractSet[int]) -> WindowAssessment:
    """The window without the verdicts that stand on a follower in `unfound`."""
    brokers = {}
    for b, v in a.brokers.items():
        kept = [x for x in (v, *v.others) if leans_on(x) not in unfound]
        if kept:
            brokers[b] = v if len(kept) == len(v.others) + 1 else replace(
                kept[0], others=kept[1:], slow_apis=[x.api_verdict.row.api for x in kept
                                                     if x.api_verdict is not None])
    return replace(a, brokers=brokers)


def _findings(recent: Sequence[WindowAssessment], starts: Sequence[int],
              config: SlowBrokerSection) -> dict[int | None, tuple[list[int], object]]:
    """Per key flagged persistently: its flagged windows and its verdict (the cluster's:
    its newest window's assessment)."""
    windows: dict[int | None, set[int]] = defaultdict(set)
    for a in recent:
        for k in flagged(a):
            windows[k].update(w for w in covered_windows(a, k, config) if w in starts)
    out = {}
    for k, ws in windows.items():
        flagged_windows = sorted(ws)
        if k is CLUSTER:
            if len(flagged_windows) >= config.persistence_lookback_windows:
                out[k] = (flagged_windows, next(a for a in recent
                                                if a.window_start_ms == flagged_windows[-1]))
        elif len(flagged_windows) >= config.persistence_windows:
            verdict = strongest(recent, k, config)
            if verdict is not None:
                out[k] = (flagged_windows, verdict)
    return out


def detections_from(assessments: Sequence[WindowAssessment],
                    config: SlowBrokerSection) -> list[Detection]:
    """Persistence over the assessed windows, per cluster: its brokers' findings, then the
    cluster-wide one; victim verdicts that lean on a follower not found are dropped."""
    by_cw = {(a.cluster, a.window_start_ms): a for a in assessments}
    detections = []
    for cluster, starts in sorted(recent_windows(assessments, config).items()):
        recent = [by_cw[(cluster, s)] for s in starts if (cluster, s) in by_cw]
        found = _findings(recent, starts, config)
        unfound = {f for a in recent for v in a.brokers.values()
                   for x in (v, *v.others) if (f := leans_on(x)) is not None} - set(found)
        if unfound:
            found = _findings([without_leaning_on(a, unfound) for a in recent], starts,
                              config)
        for k in sorted(found, key=lambda k: (k is CLUSTER, str(k))):
            flagged_windows, verdict = found[k]
            if k is CLUSTER:
                detections.append(cluster_wide_detection(verdict, flagged_windows, config))
            else:
                detections.append(broker_detection(cluster, verdict, flagged_windows, config))
    return detections
