"""Slow producer links judged by the producers' own round trips
(detectors/slow_client/links.py), on the windows of test_detector_slow_broker:
three brokers serving Produce in 8 ms (TotalTime TP99), 10-second windows, the fault in
the last two of ten."""

from __future__ import annotations

import pytest

from core.findings import ActionKind, AnomalyType, EntityKind, Severity
from detectors.slow_broker import (
    ClientSendWindow,
    detect_slow_brokers,
)
from detectors.slow_client import ClientRttWindow, ProducerServerWindow, detect_slow_clients
from tests.unit.test_detector_slow_broker import (
    BROKERS,
    CONFIG,
    FAULT,
    LAST,
    W,
    healthy,
    replaced,
    start,
)

pytestmark = pytest.mark.unit

ALL = range(LAST + 1)


def rtt(client: str, w: int, broker: int, p99: float, kind: str = "producer",
        p50: float | None = None) -> ClientRttWindow:
    return ClientRttWindow("c1", start(w), client, kind, broker, p99, p50)


def peers(windows=ALL, brokers=BROKERS, p99: float = 12.0) -> list[ClientRttWindow]:
    """Two healthy producers at every broker: rtt a few ms over the broker's 8 ms."""
    return [rtt(c, w, b, p99) for w in windows for b in brokers for c in ("orders", "clicks")]


def behind_slow_link(windows=FAULT, brokers=BROKERS, p99: float = 820.0,
                     client: str = "far-producer", p50: float | None = None
                     ) -> list[ClientRttWindow]:
    """`client`'s round trips: fast, then `p99` (and `p50`, None: not known) in `windows`."""
    return [rtt(client, w, b, 12.0, p50=None if p50 is None else 6.0)
            for w in ALL if w not in windows for b in brokers] + [
        rtt(client, w, b, p99, p50=p50) for w in windows for b in brokers]


def found(rows, rtts, sends=(), config=CONFIG, own=()):
    return {d.entity: d for d in detect_slow_brokers(rows, client_sends=sends, config=config)
            + detect_slow_clients(rows, client_rtts=rtts, client_sends=sends, config=config,
                                  producer_times=own)}


def own(client: str, windows, brokers, p99: float, requests: int = 40,
        p50: float | None = None, queued: float | None = None) -> list[ProducerServerWindow]:
    """What the brokers took for `client`'s own Produce requests (`queued`: the share of
    them that had waited in the socket)."""
    return [ProducerServerWindow("c1", start(w), b, client, requests, p99, p50, queued)
            for w in windows for b in brokers]


def test_a_producer_behind_a_slow_link_is_a_slow_client_and_no_broker_is_blamed():
    got = found(healthy(), peers() + behind_slow_link())
    assert set(got) == {"client:far-producer"}
    d = got["client:far-producer"]
    assert (d.type, d.entity_kind, d.cause, d.suggested_action, d.severity) == (
        AnomalyType.SLOW_CLIENT, EntityKind.CLIENT, "client_slow_link", ActionKind.NONE,
        Severity.WARNING)
    assert (d.first_seen_ms, d.last_seen_ms) == (start(LAST - 1), start(LAST) + W)
    e = d.evidence
    assert (e["brokers"], e["api"], e["rtt_p99_ms"], e["link_ms"]) == ([1, 2, 3], "Produce",
                                                                        820.0, 812.0)
    assert e["per_broker"][0] == {"broker": 1, "rtt_p99_ms": 820.0, "rtt_p50_ms": None,
                                  "broker_produce_p99_ms": 8.0, "own_produce_p99_ms": None,
                                  "own_produce_p50_ms": None, "link_ms": 812.0, "peers": 2}
    assert (e["windows_flagged"], e["brokers_left_out"]) == (2, [])
    assert "far-producer" in d.explanation and "fast at broker(s) 1, 2, 3" in d.explanation


def test_one_slow_window_is_not_a_finding():
    assert found(healthy(), peers() + behind_slow_link(windows={LAST})) == {}


def test_a_link_slow_by_less_than_the_threshold_is_not_slow():
    # 300 ms is the Produce threshold: 8 + 291 is 291 ms on the link.
    assert found(healthy(), peers() + behind_slow_link(p99=299.0)) == {}
    assert set(found(healthy(), peers() + behind_slow_link(p99=308.0))) == {
        "client:far-producer"}


def test_a_slow_broker_answering_late_to_every_producer_is_no_slow_link():
    # Broker 2 takes 900 ms itself: every producer's rtt there follows it.
    rows = replaced(healthy(), 2, "Produce", FAULT, total=900.0, local=890.0)
    slow_at_2 = [rtt(c, w, 2, 905.0) for w in FAULT for c in ("orders", "clicks", "far")]
    got = found(rows, peers() + slow_at_2)
    assert not any(e.startswith("client:") for e in got), got


def test_the_network_in_front_of_one_broker_is_that_brokers_side_not_a_client_link():
    # Every producer waits 800 ms at broker 2 (a delaying proxy in front of it), broker 2
    # logs Produce at 8 ms: most producers slow there, so none of them is its link.
    slow_at_2 = [rtt(c, w, 2, 808.0) for w in FAULT for c in ("orders", "clicks", "far")]
    fast = [rtt("far", w, b, 12.0) for w in ALL for b in (1, 3)]
    assert found(healthy(), peers() + slow_at_2 + fast) == {}
    # A producer writing only to broker 2 (one partition, led by 2) is not blamed either:
    # its peers there are as slow as it is.
    only_2 = [rtt("one-partition", w, 2, 808.0) for w in FAULT]
    assert found(healthy(), peers() + slow_at_2 + fast + only_2) == {}


def test_a_broker_that_logged_no_produce_in_the_window_is_not_judged():
    # Broker 3 frozen: no Produce row for it in the fault windows, its clients' rtt high.
    rows = [r for r in healthy() if not (r.broker == 3 and r.api == "Produce"
                                         and (r.window_start_ms - start(0)) // W in FAULT)]
    frozen = [rtt("far", w, 3, 2500.0) for w in FAULT]
    fast = [rtt("far", w, b, 12.0) for w in ALL for b in (1, 2)]
    assert found(rows, peers(brokers=(1, 2)) + frozen + fast) == {}


def test_consumers_are_not_judged_by_their_rtt():
    # A consumer's rtt is its fetch wait (fetch.wait.max.ms) when there is nothing to read.
    idle = [rtt("reader", w, b, 505.0, kind="consumer") for w in ALL for b in BROKERS]
    assert found(healthy(), peers() + idle) == {}


def test_one_broker_and_no_peer_cannot_tell_the_link_from_the_brokers_network():
    alone = behind_slow_link(brokers=(1,))
    assert found(healthy(), alone) == {}
    # With a healthy peer at that broker, it can.
    assert set(found(healthy(), alone + peers(brokers=(1,)))) == {"client:far-producer"}


def test_two_brokers_without_peers_are_enough():
    assert set(found(healthy(), behind_slow_link(brokers=(1, 3)))) == {"client:far-producer"}


def test_a_broker_the_producer_sent_nothing_is_left_out():
    # librdkafka's window is empty (p99 0) at broker 3: judged on brokers 1 and 2.
    idle_at_3 = [rtt("far-producer", w, 3, 0.0) for w in ALL]
    got = found(healthy(), peers() + behind_slow_link(brokers=(1, 2)) + idle_at_3)
    assert got["client:far-producer"].evidence["brokers"] == [1, 2]


def test_fast_at_one_broker_is_not_a_slow_link():
    # Slow at 1 and 2 but fast at 3: a path to two brokers, not the client's link.
    slow = behind_slow_link(brokers=(1, 2))
    fast = [rtt("far-producer", w, 3, 12.0) for w in ALL]
    assert found(healthy(), peers() + slow + fast) == {}


def test_a_client_both_slow_to_read_and_behind_a_slow_link_is_one_finding():
    sends = [ClientSendWindow("c1", start(w), 1, "far-producer", 2, 3100.0, "Produce",
                              slow_requests=2) for w in FAULT]
    sends += [ClientSendWindow("c1", start(w), 1, c, 200, 0.4, "Produce", slow_requests=0)
              for w in FAULT for c in ("orders", "clicks")]
    got = detect_slow_clients(healthy(), client_rtts=peers() + behind_slow_link(),
                              client_sends=sends, config=CONFIG)
    mine = [d for d in got if d.entity == "client:far-producer"]
    assert [d.cause for d in mine] == ["client_slow_read"]


# ---- the broker's side of a producer's round trips: its own requests ----------------------

def test_a_producer_whose_own_requests_waited_at_the_broker_is_no_slow_link():
    # freeze-short-5b live: the leaders' Produce TP99 over every producer stayed low (most
    # of their requests acks=1), but the acks=all producers' own requests waited on the
    # frozen follower about as long as their round trips: not their links.
    waited = behind_slow_link(p99=3900.0, client="acks-all")
    assert set(found(healthy(), peers() + waited)) == {"client:acks-all"}   # the TP99 alone
    mine = own("acks-all", FAULT, BROKERS, 3800.0)
    assert found(healthy(), peers() + waited, own=mine) == {}


def test_a_slow_link_is_found_against_the_producers_own_requests():
    mine = own("far-producer", ALL, BROKERS, 9.0)
    got = found(healthy(), peers() + behind_slow_link(), own=mine)
    e = got["client:far-producer"].evidence
    assert e["link_ms"] == 811.0
    assert e["per_broker"][0]["own_produce_p99_ms"] == 9.0
    assert "its own Produce requests in 9 ms" in got["client:far-producer"].explanation


def test_own_requests_at_some_brokers_and_the_tp99_at_the_others():
    # Known at broker 1 only (it waited there), the TP99 at 2 and 3: slow at 2 and 3 only,
    # so not slow at every broker judged.
    mine = own("far-producer", FAULT, (1,), 815.0)
    assert found(healthy(), peers() + behind_slow_link(), own=mine) == {}


# ---- the typical round trip: a slow path delays every one, queueing only the tail -------

def test_a_slow_path_shows_in_the_median_round_trip_too():
    # A delaying proxy adds its delay to every round trip: the median as much as the tail.
    mine = own("far-producer", ALL, BROKERS, 9.0, p50=3.0)
    got = found(healthy(), peers() + behind_slow_link(p99=820.0, p50=640.0), own=mine)
    e = got["client:far-producer"].evidence
    assert e["link_ms"] == 637.0                       # 640 - 3: what every trip shows
    assert e["per_broker"][0]["rtt_p50_ms"] == 640.0
    assert e["per_broker"][0]["own_produce_p50_ms"] == 3.0


def test_a_slow_tail_with_a_fast_median_is_queueing_not_a_slow_link():
    # controller-failover-5b live: a producer's rtt p99 561 ms against 151 ms for its own
    # requests at the broker (rolling-restart-dc: 1,368 against 430 ms), its median a few
    # ms: requests pipelined on one connection wait in the broker's socket behind the one
    # it serves (outside their TotalTime), and a descheduled client host shows the same
    # way. Not a path that delays every trip.
    mine = own("far-producer", ALL, BROKERS, 151.0, p50=4.0)
    assert found(healthy(), peers() + behind_slow_link(p99=561.0, p50=9.0), own=mine) == {}
    # Nor when the median is up by less than the threshold.
    assert found(healthy(), peers() + behind_slow_link(p99=900.0, p50=290.0), own=mine) == {}


def test_without_own_request_times_the_median_is_judged_against_the_brokers_tp99():
    # The agents' windows keep no own times for a producer folded into the "other" row:
    # the broker's Produce TP99 (8 ms here) bounds its median for this client from above.
    assert set(found(healthy(), peers() + behind_slow_link(p99=820.0, p50=640.0))) == {
        "client:far-producer"}
    assert found(healthy(), peers() + behind_slow_link(p99=820.0, p50=300.0)) == {}


def test_a_backlogged_connection_is_not_judged_at_that_broker():
    # unclean-noloss-3b live at 38018a1: the producer's rtt p50 at broker 3 was 0.4-2 s,
    # its own requests took 4-10 ms there (p50), and 65-88% of them were read back to back:
    # they had waited in the socket behind the ones before, which no TotalTime shows.
    rtts = behind_slow_link(brokers=(3,), p99=1800.0, p50=900.0)
    mine = own("far-producer", ALL, (3,), p99=260.0, p50=8.0, queued=0.8)
    assert found(healthy(), peers(brokers=(3,)) + rtts, own=mine) == {}
    # The same round trips with its requests spread out (3% read back to back; the far
    # producer of slow-link-3b had 0-6%): a link.
    spread = own("far-producer", ALL, (3,), p99=260.0, p50=8.0, queued=0.03)
    got = found(healthy(), peers(brokers=(3,)) + rtts, own=spread)
    assert set(got) == {"client:far-producer"}
    assert got["client:far-producer"].evidence["brokers_backlogged"] == []


def test_a_backlog_at_one_broker_leaves_the_link_judged_by_the_others():
    rtts = behind_slow_link(p99=820.0, p50=700.0)
    mine = (own("far-producer", ALL, (1, 2), p99=8.0, p50=4.0, queued=0.0)
            + own("far-producer", ALL, (3,), p99=8.0, p50=4.0, queued=0.6))
    got = found(healthy(), peers() + rtts, own=mine)
    e = got["client:far-producer"].evidence
    assert (e["brokers"], e["brokers_backlogged"]) == ([1, 2], [3])
    # Half is enough (BACKLOG_SHARE 0.5); just under it is judged.
    at_half = own("far-producer", ALL, BROKERS, p99=8.0, p50=4.0, queued=0.5)
    assert found(healthy(), peers() + rtts, own=at_half) == {}
    under = own("far-producer", ALL, BROKERS, p99=8.0, p50=4.0, queued=0.49)
    assert found(healthy(), peers() + rtts, own=under)["client:far-producer"].evidence[
        "brokers"] == [1, 2, 3]


def test_round_trips_to_a_broker_a_known_disruption_concerns_are_not_judged():
    """rolling-restart-3b live: a producer's rtt to broker 1 just after its controlled
    restart was 918 ms p99 (median 358 ms) while broker 1 served its Produce requests in
    483 ms, and other producers were fine: paged as a slow link. A restarted broker's
    clients reconnect and refresh their metadata while it warms up: a producer talking to
    a disrupted broker is not judged in that window."""
    from core.outages import BrokerOutage
    from core.disruptions import ReplicaStart

    slow_to_1 = behind_slow_link(brokers=(1,), p99=918.0, p50=358.0)
    assert set(found(healthy(), peers() + slow_to_1)) == {"client:far-producer"}
    restarted = [BrokerOutage("c1", 1, start(LAST - 3), None, "broker_shutdown",
                              back_ms=start(LAST - 2))]
    took_over = [ReplicaStart("c1", 1, start(LAST - 1) + 1_000, "orders", 4, 3, True)]
    for events in (dict(outages=restarted), dict(replica_starts=took_over)):
        assert detect_slow_clients(healthy(), client_rtts=peers() + slow_to_1, config=CONFIG,
                                   **events) == [], events
    # a disruption of a broker it does not talk to, or one long over, leaves it judged
    slow_to_1_3 = behind_slow_link(brokers=(1, 3), p99=918.0, p50=358.0)
    elsewhere = [BrokerOutage("c1", 2, start(LAST - 3), None, "broker_shutdown",
                              back_ms=start(LAST - 2))]
    long_ago = [BrokerOutage("c1", 1, start(0) - 400_000, None, "broker_shutdown",
                             back_ms=start(0) - 300_000)]
    for outages in (elsewhere, long_ago):
        assert [d.entity for d in detect_slow_clients(
            healthy(), client_rtts=peers() + slow_to_1_3, config=CONFIG, outages=outages)] == [
            "client:far-producer"], outages
    # nor is a producer judged on the brokers left when one it talks to is disrupted:
    # its slow trips to broker 3 alone, with no peer seen fine there, say nothing
    assert detect_slow_clients(healthy(), client_rtts=slow_to_1_3, config=CONFIG,
                               outages=restarted) == []


def test_a_broker_slow_for_the_producers_own_requests_cannot_confirm_its_link():
    # freeze-short-3b live at 13529e087660 (follower 2 frozen 0.7 s of every second): at
    # broker 3 the acks=all producers' own requests took 750 ms (p99) waiting on follower
    # 2, their round trips 1,221 ms (p99) and 594 ms (p50) with under half of them read
    # back to back: the requests behind a slow one waited in the socket. Not a link.
    rtts = behind_slow_link(brokers=(3,), p99=1221.0, p50=594.0)
    mine = own("far-producer", ALL, (3,), p99=750.0, p50=250.0, queued=0.3)
    assert found(healthy(), peers(brokers=(3,)) + rtts, own=mine) == {}
    # The same round trips over requests the broker served fast: a link.
    fast = own("far-producer", ALL, (3,), p99=90.0, p50=8.0, queued=0.3)
    assert set(found(healthy(), peers(brokers=(3,)) + rtts, own=fast)) == {
        "client:far-producer"}
