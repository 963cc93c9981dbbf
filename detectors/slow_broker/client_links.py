"""Slow producer links: a producer whose requests take long on the way, not at the broker.

A producer behind a slow network path (a congested uplink, a cross-region route, a
misbehaving proxy or NAT) waits long for every answer, yet every broker it writes to
serves its requests as fast as anyone's: the broker's request log starts its timer when
the whole request has arrived and stops it when the response is handed to the socket, so
nothing of the link shows there. Only the client sees it, as the round-trip time in its
librdkafka statistics (`rtt`, per broker: from the request's send to its response).

Signal: `ClientRttWindow` rows, per window/client/broker: the highest rtt p99 of the
client's statistics documents in the window and the p50 of the latest of them
(silver.client_stats, scope broker; a slow path still slows the median at the window's
end, a backlog's raised median is gone by the next document:
jobs/detector_inputs/client_rtts.py). A p99 of 0 (or none) means the client sent that broker nothing in the interval
(librdkafka's window is empty) and is left out. The broker's side is what the broker
took for that client's own Produce requests (`ProducerServerWindow`: their TotalTime p99
and p50, from the request log, or in the request-log windows mode from the agents'
per-client rows); where those are not known (a producer the windows mode's agent folded
into its "other" row) it is the window's Produce stage row, the broker's
TotalTime TP99 over every client's Produce requests, for both (an upper bound of the
median). That TP99 understates an acks=all producer's wait whenever the leader waits on
a follower and most of its Produce requests are acks=1, which would make those producers
look like slow links: their own requests' times are preferred for that reason.

Rule, per cluster, window and producer (`judge_links`):
1. producers only: a consumer's rtt is mostly its fetch wait (fetch.wait.max.ms, 500 ms
   by default, whenever there is nothing new to read), a normal thing; consumers are
   judged by their own reads (clients.py);
2. at each broker, the time on the link is the client's rtt minus the broker's side,
   in the tail (rtt p99 minus its own requests' TotalTime p99, else the broker's Produce
   TotalTime TP99) and typically (rtt p50 minus its own requests' TotalTime p50, else
   the p99 above); with no Produce row for the broker in the window (a frozen broker
   logs nothing) the broker is not judged: unknown, not slow; nor where at least
   BACKLOG_SHARE of the producer's own requests there had waited in the socket (the
   broker read each as soon as it had answered the one before on the connection,
   `ProducerServerWindow.queued_share`): then its median round trip holds that wait too,
   which no TotalTime shows. A producer with requests in flight faster than the broker
   answers them looks so: most of its requests are read back to back, while a producer
   behind a slow path sends each after the last answer, and few are;
3. the link is slow at a broker when both differences are the Produce threshold
   (threshold_ms, or api_threshold_ms) or more (the tail alone where the client's p50 is
   not known). A slow path delays every round trip, the median as much as the tail. A
   tail alone is queueing, not the path: a producer pipelines its requests on one
   connection, and a broker reads a connection's next request only once it has answered
   the one before, so a request waits in the socket, outside its own TotalTime, behind
   the ones sent before it; a client host that is descheduled shows the same way, its
   tail several times its own requests' TotalTime with no slow path;
4. peers: at a broker where more than shared_cause_share of the producers seen (more than
   one) are slow at once, it is the broker's side (its network, its host), not theirs:
   left out for every producer there;
5. the producer's link is slow in the window when it was slow at every broker judged
   for it, and that is either two brokers or more, or one where other producers were
   fine: a producer that talks to one broker with no peer cannot tell its link from the
   broker's network, and says nothing.
Persistence as for brokers (persistence.py). Output: a `Detection` of type slow_client on
"client:<client_id>", cause client_slow_link, severity warning, action none (kmon cannot
fix a client's network; its owner can).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Mapping, Sequence

from core.findings import Detection
from core.signals import threshold_for
from detectors.slow_broker.clients import client_finding
from detectors.slow_broker.config import SlowBrokerSection
from detectors.slow_broker.inputs import ClientRttWindow, ProducerServerWindow, RequestStageWindow
from detectors.slow_broker.verdicts import SlowBrokerCause

PRODUCE = "Produce"
# A producer is not judged at a broker where at least this share of its requests waited
# in the socket behind the one before: its median round trip then holds that wait.
BACKLOG_SHARE = 0.5


@dataclass(frozen=True)
class LinkVerdict:
    """A producer whose link was slow in one window: at each broker judged, its rtt p99
    and p50, the broker's side of them and the time on the link (the smaller
    difference)."""
    client_id: str
    threshold_ms: float
    brokers: tuple[Mapping, ...]
    excluded_brokers: tuple[int, ...] = ()   # brokers slow to most of their producers
    backlogged_brokers: tuple[int, ...] = ()  # its requests mostly waited in the socket

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
        at_broker[broker][client] = {"broker": broker, "rtt_p99_ms": round(p99, 3),
                                     "rtt_p50_ms": None if p50 is None else round(p50, 3),
                                     "broker_produce_p99_ms": round(server[broker], 3),
                                     "own_produce_p99_ms": None if mine is None
                                     else round(mine, 3),
                                     "own_produce_p50_ms": None if mine_p50 is None
                                     else round(mine_p50, 3),
                                     "link_ms": round(link if typical is None
                                                      else min(link, typical), 3),
                                     "slow": link >= threshold and (
                                         typical is None or typical >= threshold)}

    judged: dict[str, list[dict]] = defaultdict(list)
    excluded: dict[str, list[int]] = defaultdict(list)
    for broker, clients in at_broker.items():
        slow = [c for c, e in clients.items() if e["slow"]]
        broker_side = len(clients) > 1 and len(slow) > config.shared_cause_share * len(clients)
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
