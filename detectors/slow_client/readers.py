"""Slow readers: a client whose responses the brokers were slow to send, judged by its own
requests. A slow reader makes few requests (each takes seconds), so it hides under a
broker's TP99; the broker is fine, the client is slow.

Rule, per window, client and watched API, over every broker it talks to: at least
CLIENT_MIN_SLOW of its requests took the API's threshold or more to send, and at least
CLIENT_SLOW_SHARE of them. Replica fetches are the slow-broker rules' business, and a
broker that sent late to most of its clients (shared_cause_share) is its own send path,
not theirs: both are left out.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Mapping, Sequence

from core.findings import ActionKind, AnomalyType, Detection, EntityKind, Severity, client_entity
from core.signals import threshold_for
from detectors.slow_broker import ClientSendWindow, RequestStageWindow, SlowBrokerSection
from detectors.explaining_away import most_of
from detectors.slow_broker.blame import slow_clients
from detectors.slow_broker.verdicts import SlowBrokerCause
from detectors.windowed import finding

# One slow request is a hiccup (a pause, a retransmit), not a slow reader.
CLIENT_MIN_SLOW = 2
# A busy client with two slow fetches among hundreds reads fine.
CLIENT_SLOW_SHARE = 0.5


@dataclass(frozen=True)
class ClientVerdict:
    """A client slow in one window: the API with the most slow requests, and what it did
    at each broker it was seen at."""
    client_id: str
    api: str
    requests: int
    slow_requests: int
    send_p99_ms: float
    threshold_ms: float
    brokers: tuple[Mapping, ...]   # per broker: requests, slow_requests, send_p99_ms, share
    apis: tuple[str, ...]          # every API it was slow on
    excluded_brokers: tuple[int, ...] = ()   # brokers whose own send path was slow


def slow_count(s: ClientSendWindow, threshold_ms: float) -> int:
    """How many of the row's requests took the threshold or more to send: the read side's
    count, or the fewest a p99 over the threshold implies."""
    if s.slow_requests is not None:
        return s.slow_requests
    if s.send_p99_ms < threshold_ms:
        return 0
    return max(1, s.requests - math.ceil(0.99 * s.requests) + 1)


def judge_clients(sends: Sequence[ClientSendWindow], rows: Sequence[RequestStageWindow],
                  config: SlowBrokerSection) -> dict[str, ClientVerdict]:
    """The clients slow in one window (of one cluster) by their own requests. Only the
    clients with a slow request somewhere are judged (at 2,000 brokers, a few of
    hundreds of thousands of rows)."""
    thresholds = {api: threshold_for(api, config.threshold_ms, config.api_threshold_ms)
                  for api in config.watched_apis}
    suspects = {(s.client_id, s.api) for s in sends
                if s.api in thresholds and not s.follower and slow_count(s, thresholds[s.api])}
    if not suspects:
        return {}
    # every send at the brokers where a suspect was seen: the brokers' other clients
    # tell a slow reader from a broker's slow send path
    wanted = {(s.broker, s.api) for s in sends if (s.client_id, s.api) in suspects}
    at_broker: dict[tuple[int, str], list[ClientSendWindow]] = defaultdict(list)
    for s in sends:
        if (s.broker, s.api) in wanted:
            at_broker[(s.broker, s.api)].append(s)
    broker_requests = {(r.broker, r.api): r.requests for r in rows}

    per_client: dict[tuple[str, str], list[ClientSendWindow]] = defaultdict(list)
    excluded: dict[tuple[str, str], list[int]] = defaultdict(list)
    for (broker, api), group in at_broker.items():
        mine = [s for s in group if not s.follower and (s.client_id, api) in suspects]
        if not mine:
            continue
        slow, seen = slow_clients(group, thresholds[api])
        broker_path = most_of(len(slow), seen, config.shared_cause_share)
        for s in mine:
            if broker_path:
                excluded[(s.client_id, api)].append(broker)
            else:
                per_client[(s.client_id, api)].append(s)

    judged: dict[str, list[ClientVerdict]] = defaultdict(list)
    for (client, api), group in per_client.items():
        threshold = thresholds[api]
        requests = sum(s.requests for s in group)
        slow = sum(slow_count(s, threshold) for s in group)
        if slow < CLIENT_MIN_SLOW or slow < CLIENT_SLOW_SHARE * requests:
            continue
        brokers = tuple(_broker_evidence(s, threshold, broker_requests)
                        for s in sorted(group, key=lambda x: x.broker))
        judged[client].append(ClientVerdict(
            client_id=client, api=api, requests=requests, slow_requests=slow,
            send_p99_ms=max(s.send_p99_ms for s in group), threshold_ms=threshold,
            brokers=brokers, apis=(), excluded_brokers=tuple(sorted(excluded[(client, api)]))))
    out = {}
    for client, verdicts in judged.items():
        worst = min(verdicts, key=lambda v: (-v.slow_requests, -v.send_p99_ms, v.api))
        out[client] = dataclasses.replace(worst, apis=tuple(sorted(v.api for v in verdicts)))
    return out


def _broker_evidence(s: ClientSendWindow, threshold_ms: float,
                     broker_requests: dict[tuple[int, str], int]) -> dict:
    total = broker_requests.get((s.broker, s.api))
    share = None if not total else round(min(1.0, s.requests / total), 4)
    return {"broker": s.broker, "requests": s.requests,
            "slow_requests": slow_count(s, threshold_ms),
            "send_p99_ms": round(float(s.send_p99_ms), 3), "broker_requests": total,
            "share_of_broker_requests": share}


def client_finding(cluster: str, client_id: str, flagged: list[int], config: SlowBrokerSection,
                   cause: SlowBrokerCause, explanation: str, evidence: dict) -> Detection:
    """A slow_client finding: warning, no action (kmon cannot fix a client)."""
    return finding(cluster, flagged, config, evidence, type=AnomalyType.SLOW_CLIENT,
                   severity=Severity.WARNING, entity_kind=EntityKind.CLIENT,
                   entity=client_entity(client_id), cause=cause, explanation=explanation,
                   suggested_action=ActionKind.NONE)


def client_detection(cluster: str, v: ClientVerdict, flagged: list[int],
                     config: SlowBrokerSection) -> Detection:
    """A slow reader's finding from its latest flagged window."""
    brokers = [b["broker"] for b in v.brokers]
    shares = [b["share_of_broker_requests"] for b in v.brokers
              if b["share_of_broker_requests"] is not None]
    share = max(shares) if shares else None
    where = ", ".join(str(b) for b in brokers)
    share_text = f", {share:.1%} of the requests there at most" if share is not None else ""
    return client_finding(
        cluster, v.client_id, flagged, config, SlowBrokerCause.CLIENT_SLOW_READ,
        f"Client {v.client_id} reads its {v.api} responses slowly: "
        f"{v.slow_requests} of its {v.requests} requests took "
        f"{v.threshold_ms:,.0f} ms or more to send (ResponseSend p99 "
        f"{v.send_p99_ms:,.0f} ms) from broker(s) {where}{share_text}; the "
        f"client's problem, not a broker fault.",
        {"client_id": v.client_id, "api": v.api, "apis": list(v.apis),
         "brokers": brokers, "requests": v.requests,
         "slow_requests": v.slow_requests, "send_p99_ms": round(v.send_p99_ms, 3),
         "threshold_ms": round(v.threshold_ms, 3), "per_broker": list(v.brokers),
         "share_of_broker_requests": share, "brokers_left_out": list(v.excluded_brokers)})
