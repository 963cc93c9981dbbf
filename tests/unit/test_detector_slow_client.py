"""Slow clients judged by their own requests (detectors/slow_client/readers.py), on the
scenarios of test_detector_slow_broker: three brokers, 10-second windows, the fault in
the last two of ten."""

from __future__ import annotations

from dataclasses import replace

import pytest

from core.findings import ActionKind, AnomalyType, EntityKind, Severity
from detectors.slow_broker import ClientSendWindow, Role, assess_windows, detect_slow_brokers
from detectors.slow_client import assess_clients, detect_slow_clients, readers
from detectors.slow_client.readers import slow_count
from tests.unit.test_detector_slow_broker import (
    CONFIG,
    FAULT,
    LAST,
    W,
    healthy,
    replaced,
    start,
)

pytestmark = pytest.mark.unit

# Broker 1's other fetchers: two consumer groups' members and two replica fetchers.
OTHERS = (("billing", 90, False), ("analytics", 90, False), ("broker-2-fetcher-0", 10, True),
          ("broker-3-fetcher-0", 10, True))


def others_at(broker: int, w: int, api: str = "Fetch") -> list[ClientSendWindow]:
    """The broker's healthy fetchers in window w (the adapter gives every client's row
    at a broker/API/window where anyone was slow)."""
    return [ClientSendWindow("c1", start(w), broker, c, n, 0.4, api, slow_requests=0,
                             follower=f) for c, n, f in OTHERS]


def reader(broker: int, w: int, requests: int, slow: int, p99: float = 3100.0,
           client: str = "slow-reader", api: str = "Fetch") -> ClientSendWindow:
    return ClientSendWindow("c1", start(w), broker, client, requests, p99, api,
                            slow_requests=slow)


def slow_reader_sends(windows=FAULT, requests=2, slow=2) -> list[ClientSendWindow]:
    return [x for w in windows for x in [reader(1, w, requests, slow), *others_at(1, w)]]


def found(rows, sends, config=CONFIG):
    return {d.entity: d for d in detect_slow_brokers(rows, client_sends=sends, config=config)
            + detect_slow_clients(rows, client_sends=sends, config=config)}


def test_slow_reader_at_one_percent_of_a_brokers_fetches_is_a_slow_client():
    # 2 of broker 1's 200 fetches a window: its TP99 stays healthy, no broker is suspect.
    rows = healthy()
    got = found(rows, slow_reader_sends())
    assert set(got) == {"client:slow-reader"}
    d = got["client:slow-reader"]
    assert (d.type, d.entity_kind, d.cause, d.suggested_action, d.severity) == (
        AnomalyType.SLOW_CLIENT, EntityKind.CLIENT, "client_slow_read", ActionKind.NONE,
        Severity.WARNING)
    assert (d.first_seen_ms, d.last_seen_ms) == (start(LAST - 1), start(LAST) + W)
    e = d.evidence
    assert (e["brokers"], e["api"], e["requests"], e["slow_requests"], e["send_p99_ms"]) == (
        [1], "Fetch", 2, 2, 3100.0)
    assert e["share_of_broker_requests"] == 0.01
    assert e["per_broker"] == [{"broker": 1, "requests": 2, "slow_requests": 2,
                                "send_p99_ms": 3100.0, "broker_requests": 200,
                                "share_of_broker_requests": 0.01}]
    assert (e["windows_flagged"], e["brokers_left_out"]) == (2, [])
    assert "slow-reader" in d.explanation and d.explanation.endswith(".")
    assert not assess_windows(rows, client_sends=slow_reader_sends(), config=CONFIG)[-1].brokers
    last = assess_clients(rows, client_sends=slow_reader_sends(), config=CONFIG)[-1]
    assert set(last.clients) == {"slow-reader"}


def test_one_slow_request_a_window_is_not_a_slow_client():
    # Every window, 1 of its 3 fetches slow: a hiccup each time, never a slow reader.
    windows = range(LAST + 1)
    assert found(healthy(), slow_reader_sends(windows, requests=3, slow=1)) == {}
    # One slow request alone (all the client sent) is not one either.
    assert found(healthy(), slow_reader_sends(windows, requests=1, slow=1)) == {}


def test_a_busy_client_with_a_few_slow_fetches_reads_fine():
    assert found(healthy(), slow_reader_sends(range(LAST + 1), requests=100, slow=3)) == {}


def test_one_slow_window_does_not_fire_and_recovery_clears():
    assert found(healthy(), slow_reader_sends({LAST})) == {}
    rows = healthy(windows=range(LAST + 3))
    assert set(found(rows, slow_reader_sends())) == set()   # two clear windows since


def test_a_slow_reader_is_judged_over_every_broker_it_reads_from():
    # 1 slow fetch of 1 at broker 1, 1 of 2 at broker 2: 2 of 3, slow. Neither broker
    # alone would show it.
    sends = [x for w in FAULT for x in [reader(1, w, 1, 1), reader(2, w, 2, 1, p99=2900.0),
                                        *others_at(1, w), *others_at(2, w)]]
    got = found(healthy(), sends)
    assert set(got) == {"client:slow-reader"}
    e = got["client:slow-reader"].evidence
    assert (e["brokers"], e["requests"], e["slow_requests"], e["send_p99_ms"]) == (
        [1, 2], 3, 2, 3100.0)


def test_a_replica_fetcher_is_not_a_client():
    sends = [replace(x, follower=True) for x in slow_reader_sends()]
    assert found(healthy(), sends) == {}


def test_clients_slow_at_a_broker_sending_late_to_everyone_are_not_blamed():
    # Broker 1 sent late to every fetcher (a frozen broker, its network): the clients'
    # slow sends there are the broker's, whatever its stage rows say.
    sends = [ClientSendWindow("c1", start(w), 1, c, 3, 2000.0, "Fetch",
                              slow_requests=3, follower=f)
             for w in FAULT for c, _, f in OTHERS] + [reader(1, w, 2, 2) for w in FAULT]
    assert found(healthy(), sends) == {}


def test_without_slow_counts_the_p99_bounds_them():
    old = ClientSendWindow("c1", start(0), 1, "x", 200, 900.0, "Fetch")
    assert slow_count(old, 300.0) == 3          # the p99 of 200 is the 198th: 3 at least
    assert slow_count(replace(old, send_p99_ms=10.0), 300.0) == 0
    assert slow_count(replace(old, requests=4), 300.0) == 1


def test_a_broker_with_throttled_clients_and_a_slow_reader_keeps_its_quota_finding():
    rows = replaced(healthy(), 1, "Produce", FAULT, total=1210.0, throttle=1200.0)
    rows = replaced(rows, 1, "Fetch", FAULT, total=2000.0, send=1500.0)
    sends = slow_reader_sends(requests=6, slow=6)
    last = assess_windows(rows, client_sends=sends, config=CONFIG)[-1]
    assert (last.brokers[1].attribution.role, sorted(last.brokers[1].slow_apis)) == (
        Role.QUOTA, ["Fetch", "Produce"])
    got = found(rows, sends)
    assert {k: (d.type, d.cause) for k, d in got.items()} == {
        "broker:1": (AnomalyType.SLOW_BROKER, "quota_throttled"),
        "client:slow-reader": (AnomalyType.SLOW_CLIENT, "client_slow_read")}


def test_thresholds_and_counts_decide(monkeypatch):
    sends = slow_reader_sends(requests=4, slow=2)
    assert set(found(healthy(), sends)) == {"client:slow-reader"}
    with monkeypatch.context() as m:
        m.setattr(readers, "CLIENT_SLOW_SHARE", 0.75)
        assert found(healthy(), sends) == {}
    with monkeypatch.context() as m:
        m.setattr(readers, "CLIENT_MIN_SLOW", 3)
        assert found(healthy(), sends) == {}
    strict = replace(CONFIG, api_threshold_ms={"FetchConsumer": 5000})
    # The adapter counts against the API's threshold; a p99 under it is no slow reader.
    assert found(healthy(), [replace(x, slow_requests=None) for x in sends], strict) == {}


def test_only_the_windows_persistence_looks_at_are_judged(monkeypatch):
    # Each window is judged on its own: a reader slow before the lookback is no finding,
    # and the windows before it change nothing about one slow in it.
    import detectors.slow_client.detect as detect_module

    rows = healthy()
    early = slow_reader_sends(windows=range(0, 5))
    assert found(rows, early) == {}
    assert found(rows, early + slow_reader_sends()).keys() == found(
        rows, slow_reader_sends()).keys() == {"client:slow-reader"}
    judged = []

    def counting(sends, *args, **kwargs):
        judged.append(1)
        return readers.judge_clients(sends, *args, **kwargs)

    monkeypatch.setattr(detect_module, "judge_clients", counting)
    detect_slow_clients(rows, client_sends=early, config=CONFIG)
    assert len(judged) == CONFIG.persistence_lookback_windows
