"""Rule 6b (detectors/slow_broker/stalls.py): a stall the brokers share at the same
instants is no one's. Five brokers, 10-s windows, ten healthy windows, then broker 1's
Produce p99 held 450 ms in its request queue in the last four; what the other brokers
held at the instants of its slow requests decides.

The case that shaped it: delayed-broker-5b's live run of 20261206T030311Z, the monitor at
normal priority on the brokers' host (bench/results/failed-recordings/20261206T030311Z).
Every broker held requests 150-720 ms in its own stages at the same instants, every ~10 s
(the pipeline's trigger); broker 5 held the most, two requests 724 ms in ResponseQueue and
then two 446-462 ms, and was paged request_handlers_saturated while the others (160-385 ms
at those instants) stayed under the threshold."""

from __future__ import annotations

from dataclasses import replace

import pytest

from detectors.slow_broker import (HeldRequest, RequestStageWindow, Role, SlowBrokerSection,
                                   assess_windows, detect_slow_brokers)
from detectors.slow_broker.stalls import Holds

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000
W = 10_000
BROKERS = (1, 2, 3, 4, 5)
LAST = 11
CONFIG = SlowBrokerSection()


def produce(b: int, w: int, rq: float = 0.5) -> RequestStageWindow:
    return RequestStageWindow("c1", b, "Produce", T0 + w * W, 600, 8.0 + rq, rq, 4.0, 3.0,
                              0.0, 0.2, 0.3)


def rows(slow=(1,)) -> list[RequestStageWindow]:
    return [produce(b, w, 450.0 if b in slow and w >= LAST - 3 else 0.5)
            for w in range(LAST + 1) for b in BROKERS]


def held(b: int, end_ms: int, held_ms: float, total_ms: float | None = None,
         api: str = "Produce") -> HeldRequest:
    return HeldRequest("c1", b, api, end_ms, total_ms or held_ms + 5.0, held_ms)


def stall(at_ms: int, others: dict[int, float], own: float = 450.0) -> list[HeldRequest]:
    """Broker 1's request held `own` ms, ending at `at_ms`, and each other broker's held
    as given, ending 50 ms later (their spans overlap)."""
    return [held(1, at_ms, own)] + [held(b, at_ms + 50, ms) for b, ms in others.items()]


def slow_windows() -> list[int]:
    return [T0 + w * W + 4_000 for w in range(LAST - 3, LAST + 1)]


def last_verdict(held_requests):
    a = assess_windows(rows(), held_requests=held_requests, config=CONFIG)[-1]
    return a.brokers.get(1), [v for v in a.api_verdicts if v.row.broker == 1][0]


def test_without_requests_kept_whole_the_windows_alone_blame_the_broker():
    verdict, row = last_verdict([])
    assert verdict.attribution.role is Role.CULPRIT
    assert verdict.attribution.cause == "request_handlers_saturated"
    assert not row.shared_stall
    assert [d.entity for d in detect_slow_brokers(rows(), config=CONFIG)] == ["broker:1"]


def test_a_stall_most_other_brokers_held_at_the_same_instants_is_no_ones():
    everyone = {2: 200.0, 3: 180.0, 4: 160.0, 5: 20.0}      # 3 of 4 held >= 450 / 3
    kept = [h for t in slow_windows() for h in stall(t, everyone)]
    verdict, row = last_verdict(kept)
    assert verdict is None and row.shared_stall and not row.suspect
    assert detect_slow_brokers(rows(), held_requests=kept, config=CONFIG) == []


def test_a_broker_that_stands_out_at_its_instant_is_still_the_culprit():
    # the others held 100 ms: a third of 450 is 150, so broker 1 stands out
    kept = [h for t in slow_windows() for h in stall(t, {2: 100.0, 3: 100.0, 4: 100.0,
                                                          5: 100.0})]
    verdict, row = last_verdict(kept)
    assert verdict.attribution.role is Role.CULPRIT and not row.shared_stall
    assert [d.entity for d in detect_slow_brokers(rows(), held_requests=kept,
                                                  config=CONFIG)] == ["broker:1"]


def test_half_the_other_brokers_is_not_most():
    kept = [h for t in slow_windows() for h in stall(t, {2: 200.0, 3: 200.0})]
    verdict, _ = last_verdict(kept)
    assert verdict.attribution.role is Role.CULPRIT


def test_the_others_stalls_must_overlap_the_slow_request():
    # the same holds, but ended 2 s before broker 1's request started
    kept = [held(1, t, 450.0) for t in slow_windows()] + [
        held(b, t - 2_500, 200.0) for t in slow_windows() for b in (2, 3, 4, 5)]
    verdict, _ = last_verdict(kept)
    assert verdict.attribution.role is Role.CULPRIT


def test_one_slow_request_at_an_instant_of_its_own_keeps_the_broker_blamed():
    """Broker 1 slow at a shared instant and again alone in the same window: its own."""
    shared = [h for t in slow_windows() for h in stall(t, {2: 200.0, 3: 200.0, 4: 200.0})]
    alone = [held(1, t + 3_000, 450.0) for t in slow_windows()]
    verdict, _ = last_verdict(shared + alone)
    assert verdict.attribution.role is Role.CULPRIT


def test_only_the_rows_api_and_requests_over_its_threshold_are_its_stalls():
    """A Fetch of broker 1 held alone does not make its Produce its own; a Produce request
    held under the threshold is no stall to judge."""
    shared = [h for t in slow_windows() for h in stall(t, {2: 200.0, 3: 200.0, 4: 200.0})]
    other_api = [held(1, t + 3_000, 900.0, api="Fetch") for t in slow_windows()]
    under = [held(1, t + 3_000, 250.0) for t in slow_windows()]
    verdict, row = last_verdict(shared + other_api + under)
    assert verdict is None and row.shared_stall


def test_a_victim_row_is_not_judged_by_instants():
    """Only rows whose dominant stage is the broker's own: a Remote wait is blame's."""
    slow = [replace(r, total_p99_ms=460.0, request_queue_p99_ms=0.5, remote_p99_ms=450.0)
            if r.broker == 1 and r.window_start_ms >= T0 + (LAST - 1) * W else r
            for r in rows()]
    kept = [h for t in slow_windows() for h in stall(t, {2: 200.0, 3: 200.0, 4: 200.0})]
    a = assess_windows(slow, held_requests=kept, config=CONFIG)[-1]
    assert not [v for v in a.api_verdicts if v.row.broker == 1][0].shared_stall


def test_holds_find_every_request_under_way_in_a_span():
    h = Holds([held(2, 1_000, 100.0, total_ms=900.0), held(2, 5_000, 300.0, total_ms=400.0),
               held(3, 2_000, 50.0)])
    assert h.longest_during(2, 150, 200) == 100.0      # started at 100, ended at 1,000
    assert h.longest_during(2, 1_001, 4_599) == 0.0     # between the two
    assert h.longest_during(2, 4_000, 4_700) == 300.0
    assert h.longest_during(4, 0, 10_000) == 0.0
    assert [x.end_ms for x in h.ended(2, 0, 5_000)] == [1_000]


def test_a_stall_over_the_threshold_on_most_brokers_is_cluster_wide():
    """Every broker held 450 ms at the same instants: no broker's fault, and not silence
    either: the shared stalls count toward cluster-wide."""
    kept = [held(b, t + 10 * b, 450.0) for t in slow_windows() for b in BROKERS]
    found = detect_slow_brokers(rows(slow=BROKERS), held_requests=kept, config=CONFIG)
    assert [(d.type.value, d.entity) for d in found] == [("cluster_wide_slowness",
                                                          "cluster:c1")]
    assert found[0].evidence["brokers_in_shared_stalls"] == list(BROKERS)
    assert "held at the same instants" in found[0].explanation
