"""A finding's explanation and evidence, in the words and keys alerts, runbooks and
reports read."""

from __future__ import annotations

import statistics
from collections import Counter

from core.findings import (ActionKind, AnomalyType, Detection, EntityKind, Severity,
                           broker_entity, cluster_entity)
from core.signals import STAGE_NAMES, STAGES
from detectors.explaining_away import MIN_REFERENCE_MS
from detectors.slow_broker.config import SlowBrokerSection
from detectors.slow_broker.verdicts import (ApiVerdict, BrokerVerdict, SlowBrokerCause,
                                            WindowAssessment)
from detectors.windowed import finding


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
            "pooled_windows": v.pooled_windows, "pooled_requests": v.pooled_requests,
            "peer_median_ms": _round(v.peer_median_ms),
            "stage_p99s_ms": {s: _round(v.row.stage_p99(s)) for s in STAGES},
            "rules": {"enough_traffic": v.enough_traffic, "over_threshold": v.over_threshold,
                      "slow_vs_history": v.slow_vs_history, "slow_vs_peers": v.slow_vs_peers,
                      "follower_corroborated": v.follower_corroborated}}


def _describe_latency(v: ApiVerdict) -> str:
    parts = [f"{v.row.api} TP99 {v.latency_ms:,.0f} ms over the {v.threshold_ms:,.0f} ms threshold"]
    if v.pooled_windows > 1:
        parts.append(f" in each of its last {v.pooled_windows} windows ({v.pooled_requests:,} "
                     f"requests together)")
    ratios = []
    if v.baseline_ms:
        ratios.append(f"{v.latency_ms / max(v.baseline_ms, MIN_REFERENCE_MS):.1f}x its usual")
    if v.peer_median_ms:
        ratios.append(f"{v.latency_ms / max(v.peer_median_ms, MIN_REFERENCE_MS):.1f}x its peers")
    if ratios:
        parts.append(f" ({', '.join(ratios)})")
    if v.follower_corroborated and not (v.slow_vs_history or v.slow_vs_peers):
        parts.append(", waiting on a follower that every leader it follows waits on")
    elif v.follower_corroborated and v.pooled_windows == 1 and v.pooled_requests:
        parts.append(f", on {v.pooled_requests:,} requests: few, but they wait on a follower "
                     f"late at every leader it follows")
    if v.dominant_stage:
        parts.append(f", mostly {STAGE_NAMES[v.dominant_stage]} ({v.stage_share:.0%})")
    return "".join(parts)


def broker_detection(cluster: str, v: BrokerVerdict, flagged: list[int],
                     config: SlowBrokerSection) -> Detection:
    at = v.attribution
    evidence = {"broker": v.broker, "role": at.role.value, "slow_apis": sorted(set(v.slow_apis)),
                **_api_evidence(v.api_verdict), **at.details}
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
    return finding(cluster, flagged, config, evidence, type=AnomalyType.SLOW_BROKER,
                   severity=at.severity, entity_kind=EntityKind.BROKER,
                   entity=broker_entity(v.broker), cause=at.cause, explanation=head + ".",
                   suggested_action=at.action)


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
    slow = a.slow
    judged = a.brokers_with_traffic | slow
    share = len(slow) / max(1, len(judged))
    quiet = "".join(f" ({len(who)} of them {what})" for who, what in (
        (a.quiet_slow, "too quiet to judge alone"),
        (a.shared_stall, "held at the same instants as the others"),
        (a.risen, "slower than usual, too little to blame alone")) if who)
    return finding(
        a.cluster, flagged, config,
        {"brokers_blamed": sorted(a.blamed)[:100], "brokers_blamed_count": len(a.blamed),
         "brokers_slow_but_quiet": sorted(a.quiet_slow)[:100],
         "brokers_in_shared_stalls": sorted(a.shared_stall)[:100],
         "brokers_risen": sorted(a.risen)[:100],
         "brokers_with_traffic": len(a.brokers_with_traffic), "share": _round(share),
         "causes": dict(causes), "dominant_stage": stage, "median_latency_ms_by_api": medians},
        type=AnomalyType.CLUSTER_WIDE_SLOWNESS, severity=Severity.HIGH,
        entity_kind=EntityKind.CLUSTER, entity=cluster_entity(a.cluster),
        cause=SlowBrokerCause.CLUSTER_WIDE_SLOWNESS,
        explanation=(f"{len(slow)} of {len(judged)} brokers with traffic are slow at once"
                     f"{quiet}"
                     f"{f' (mostly {STAGE_NAMES[stage]})' if stage else ''}: a cluster-wide "
                     f"event, not one broker's fault; no broker is blamed."),
        suggested_action=ActionKind.PAGE_HUMAN)
