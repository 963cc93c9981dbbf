"""Slow clients: a client judged by its own requests, not by a broker's percentile.

A client that reads its responses slowly (a small receive buffer, a starved process, a
thin link) makes the broker's ResponseSend for its requests take seconds: the broker
writes into the socket until the buffers are full, then waits for the client to read.
The broker is fine; only that client is slow. Judged through the broker's TP99 (rule 6,
blame.attribute_send) such a client is seen only when it is more than 1% of the
broker's requests of that API, and then as a finding on the broker. A slow reader makes
few requests (each takes seconds, and a client waits for a response before it fetches
again on that connection), so it is usually far below 1% and was not found at all.

Signal: `ClientSendWindow` rows, per window/broker/client/API: requests, how many took
the API's threshold (threshold_ms or api_threshold_ms) or more to send
(`slow_requests`), the send p99. The adapter gives every row of each client that had a
slow send in the lookback, and every client's row at each broker/API/window where anyone
had one (so the share below counts all of that broker's clients).

Rule, per cluster, window, client and watched API (`judge_clients`):
1. leave out replica fetches (`follower`): a slow follower is the slow-broker rules'
   business (blame.py), not a client;
2. leave out the client's requests at a broker/API where more than shared_cause_share of
   the clients seen (more than one) were slow in the window: that is the broker's send
   path (network_send_slow, a frozen broker sending late to everyone), the rule 6
   judgement of attribute_send;
3. over what is left, at every broker the client talks to: the client is slow when at
   least CLIENT_MIN_SLOW (2) of its requests were slow, and at least
   CLIENT_SLOW_SHARE (0.5) of them. We chose counts over the client's own p99:
   with the few requests a slow reader makes (1 MB read at 256 kB/s is ~3 s a fetch,
   ~3 a connection in a 10 s window), a p99 is its slowest request, and one slow request
   is a hiccup (a GC pause, a retransmit), not a slow reader; half of its requests is
   what makes it a reader that is slow, while a busy consumer with two slow fetches among
   hundreds reads fine. Without `slow_requests` (older inputs) the count is bounded from
   the p99: at least requests - ceil(0.99 x requests) + 1 requests were that slow.
The client's verdict names the API with the most slow requests, every API it was slow on,
the brokers and, at each, its share of the broker's requests of the API (from the stage
rows): a slow reader is a slow reader at 1% of a broker's traffic.

Persistence as for brokers (persistence.py): persistence_windows of the last
persistence_lookback_windows windows. Output: a `Detection` of type slow_client on
"client:<client_id>", cause client_slow_read, severity warning, action none (kmon cannot
fix a client; its owner can). A broker whose only verdict in a window is slow clients
(Role.CLIENT) is not a slow_broker finding any more: its clients are.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from typing import Sequence

from core.findings import (
    ActionKind,
    AnomalyType,
    Detection,
    EntityKind,
    Severity,
    client_entity,
)
from core.signals import threshold_for
from detectors.slow_broker.blame import slow_clients
from detectors.slow_broker.config import SlowBrokerSection
from detectors.slow_broker.inputs import ClientSendWindow, RequestStageWindow
from detectors.slow_broker.verdicts import ClientVerdict, SlowBrokerCause

# A client is slow in a window from this many slow sends of one API: one slow request is
# a hiccup (a pause, a retransmit), not a slow reader.
CLIENT_MIN_SLOW = 2
# A client is slow in a window only when at least this share of its requests of the API
# were slow too: a busy client with two slow fetches among hundreds reads fine.
CLIENT_SLOW_SHARE = 0.5


def slow_count(s: ClientSendWindow, threshold_ms: float) -> int:
    """How many of the row's requests took the threshold or more to send: the adapter's
    count, or the fewest a p99 over the threshold implies."""
    if s.slow_requests is not None:
        return s.slow_requests
    if s.send_p99_ms < threshold_ms:
        return 0
    return max(1, s.requests - math.ceil(0.99 * s.requests) + 1)


def brokers_send_path_slow(sends: Sequence[ClientSendWindow], threshold_ms: float,
                           config: SlowBrokerSection) -> bool:
    """Most of a broker/API's clients slow at once: the broker's send path, not theirs."""
    slow, seen = slow_clients(sends, threshold_ms)
    return seen > 1 and len(slow) > config.shared_cause_share * seen


def judge_clients(sends: Sequence[ClientSendWindow], rows: Sequence[RequestStageWindow],
                  config: SlowBrokerSection) -> dict[str, ClientVerdict]:
    """The clients slow in one window (of one cluster) by their own requests."""
    at_broker: dict[tuple[int, str], list[ClientSendWindow]] = defaultdict(list)
    for s in sends:
        if s.api is not None and s.api in config.watched_apis:
            at_broker[(s.broker, s.api)].append(s)
    broker_requests = {(r.broker, r.api): r.requests for r in rows}

    per_client: dict[tuple[str, str], list[ClientSendWindow]] = defaultdict(list)
    excluded: dict[tuple[str, str], list[int]] = defaultdict(list)
    for (broker, api), group in at_broker.items():
        threshold = threshold_for(group[0].api, config.threshold_ms, config.api_threshold_ms)
        broker_path = brokers_send_path_slow(group, threshold, config)
        for s in group:
            if s.follower:
                continue
            if broker_path:
                excluded[(s.client_id, api)].append(broker)
            else:
                per_client[(s.client_id, api)].append(s)

    judged: dict[str, list[ClientVerdict]] = defaultdict(list)
    for (client, api), group in per_client.items():
        threshold = threshold_for(group[0].api, config.threshold_ms, config.api_threshold_ms)
        requests = sum(s.requests for s in group)
        slow = sum(slow_count(s, threshold) for s in group)
        if (slow < CLIENT_MIN_SLOW or slow < CLIENT_SLOW_SHARE * requests):
            continue
        brokers = tuple(_broker_evidence(s, threshold, broker_requests)
                        for s in sorted(group, key=lambda x: x.broker))
        judged[client].append(ClientVerdict(
            client_id=client, api=group[0].api, requests=requests, slow_requests=slow,
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
    """A slow_client finding (warning, no action: kmon cannot fix a client) from the
    client's flagged windows, its evidence ending with the persistence it met."""
    return Detection(
        cluster=cluster, type=AnomalyType.SLOW_CLIENT, severity=Severity.WARNING,
        entity_kind=EntityKind.CLIENT, entity=client_entity(client_id),
        first_seen_ms=min(flagged), last_seen_ms=max(flagged) + config.window_ms,
        cause=cause, explanation=explanation, suggested_action=ActionKind.NONE,
        evidence={**evidence, "window_s": config.window_s, "windows_flagged": len(flagged),
                  "windows_considered": config.persistence_lookback_windows})


def client_detection(cluster: str, v: ClientVerdict, flagged: list[int],
                     config: SlowBrokerSection) -> Detection:
    """A slow_client finding from the client's latest flagged window."""
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
