"""Slow producer links: a producer whose round trips are slow while the brokers serve its
requests as fast as anyone's. The request log starts its timer when a request has
arrived, so only the client's own statistics (librdkafka's rtt per broker) see the path.

Rule, per window and producer: at each broker, its rtt p99 and p50 minus what the broker
took for its own Produce requests (their TotalTime p99 and p50; the broker's Produce TP99
where not known) are both the Produce threshold or more (the tail alone without a p50):
a slow path delays every round trip, while a tail alone is requests queued on the
connection. Slow at every broker judged, and either two brokers or one where other
producers were fine. Not judged: consumers (their rtt is mostly the fetch wait), a
broker with no Produce row, a broker where at least BACKLOG_SHARE of its requests waited
in the socket (its median then holds that wait), a broker slow to most of its producers
(shared_cause_share: its side, not theirs), and a broker that took the threshold or more
for the producer's requests itself: a connection serves one request at a time, so the
requests behind a slow one wait in the socket, outside their TotalTime, and its round
trips' excess cannot be told from that (such a broker can still show the path is fast).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Mapping, Sequence

from core.findings import Detection
from core.signals import threshold_for
from detectors.slow_broker import RequestStageWindow, SlowBrokerSection
from detectors.explaining_away import most_of
from detectors.slow_broker.verdicts import SlowBrokerCause
from detectors.slow_client.readers import client_finding

PRODUCE = "Produce"
# A producer is not judged at a broker where at least this share of its requests waited
# in the socket behind the one before: its median round trip then holds that wait.
BACKLOG_SHARE = 0.5


@dataclass(frozen=True)
class ClientRttWindow:
    """A client's own view of one broker in a window, from its librdkafka statistics: the
    highest rtt p99 of its documents in the window and the rtt p50 of the latest (None:
    not known); `client_type` producer or consumer."""
    cluster: str
    window_start_ms: int
    client_id: str
    client_type: str
    broker: int
    rtt_p99_ms: float
    rtt_p50_ms: float | None = None


@dataclass(frozen=True)
class ProducerServerWindow:
    """What one producer's own Produce requests took at one broker in a window (TotalTime
    p99 and p50; None: not known), and the share of them the broker read as soon as it had
    answered the one before on the connection: they had waited in the socket, a time
    their round trips hold and their TotalTime does not."""
    cluster: str
    window_start_ms: int
    broker: int
    client_id: str
    requests: int
    total_p99_ms: float
    total_p50_ms: float | None = None
    queued_share: float | None = None


@dataclass(frozen=True)
class LinkVerdict:
    """A producer whose link was slow in one window: at each broker judged, its rtt p99
    and p50, the broker's side of them and the time on the link (the smaller
    difference)."""
    client_id: str
    threshold_ms: float
    brokers: tuple[Mapping, ...]
    excluded_brokers: tuple[int, ...] = ()   # brokers slow to most of their producers
    # its requests mostly waited in the socket, or at the broker past the threshold
    backlogged_brokers: tuple[int, ...] = ()

    @property
    def link_ms(self) -> float:
        """The smallest time on the link over the brokers: what every path shows."""
        return min(b["link_ms"] for b in self.brokers)


def _broker_produce_p99(rows: Sequence[RequestStageWindow]) -> dict[int, float]:
    out: dict[int, float] = {}
    for r in rows:
        if r.api == PRODUCE:
            out[r.broker] = max(out.get(r.broker, 0.0), float(r.total_p99_ms))
    return out


def judge_links(rtts: Sequence[ClientRttWindow], rows: Sequence[RequestStageWindow],
                config: SlowBrokerSection, own: Sequence[ProducerServerWindow] = ()
                ) -> dict[str, LinkVerdict]:
    """The producers whose link was slow in one window (of one cluster); `own`: what the
    brokers took for each producer's own Produce requests in it, where known."""
    threshold = threshold_for(PRODUCE, config.threshold_ms, config.api_threshold_ms)
    server = _broker_produce_p99(rows)
    own_p99 = {(x.client_id, x.broker): float(x.total_p99_ms) for x in own}
    own_p50 = {(x.client_id, x.broker): float(x.total_p50_ms) for x in own
               if x.total_p50_ms is not None}
    queued = {(x.client_id, x.broker) for x in own
              if x.queued_share is not None and x.queued_share >= BACKLOG_SHARE}
    # Per client and broker the highest rtt p99 of its documents in the window.
    rtt: dict[tuple[str, int], float] = {}
    rtt_p50: dict[tuple[str, int], float] = {}
    for x in rtts:
        if x.client_type != "producer" or not x.rtt_p99_ms or x.rtt_p99_ms <= 0:
            continue
        key = (x.client_id, x.broker)
        rtt[key] = max(rtt.get(key, 0.0), float(x.rtt_p99_ms))
        if x.rtt_p50_ms is not None:
            rtt_p50[key] = max(rtt_p50.get(key, 0.0), float(x.rtt_p50_ms))

    at_broker: dict[int, dict[str, dict]] = defaultdict(dict)
    backlogged: dict[str, list[int]] = defaultdict(list)
    for (client, broker), p99 in rtt.items():
        if broker not in server:
            continue
        if (client, broker) in queued:
            backlogged[client].append(broker)
            continue
        mine = own_p99.get((client, broker))
        side = server[broker] if mine is None else mine
        link = p99 - side
        # The typical round trip against the broker's typical time for this client's
        # requests (the tail's side where that is not known: an upper bound of it).
        p50 = rtt_p50.get((client, broker))
        mine_p50 = own_p50.get((client, broker))
        typical = None if p50 is None else p50 - (side if mine_p50 is None else mine_p50)
        slow = link >= threshold and (typical is None or typical >= threshold)
        if slow and side >= threshold:   # queued behind its own slow requests?
            backlogged[client].append(broker)
            continue
        at_broker[broker][client] = {"broker": broker, "rtt_p99_ms": round(p99, 3),
                                     "rtt_p50_ms": None if p50 is None else round(p50, 3),
                                     "broker_produce_p99_ms": round(server[broker], 3),
                                     "own_produce_p99_ms": None if mine is None
                                     else round(mine, 3),
                                     "own_produce_p50_ms": None if mine_p50 is None
                                     else round(mine_p50, 3),
                                     "link_ms": round(link if typical is None
                                                      else min(link, typical), 3),
                                     "slow": slow}

    judged: dict[str, list[dict]] = defaultdict(list)
    excluded: dict[str, list[int]] = defaultdict(list)
    for broker, clients in at_broker.items():
        slow = [c for c, e in clients.items() if e["slow"]]
        broker_side = most_of(len(slow), len(clients), config.shared_cause_share)
        for client, e in clients.items():
            if broker_side:
                excluded[client].append(broker)
            else:
                judged[client].append({**e, "peers": len(clients) - 1})

    out = {}
    for client, seen in judged.items():
        if not all(e["slow"] for e in seen):
            continue
        if len(seen) < 2 and seen[0]["peers"] == 0:
            continue
        out[client] = LinkVerdict(
            client_id=client, threshold_ms=threshold,
            brokers=tuple(sorted(({k: v for k, v in e.items() if k != "slow"} for e in seen),
                                 key=lambda e: e["broker"])),
            excluded_brokers=tuple(sorted(excluded[client])),
            backlogged_brokers=tuple(sorted(backlogged[client])))
    return out


def link_detection(cluster: str, v: LinkVerdict, flagged: list[int],
                   config: SlowBrokerSection) -> Detection:
    """A slow_client finding (cause client_slow_link) from the latest flagged window."""
    brokers = [b["broker"] for b in v.brokers]
    where = ", ".join(str(b) for b in brokers)
    peered = [b["broker"] for b in v.brokers if b["peers"]]
    peers = (f"; other producers were fast at broker(s) {', '.join(map(str, peered))}"
             if peered else "")
    rtt = max(b["rtt_p99_ms"] for b in v.brokers)
    medians = [b["rtt_p50_ms"] for b in v.brokers if b.get("rtt_p50_ms") is not None]
    median = f", median {max(medians):,.0f} ms" if len(medians) == len(v.brokers) else ""
    own = all(b.get("own_produce_p99_ms") is not None for b in v.brokers)
    served = max(b["own_produce_p99_ms"] if own else b["broker_produce_p99_ms"]
                 for b in v.brokers)
    return client_finding(
        cluster, v.client_id, flagged, config, SlowBrokerCause.CLIENT_SLOW_LINK,
        f"Producer {v.client_id} waits {rtt:,.0f} ms (rtt p99{median}) for answers from "
        f"broker(s) {where}, which served "
        + (f"its own Produce requests in {served:,.0f} ms (TotalTime p99)" if own else
           f"Produce requests in {served:,.0f} ms (TotalTime TP99)")
        + f" at most: {v.link_ms:,.0f} ms or more of every round "
        f"trip is spent between this client and the brokers{peers}: its network path "
        f"or its own host, not a broker fault.",
        {"client_id": v.client_id, "api": PRODUCE, "brokers": brokers,
         "link_ms": round(v.link_ms, 3), "rtt_p99_ms": round(rtt, 3),
         "threshold_ms": round(v.threshold_ms, 3), "per_broker": list(v.brokers),
         "brokers_left_out": list(v.excluded_brokers),
         "brokers_backlogged": list(v.backlogged_brokers)})
