"""A broker that has just become leader waits on its new followers: its Remote waits that
name no follower are set aside for HANDOVER_GRACES x disruption_grace_s, and its own stages
slowed by the load that moved to it are a warning (core/disruptions.py, detectors/slow_broker/excuses.py).
The case is the one the matrix paged on (rolling-restart-3b): the controller's
preferred-leader election gave broker 3 back 18 partitions and its acks=all Produce TP99
was 1,548 ms, then 843 ms, all Remote, no follower late enough to name."""

from __future__ import annotations

import pytest

from core.findings import AnomalyType
from core.disruptions import ReplicaStart, active_in, disruptions_from, leaderships_taken
from detectors.slow_broker import SlowBrokerSection, assess_windows, detect_slow_brokers
from evaluation.inputs import replica_starts_from
from tests.unit.test_detector_slow_broker import (
    BROKERS, FAULT, HELD, LAST, follower_fetches, healthy, replaced, start)

pytestmark = pytest.mark.unit

CONFIG = SlowBrokerSection()


def new_leaders_during(gains, cluster, start_ms, end_ms, grace_ms):
    """Broker -> partitions it took, of the handovers in effect in [start_ms, end_ms)."""
    grace_s = grace_ms / 500                                          # a handover: 0.5x
    return leaderships_taken(active_in(disruptions_from(starts=gains), cluster, start_ms,
                                       end_ms, grace_s))


def gain(broker, ms, cluster="c1"):
    return ReplicaStart(cluster, broker, ms, "orders", 4)


def new_leader_waiting(stages):
    rows = replaced(healthy(), 3, "Produce", FAULT, **stages)
    return rows, follower_fetches(FAULT, {})


def test_a_new_leaders_remote_wait_naming_no_follower_is_no_slow_broker():
    rows, fetches = new_leader_waiting(dict(total=1548.0, remote=1375.0))
    before = detect_slow_brokers(rows, follower_fetches=fetches, config=CONFIG)
    assert [(d.entity, d.cause) for d in before] == [
        ("broker:3", "remote_produce_unknown_follower")]
    took_over = [gain(3, start(LAST - 1) + 2_000)]
    assert detect_slow_brokers(rows, follower_fetches=fetches, replica_starts=took_over,
                               config=CONFIG) == []


def test_after_the_grace_or_on_another_broker_it_is_judged_as_usual():
    rows, fetches = new_leader_waiting(dict(total=1548.0, remote=1375.0))
    long_ago = [gain(3, start(LAST - 1) - 31_000)]
    other = [gain(2, start(LAST - 1) + 2_000)]
    other_cluster = [gain(3, start(LAST - 1) + 2_000, cluster="c2")]
    for gains in (long_ago, other, other_cluster):
        found = detect_slow_brokers(rows, follower_fetches=fetches, replica_starts=gains,
                                    config=CONFIG)
        assert [d.entity for d in found] == ["broker:3"], gains


def test_a_new_leader_slow_in_its_own_stages_is_a_warning_victim_of_the_handover():
    """crash-restart-3b live: the controller's preferred-leader election gave broker 1 17
    partitions and its response queue went over the threshold in the next windows; the
    detector paged it (and would have moved those leaderships away again)."""
    rows, fetches = new_leader_waiting(dict(total=910.0, local=900.0))
    took_over = [ReplicaStart("c1", 3, start(LAST - 1), "orders", p) for p in range(17)]
    [d] = detect_slow_brokers(rows, follower_fetches=fetches, replica_starts=took_over,
                              config=CONFIG)
    assert (d.entity, d.type, d.cause, d.severity.value, d.suggested_action.value) == (
        "broker:3", AnomalyType.SLOW_BROKER, "local_disk_or_page_cache", "warning", "none")
    assert d.evidence["role"] == "victim" and d.evidence["leaderships_gained"] == 17
    last = assess_windows(rows, follower_fetches=fetches, replica_starts=took_over,
                          config=CONFIG)[-1]
    assert not last.blamed and not last.cluster_wide
    # without the handover, the page it is
    [d] = detect_slow_brokers(rows, follower_fetches=fetches, config=CONFIG)
    assert (d.severity.value, d.suggested_action.value) == ("high", "move_leadership")


def test_a_new_leader_slow_before_its_handover_or_after_the_grace_keeps_its_page():
    rows = replaced(healthy(), 3, "Produce", {LAST - 2, *FAULT}, total=910.0, local=900.0)
    fetches = follower_fetches(FAULT, {})
    during = [gain(3, start(LAST - 1))]           # blamed in the window before: still slow
    long_ago = [gain(3, start(LAST - 1) - 31_000)]
    for gains in (during, long_ago):
        [d] = detect_slow_brokers(rows, follower_fetches=fetches, replica_starts=gains,
                                  config=CONFIG)
        assert (d.entity, d.severity.value) == ("broker:3", "high"), gains


def test_windows_overlapping_the_grace_name_the_new_leader_and_what_it_took():
    g = [gain(3, 100_000), ReplicaStart("c1", 3, 101_000, "orders", 5),
         ReplicaStart("c1", 3, 102_000, "orders", 5)]          # the same partition again
    assert new_leaders_during(g, "c1", 90_000, 100_000, 30_000) == {}
    assert new_leaders_during(g, "c1", 95_000, 105_000, 30_000) == {3: 2}
    assert new_leaders_during(g, "c1", 125_000, 135_000, 30_000) == {3: 2}
    assert new_leaders_during(g, "c1", 131_000, 140_000, 30_000) == {3: 1}
    assert new_leaders_during(g, "c1", 132_000, 140_000, 30_000) == {}


def test_starts_are_a_brokers_own_leader_and_follower_lines():
    def line(broker, new_leader, epoch, ts=1_000, kind="leader_change"):
        return {"cluster": "c1", "broker": broker, "ts_ms": ts, "kind": kind,
                "topic": "orders", "partition": 4, "new_leader": new_leader,
                "leader_epoch": epoch}
    events = [line(3, 3, 7),            # broker 3 took orders-4 over: a handover
              line(1, 3, 7),            # broker 1, a follower, names the new leader
              line(3, 3, 0),            # a new partition's first leader: nothing moved
              line(3, 3, 8, ts=10),     # before the range
              line(3, 3, 9, kind="isr_update"),
              line(2, 3, None)]
    starts = replica_starts_from(events, since_ms=500)
    # the follower line above epoch 0 is neither a handover nor a creation: not kept
    assert starts == [ReplicaStart("c1", 3, 1_000, "orders", 4, 7, True),
                      ReplicaStart("c1", 3, 1_000, "orders", 4, 0, True)]
    assert [(s.is_handover, s.is_creation) for s in starts] == [(True, False), (False, True)]
    assert not ReplicaStart("c1", 1, 1_000, "orders", 4, 7, False).is_handover
    follower_created = replica_starts_from([line(1, 3, 0)], since_ms=500)
    assert [(s.leads, s.is_creation) for s in follower_created] == [(False, True)]


def created(broker, ms, partition=0, leads=True, cluster="c1"):
    return ReplicaStart(cluster, broker, ms, "__transaction_state", partition, 0, leads)


def test_a_broker_slow_in_its_own_stages_while_creating_replicas_is_no_slow_broker():
    """open-transaction-5b live: the first transactional producer made the cluster create
    __transaction_state (50 partitions x 3 replicas); broker 1, leading or following 30
    of them, had its RequestQueue TP99 at 614 then 324 ms in the two windows from the
    creation and was paged as request_handlers_saturated. An operation, not a fault: the
    verdicts are set aside, not made warnings."""
    rows = replaced(healthy(), 1, "Fetch", FAULT, total=614.0, rq=600.0)
    fetches = follower_fetches(FAULT, {})
    [d] = detect_slow_brokers(rows, follower_fetches=fetches, config=CONFIG)
    assert (d.entity, d.cause) == ("broker:1", "request_handlers_saturated")
    creation = [created(1, start(LAST - 1) + 5_700 + i, p, leads=p % 3 == 0)
                for i, p in enumerate(range(30))]
    assert detect_slow_brokers(rows, follower_fetches=fetches, replica_starts=creation,
                               config=CONFIG) == []
    last = assess_windows(rows, follower_fetches=fetches, replica_starts=creation,
                          config=CONFIG)[-1]
    assert not last.blamed and not last.cluster_wide


def test_replicas_created_long_before_or_on_another_broker_explain_nothing():
    rows = replaced(healthy(), 1, "Fetch", FAULT, total=614.0, rq=600.0)
    fetches = follower_fetches(FAULT, {})
    long_ago = [created(1, start(LAST - 1) - 31_000)]
    other = [created(2, start(LAST - 1) + 2_000)]
    moved = [ReplicaStart("c1", 1, start(LAST - 1) + 2_000, "orders", 4, 3, False)]
    for starts in (long_ago, other, moved):
        [d] = detect_slow_brokers(rows, follower_fetches=fetches, replica_starts=starts,
                                  config=CONFIG)
        assert (d.entity, d.severity.value) == ("broker:1", "high"), starts


def test_a_cluster_slow_beyond_the_brokers_creating_replicas_stays_cluster_wide():
    rows = healthy()
    for b in BROKERS:
        rows = replaced(rows, b, "Produce", HELD, total=910.0, local=900.0)
    fetches = follower_fetches(HELD, {})
    one = [created(BROKERS[0], start(LAST - 2) + 1_000)]
    found = detect_slow_brokers(rows, follower_fetches=fetches, replica_starts=one,
                                config=CONFIG)
    assert [d.type for d in found] == [AnomalyType.CLUSTER_WIDE_SLOWNESS]
    every = [created(b, start(LAST - 2) + 1_000) for b in BROKERS]
    assert detect_slow_brokers(rows, follower_fetches=fetches, replica_starts=every,
                               config=CONFIG) == []


def test_one_brokers_creation_lines_a_window_apart_are_two_events():
    lines = [created(3, ms) for ms in (100_000, 104_000, 109_000, 125_000)]
    events = [d for d in disruptions_from(starts=lines)]
    assert [(d.kind.value, d.subject, d.start_ms, d.end_ms, d.partitions) for d in events] == [
        ("replicas_created", 3, 100_000, 109_000, frozenset()),
        ("replicas_created", 3, 125_000, 125_000, frozenset())]
