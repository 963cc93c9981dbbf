"""A broker that is out (crashed, shut down, restarting) is not a slow broker: its
outages from the controller's lines (read side: evaluation/inputs/slow_broker.py), and
the slow-broker windows they set aside. The crash is the one the live matrix paged on
(coordinator-failover-3b): kill -9 of a follower, acks=all Produce on the other leaders
waiting 9 s for it until it was fenced."""

from __future__ import annotations

import pytest

from core.findings import AnomalyType
from core.outages import BrokerOutage
from detectors.slow_broker import (
    SlowBrokerSection,
    assess_windows,
    detect_slow_brokers,
)
import dataclasses
from datetime import UTC, datetime

from core.disruptions import Kind, active_in, disruptions_from, subjects
from ingest.broker_log import parse_event
from evaluation.inputs.slow_broker import (BrokerState, BrokerStateChange,
                                              BrokerUnreachable, broker_outages, outages_from,
                                              unreachable_outages)
from tests.unit.test_detector_slow_broker import (
    LAST, T0, W, follower_fetches, healthy, replaced, start)

pytestmark = pytest.mark.unit

S = 9_000       # broker.session.timeout.ms
GRACE = 30_000
CONFIG = SlowBrokerSection(disruption_grace_s=GRACE / 1000)


def change(broker, ms, state, cluster="c1"):
    return BrokerStateChange(cluster, broker, ms, state)


def outages(*changes):
    return broker_outages(changes, session_timeout_ms=S, grace_ms=GRACE)


def in_effect(kind, outs, cluster, start_ms, end_ms, config=CONFIG):
    """The brokers an outage's `kind` of disruption covers in [start_ms, end_ms)."""
    return subjects(active_in(disruptions_from(outs), cluster, start_ms, end_ms,
                              config.disruption_grace_s), kind)


def out_during(outs, cluster, start_ms, end_ms):
    return in_effect(Kind.BROKER_OUT, outs, cluster, start_ms, end_ms)


def warming_during(outs, cluster, start_ms, end_ms, warmup_ms):
    return in_effect(Kind.BROKER_WARMUP, outs, cluster, start_ms, end_ms,
                     dataclasses.replace(CONFIG, disruption_grace_s=warmup_ms / 3000))


def test_a_crash_runs_from_a_session_before_the_fence_to_the_unfence_and_the_grace():
    [o] = outages(change(3, 10_000, BrokerState.FENCED),
                  change(3, 25_000, BrokerState.REGISTERED),
                  change(3, 33_000, BrokerState.UNFENCED))
    assert o == BrokerOutage("c1", 3, 1_000, 63_000, "broker_fenced", back_ms=33_000)


def test_a_controlled_shutdown_starts_at_the_grant_and_a_quick_restart_a_session_back():
    shutdown, quick = outages(
        change(1, 10_000, BrokerState.SHUTDOWN), change(1, 14_000, BrokerState.REGISTERED),
        change(1, 15_000, BrokerState.UNFENCED),
        # restarted within the session timeout: never fenced, registered again
        change(2, 50_000, BrokerState.REGISTERED), change(2, 51_000, BrokerState.UNFENCED))
    assert (shutdown.start_ms, shutdown.end_ms, shutdown.how) == (10_000, 45_000,
                                                                  "broker_shutdown")
    assert (quick.start_ms, quick.end_ms, quick.how) == (41_000, 81_000, "broker_registered")


def test_an_outage_without_an_unfence_is_open_and_an_unfence_alone_is_nothing():
    [o] = outages(change(2, 5_000, BrokerState.UNFENCED),      # the end of an earlier one
                  change(2, 70_000, BrokerState.FENCED))
    assert o.end_ms is None
    assert out_during([o], "c1", 0, 61_000) == set()
    assert out_during([o], "c1", 61_000, 71_000) == {2}
    assert out_during([o], "c2", 61_000, 71_000) == set()


def test_two_outages_of_one_broker_stay_two():
    first, second = outages(change(3, 10_000, BrokerState.FENCED),
                            change(3, 20_000, BrokerState.UNFENCED),
                            change(3, 500_000, BrokerState.SHUTDOWN),
                            change(3, 510_000, BrokerState.UNFENCED))
    assert (first.start_ms, first.end_ms) == (1_000, 50_000)
    assert (second.start_ms, second.end_ms) == (500_000, 540_000)


# --- the detector ------------------------------------------------------------------------------

CRASH = {LAST - 2, LAST - 1, LAST}


def crashed_follower_windows():
    """Broker 3 dead for the last three windows: no request of its own, no fetch at the
    other leaders, whose acks=all Produce waits in Remote for it (9 s before the fence,
    then the restart)."""
    rows = [r for r in healthy()
            if not (r.broker == 3 and (r.window_start_ms - T0) // W in CRASH)]
    for b in (1, 2):
        rows = replaced(rows, b, "Produce", CRASH, total=9000.0, remote=8980.0)
    fetches = follower_fetches(CRASH, {(1, 3): None, (2, 3): None, (3, 1): None, (3, 2): None})
    return rows, fetches


def test_leaders_waiting_on_a_dead_follower_blame_it_when_nothing_says_it_was_out():
    rows, fetches = crashed_follower_windows()
    found = {d.entity: d.cause for d in detect_slow_brokers(rows, follower_fetches=fetches,
                                                            config=CONFIG)}
    assert found["broker:3"] == "slow_follower"


def test_a_follower_the_controller_fenced_is_out_not_slow():
    rows, fetches = crashed_follower_windows()
    fenced = start(LAST - 2) + S - 1_000        # died just inside the first crash window
    out = outages(change(3, fenced, BrokerState.FENCED))
    assert detect_slow_brokers(rows, follower_fetches=fetches, outages=out,
                               config=CONFIG) == []
    last = assess_windows(rows, follower_fetches=fetches, outages=out, config=CONFIG)[-1]
    assert set(last.excused) == {1, 2, 3} and not last.brokers and not last.cluster_wide


def test_an_outage_of_another_broker_excuses_nothing_else():
    """Broker 3 slow in its own right (Local 900 ms) while broker 1 restarts: broker 3 is
    still found, and broker 1's own windows set aside. (With no follower data every broker
    may have taken broker 1's load: a warning then, see the partner tests below.)"""
    rows = replaced(healthy(), 3, "Produce", CRASH, total=910.0, local=900.0)
    rows = replaced(rows, 1, "Produce", CRASH, total=2000.0, local=1990.0)
    out = outages(change(1, start(LAST - 2), BrokerState.SHUTDOWN))
    found = {d.entity: d.type for d in detect_slow_brokers(rows, outages=out, config=CONFIG)}
    assert found == {"broker:3": AnomalyType.SLOW_BROKER}


def test_remote_waits_naming_no_follower_while_a_follower_restarts_are_set_aside():
    """Seen on a rolling restart (rolling-restart-3b): the last broker restarted and caught
    up; the other two leaders' Produce waited 250-700 ms in Remote, their followers'
    fetches too regular to name one. Without the outage: a cluster-wide page."""
    rows = healthy()
    for b in (1, 2):
        rows = replaced(rows, b, "Produce", CRASH, total=700.0, remote=690.0)
    fetches = follower_fetches(CRASH, {})
    before = assess_windows(rows, follower_fetches=fetches, config=CONFIG)[-1]
    assert {v.attribution.cause for v in before.brokers.values()} == {
        "remote_produce_unknown_follower"}
    assert before.cluster_wide
    out = outages(change(3, start(LAST - 2), BrokerState.SHUTDOWN),
                  change(3, start(LAST - 1), BrokerState.UNFENCED))
    assert detect_slow_brokers(rows, follower_fetches=fetches, outages=out,
                               config=CONFIG) == []


# --- the restarted broker's warm-up ------------------------------------------------------------

def restarted_broker_1():
    """Broker 1 shut down in window 2 and unfenced in window 3 (its outage and grace end in
    window 6), then slow on its own stages (Local) in the last three windows, well after
    the grace: a fresh JVM warming up on a loaded host (crash-restart-3b, live)."""
    rows = replaced(healthy(), 1, "Produce", CRASH, total=1200.0, local=1190.0)
    out = outages(change(1, start(2), BrokerState.SHUTDOWN),
                  change(1, start(3), BrokerState.UNFENCED))
    return rows, out


def test_a_restarted_brokers_own_stages_are_set_aside_while_it_warms_up():
    rows, out = restarted_broker_1()
    assert out[0].end_ms == start(6) and out[0].back_ms == start(3)
    assert warming_during(out, "c1", start(LAST), start(LAST) + W, 180_000) == {1}
    assert warming_during(out, "c1", start(3) + 180_000, start(3) + 190_000, 180_000) == set()
    assert warming_during(out, "c2", start(LAST), start(LAST) + W, 180_000) == set()
    assert detect_slow_brokers(rows, outages=out, config=CONFIG) == []
    last = assess_windows(rows, outages=out, config=CONFIG)[-1]
    assert set(last.excused) == {1} and not last.brokers
    # without the warm-up it pages, as it did live
    found = {d.entity: d.cause for d in detect_slow_brokers(
        rows, outages=out, config=dataclasses.replace(CONFIG, disruption_grace_s=0))}
    assert found == {"broker:1": "local_disk_or_page_cache"}


def test_a_restarted_broker_leading_again_while_it_warms_up_is_not_slow():
    """crash-restart-3b live at 2b3b549 (rules e0a2fbe98d90), failed at its first try:
    broker 2, back 90 s before, took its leaderships back (preferred leader election) and
    its acks=all writes waited 410-810 ms in Remote on no follower in particular for three
    windows of its warm-up, paged as a warning remote_produce_unknown_follower. A fresh
    JVM serves its followers' fetches as slowly as its own requests: the warm-up
    explains both."""
    _, out = restarted_broker_1()
    rows = replaced(healthy(), 1, "Produce", CRASH, total=810.0, remote=800.0)
    fetches = fetches_between({(1, 2), (2, 1), (1, 3), (3, 1), (2, 3), (3, 2)})
    assert detect_slow_brokers(rows, follower_fetches=fetches, outages=out,
                               config=CONFIG) == []
    # after its warm-up the same waits are a finding
    found = {d.entity: d.cause for d in detect_slow_brokers(
        rows, follower_fetches=fetches, outages=out,
        config=dataclasses.replace(CONFIG, disruption_grace_s=0))}
    assert found == {"broker:1": "remote_produce_unknown_follower"}


def test_the_warm_up_ends_and_is_only_for_the_restarted_brokers_own_stages():
    rows, out = restarted_broker_1()
    # restarted long before the slow windows: it pages
    early = outages(change(1, start(LAST - 2) - 400_000, BrokerState.SHUTDOWN),
                    change(1, start(LAST - 2) - 190_000, BrokerState.UNFENCED))
    found = {d.entity for d in detect_slow_brokers(rows, outages=early, config=CONFIG)}
    assert found == {"broker:1"}
    # its leaders waiting on it as a follower after the grace still blame it
    rows = healthy()
    for b in (2, 3):
        rows = replaced(rows, b, "Produce", CRASH, total=900.0, remote=890.0)
    fetches = follower_fetches(CRASH, {(2, 1): 880.0, (3, 1): 880.0})
    found = {d.entity: d.cause for d in detect_slow_brokers(
        rows, follower_fetches=fetches, outages=out, config=CONFIG)}
    assert found.get("broker:1") == "slow_follower"


def test_a_warming_follower_a_little_behind_the_others_is_not_named():
    """crash-restart-3b live at 1ad524f: 120 s after broker 2 was unfenced (its grace long
    over) it held leader 1 back 715 ms against 266 ms for the other follower and leader 3
    646 ms against 345 ms, on a host that slowed every broker's Produce: the worst
    follower at both by 1.5x, past WORST_MIN_MS, so both leaders were called its
    victims. A fresh JVM lags like that while it warms up: the margin names nobody then,
    and the leaders' waits that name no follower are set aside. (Standing out by
    peer_ratio, it is still blamed: the test above.)"""
    _, out = restarted_broker_1()
    rows = healthy()
    for b in (2, 3):
        rows = replaced(rows, b, "Produce", CRASH, total=720.0, remote=700.0)
    fetches = follower_fetches(CRASH, {(2, 1): 715.0, (2, 3): 266.0,
                                       (3, 1): 646.0, (3, 2): 345.0})
    assert detect_slow_brokers(rows, follower_fetches=fetches, outages=out,
                               config=CONFIG) == []
    last = assess_windows(rows, follower_fetches=fetches, outages=out, config=CONFIG)[-1]
    assert set(last.excused) == {2, 3} and not last.brokers and not last.cluster_wide
    assert {v.attribution.cause for v in last.excused.values()} == {
        "remote_produce_unknown_follower"}
    # Not warming any more (or no warm-up), the same lags name it, as they did live.
    found = {d.entity: d.cause for d in detect_slow_brokers(
        rows, follower_fetches=fetches, outages=out,
        config=dataclasses.replace(CONFIG, disruption_grace_s=0))}
    assert found == {"broker:1": "slow_follower", "broker:2": "remote_produce_slow_follower",
                     "broker:3": "remote_produce_slow_follower"}


# --- partners loaded by an outage --------------------------------------------------------------

def fetches_between(pairs):
    """Follower fetches (5 ms gaps) in every window for the given (leader, follower) pairs
    only: who shares partitions with whom."""
    return [f for f in follower_fetches(set(), {})
            if (f.leader, f.follower) in pairs]


def partner_slow(slow_windows):
    """Broker 1's request queue slow (handlers saturated) in `slow_windows` while broker 2,
    whose partitions it shares, is out from the first crash window on (never back)."""
    rows = replaced(healthy(), 1, "Produce", slow_windows, total=900.0, rq=890.0)
    out = outages(change(2, start(LAST - 2), BrokerState.SHUTDOWN))
    return rows, out


def test_a_partner_slow_on_its_own_stages_while_a_broker_is_out_is_a_warning_victim():
    rows, out = partner_slow(CRASH)
    fetches = fetches_between({(1, 2), (2, 1), (1, 3), (3, 1), (2, 3), (3, 2)})
    [d] = detect_slow_brokers(rows, follower_fetches=fetches, outages=out, config=CONFIG)
    assert (d.entity, d.cause, d.severity.value, d.suggested_action.value) == (
        "broker:1", "request_handlers_saturated", "warning", "none")
    assert d.evidence["brokers_out"] == ["broker:2"] and d.evidence["role"] == "victim"
    last = assess_windows(rows, follower_fetches=fetches, outages=out, config=CONFIG)[-1]
    assert not last.blamed and not last.cluster_wide
    # without the outage, the page it is
    [d] = detect_slow_brokers(rows, follower_fetches=fetches, config=CONFIG)
    assert (d.severity.value, d.suggested_action.value) == ("high", "move_leadership")


def test_a_partner_slow_while_a_restarted_broker_catches_up_is_a_warning_victim():
    """rolling-restart-3b live at 1ad524f: brokers 1 and 2 paged network_threads_saturated
    130-160 s after broker 3, the last restarted, was unfenced (its grace over), while they
    served its catch-up and its clients came back. Broker 2 back in window 3 (grace over
    in window 6): broker 1 slow on its own stages in windows 7-9, in broker 2's warm-up."""
    rows = replaced(healthy(), 1, "Produce", CRASH, total=900.0, rq=890.0)
    out = outages(change(2, start(2), BrokerState.SHUTDOWN),
                  change(2, start(3), BrokerState.UNFENCED))
    fetches = fetches_between({(1, 2), (2, 1), (1, 3), (3, 1), (2, 3), (3, 2)})
    [d] = detect_slow_brokers(rows, follower_fetches=fetches, outages=out, config=CONFIG)
    assert (d.entity, d.cause, d.severity.value, d.suggested_action.value) == (
        "broker:1", "request_handlers_saturated", "warning", "none")
    assert d.evidence["brokers_back"] == ["broker:2"] and d.evidence["brokers_out"] == []
    # once broker 2's warm-up is over (or with none), the page it is
    [d] = detect_slow_brokers(rows, follower_fetches=fetches, outages=out,
                              config=dataclasses.replace(CONFIG, disruption_grace_s=0))
    assert (d.severity.value, d.suggested_action.value) == ("high", "move_leadership")


def test_a_partner_already_slow_before_the_outage_keeps_its_page():
    rows, out = partner_slow({LAST - 4, LAST - 3, *CRASH})
    fetches = fetches_between({(1, 2), (2, 1), (1, 3), (3, 1), (2, 3), (3, 2)})
    [d] = detect_slow_brokers(rows, follower_fetches=fetches, outages=out, config=CONFIG)
    assert (d.entity, d.severity.value) == ("broker:1", "high")


def test_a_broker_sharing_no_partition_with_the_one_out_keeps_its_page():
    rows, out = partner_slow(CRASH)
    # broker 2 replicates with broker 3 only
    fetches = fetches_between({(1, 3), (3, 1), (2, 3), (3, 2)})
    [d] = detect_slow_brokers(rows, follower_fetches=fetches, outages=out, config=CONFIG)
    assert (d.entity, d.severity.value) == ("broker:1", "high")


# --- the other brokers' view: a broker they cannot connect to -----------------------------------

def unreachable(broker, ms, seen_by=1, cluster="c1"):
    return BrokerUnreachable(cluster, broker, ms, seen_by)


def test_sightings_of_an_unreachable_broker_make_one_outage_per_run():
    first, second = unreachable_outages(
        [unreachable(3, t) for t in (10_000, 11_000, 12_500, 19_000)]     # one run
        + [unreachable(3, 13_000, seen_by=2)]
        + [unreachable(3, 40_000), unreachable(3, 41_000)]                # 21 s later: another
        + [unreachable(1, 50_000, seen_by=1)],                            # itself: nothing
        gap_ms=10_000, grace_ms=GRACE)
    assert first == BrokerOutage("c1", 3, 10_000, 19_000 + GRACE, "broker_unreachable",
                                 back_ms=19_000)
    assert (second.start_ms, second.end_ms, second.back_ms) == (40_000, 41_000 + GRACE, 41_000)


def test_a_partner_slow_while_the_only_controller_is_gone_is_a_warning_victim():
    """throttled-cleaner-3b live: broker 3, the only KRaft controller, killed and restarted;
    no controller logged its fencing before the page, but broker 1's and broker 2's replica
    fetchers logged that they could not connect to it, every second for 34 s."""
    rows = replaced(healthy(), 1, "Produce", CRASH, total=900.0, rq=890.0)
    fetches = fetches_between({(1, 2), (2, 1), (1, 3), (3, 1), (2, 3), (3, 2)})
    gone = [unreachable(3, t, seen_by=b) for t in range(start(LAST - 2), start(LAST) + W, 1_000)
            for b in (1, 2)]
    out = unreachable_outages(gone, gap_ms=10_000, grace_ms=GRACE)
    [d] = detect_slow_brokers(rows, follower_fetches=fetches, outages=out, config=CONFIG)
    assert (d.entity, d.severity.value, d.evidence["brokers_out"]) == (
        "broker:1", "warning", ["broker:3"])
    # what the detector saw before: the page
    [d] = detect_slow_brokers(rows, follower_fetches=fetches, config=CONFIG)
    assert (d.entity, d.severity.value) == ("broker:1", "high")


def test_a_broker_saying_it_shuts_down_is_out_from_its_line():
    """rolling-restart-3b live: broker 3, the only controller's own broker, shut down; no
    controller logged it (the controller was going too), its own server.log did. The other
    leaders' acks=all Produce waited on it as a follower meanwhile."""
    rows, fetches = crashed_follower_windows()
    said = start(LAST - 2) + 500
    at = datetime.fromtimestamp(said / 1000, UTC)
    line = (f"[{at:%Y-%m-%d %H:%M:%S},{said % 1000:03d}] INFO [BrokerServer id=3] Transition "
            "from STARTED to SHUTTING_DOWN (kafka.server.BrokerServer)")
    out = outages_from([parse_event(line, cluster="c1", broker=3, log="server")], CONFIG)
    assert [(o.broker, o.start_ms, o.how) for o in out] == [(3, said, "broker_shutdown")]
    assert detect_slow_brokers(rows, follower_fetches=fetches, outages=out,
                               config=CONFIG) == []


def test_outage_evidence_from_log_events_counts_both_views():
    events = [
        {"cluster": "c1", "broker": 1, "ts_ms": 100_000, "kind": "broker_unreachable",
         "subject_broker": 3},
        {"cluster": "c1", "broker": 3, "ts_ms": 200_000, "kind": "broker_fenced",
         "subject_broker": 2},
        {"cluster": "c1", "broker": 1, "ts_ms": 150_000, "kind": "other",
         "subject_broker": None},
    ]
    found = sorted((o.broker, o.how) for o in outages_from(events, CONFIG))
    assert found == [(2, "broker_fenced"), (3, "broker_unreachable")]
