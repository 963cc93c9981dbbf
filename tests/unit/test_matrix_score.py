"""Scoring findings against a scenario's ground truth (matrix/score.py, matrix/truth.py)."""

from __future__ import annotations

import pytest

from matrix.score import class_table, score
from matrix.truth import Expect, GroundTruth

pytestmark = pytest.mark.unit

T0 = 1_000_000


def finding(type_, entity, cause="", severity="high"):
    return {"type": type_, "entity": entity, "cause": cause, "severity": severity}


CULPRIT = Expect("slow broker 2", "slow_broker", "broker:2", ("slow_follower",))
VICTIMS = Expect("victims", "slow_broker", r"broker:(?!2$)\d+", ("remote_produce_slow_follower",))
TRUTH = GroundTruth("freeze", "slow_broker", T0, (CULPRIT,), (VICTIMS,))


def test_found_in_time_with_its_victims_passes():
    s = score(TRUTH, [(T0 + 30_000, finding("slow_broker", "broker:2", "slow_follower")),
                      (T0 + 31_000, finding("slow_broker", "broker:1",
                                            "remote_produce_slow_follower"))])
    assert s.passed and s.seconds == 30.0 and not s.unexplained


def test_cluster_wide_instead_of_the_culprit_fails_twice():
    s = score(TRUTH, [(T0 + 20_000, finding("cluster_wide_slowness", "cluster:local",
                                            "cluster_wide_slowness"))])
    assert not s.passed
    assert s.failures() == ["slow broker 2: not found",
                            "unexplained: high cluster_wide_slowness (cluster_wide_slowness) "
                            "on cluster:local"]


def test_wrong_cause_is_found_but_fails_and_is_unexplained():
    s = score(TRUTH, [(T0 + 20_000, finding("slow_broker", "broker:2", "remote_wait"))])
    e = s.expects[0]
    assert e.found and not e.cause_ok and not s.passed
    assert len(s.unexplained) == 1


def test_a_later_right_finding_counts_from_its_own_time():
    s = score(TRUTH, [(T0 + 20_000, finding("slow_broker", "broker:2", "remote_wait")),
                      (T0 + 50_000, finding("slow_broker", "broker:2", "slow_follower"))])
    assert s.expects[0].cause_ok and s.expects[0].seconds == 50.0
    assert s.unexplained == ["high slow_broker (remote_wait) on broker:2"]


def test_too_late_fails():
    s = score(TRUTH, [(T0 + 61_000, finding("slow_broker", "broker:2", "slow_follower"))])
    assert not s.passed and s.failures() == ["slow broker 2: found after 61 s (> 60 s)"]


def test_a_victim_with_the_culprits_number_is_not_explained():
    s = score(TRUTH, [(T0 + 10_000, finding("slow_broker", "broker:2", "slow_follower")),
                      (T0 + 10_000, finding("slow_broker", "broker:2",
                                            "remote_produce_slow_follower"))])
    assert len(s.unexplained) == 1


def test_severity_is_part_of_the_truth():
    t = GroundTruth("no-loss", "unclean_election", T0,
                    (Expect("election", "unclean_election", "ledger-0", (),
                            ("warning", "info")),))
    assert score(t, [(T0, finding("unclean_election", "ledger-0", severity="warning"))]).passed
    s = score(t, [(T0, finding("unclean_election", "ledger-0", severity="critical"))])
    assert not s.passed and not s.expects[0].severity_ok


def test_healthy_passes_only_with_nothing_found():
    t = GroundTruth("rolling-restart", "healthy", T0)
    assert score(t, []).passed
    s = score(t, [(T0 + 5, finding("unclean_election", "orders-1", severity="critical"))])
    assert not s.passed and s.seconds is None


def test_truth_round_trips_through_json():
    assert GroundTruth.from_json(TRUTH.to_json()) == TRUTH


def test_class_table():
    a = score(TRUTH, [(T0 + 30_000, finding("slow_broker", "broker:2", "slow_follower"))])
    b = score(TRUTH, [(T0 + 50_000, finding("slow_broker", "broker:2", "slow_follower")),
                      (T0 + 1, finding("offset_rewind", "group:g/t-0"))])
    c = score(TRUTH, [])
    [row] = class_table([a, b, c])
    assert row == {"fault_class": "slow_broker", "scenarios": 3, "passed": 1, "p50_s": 40.0,
                   "max_s": 50.0, "unexplained": 1}


def test_time_to_detect_is_split_at_first_seen():
    f = {**finding("slow_broker", "broker:2", "slow_follower"), "first_seen_ms": T0 + 10_000}
    e = score(TRUTH, [(T0 + 45_000, f)]).expects[0]
    assert (e.seconds, e.seen_from_s) == (45.0, 10.0)


def test_time_to_detect_is_split_at_the_evaluation_that_found_it():
    f = {**finding("slow_broker", "broker:2", "slow_follower"), "first_seen_ms": T0 + 10_000,
         "evaluated_ms": T0 + 41_500}
    e = score(TRUTH, [(T0 + 45_000, f)]).expects[0]
    assert (e.seen_from_s, e.evaluated_from_s, e.seconds) == (10.0, 41.5, 45.0)
    assert score(TRUTH, [(T0 + 45_000, finding("slow_broker", "broker:2", "slow_follower"))]
                 ).expects[0].evaluated_from_s is None


def test_the_doc_table_shows_the_split():
    from matrix.results import _md_rows
    f = {**finding("slow_broker", "broker:2", "slow_follower"), "first_seen_ms": T0 + 10_000,
         "evaluated_ms": T0 + 41_500}
    s = score(TRUTH, [(T0 + 45_000, f)])
    row = next(r for r in _md_rows({"scenarios": [{**s.to_json(), "topology": "3b-1c"}],
                                    "classes": class_table([s])}) if "3b-1c" in r)
    assert "| 45 s | 10 s | 42 s |" in row


def test_a_state_taken_back_later_is_still_a_page_on_call_saw():
    """Live crash-rf1-dc: solo-1 was first handed over as a critical unclean election
    ("the lost range is not known yet"), then as the expected warning; the latest state
    alone passed the scenario."""
    t = GroundTruth("crash", "unclean_election", T0,
                    (Expect("sole replica back", "unclean_election", r"solo-\d+",
                            ("last_in_sync_replica_elected",), ("warning",)),))
    latest = finding("unclean_election", "solo-1", "last_in_sync_replica_elected", "warning")
    assert score(t, [(T0, latest)]).passed
    flip = {**latest, "states": [{"severity": "critical", "cause": "unclean_leader_election"},
                                 {"severity": "warning",
                                  "cause": "last_in_sync_replica_elected"}]}
    s = score(t, [(T0, flip)])
    assert not s.passed and s.expects[0].passed
    assert s.unexplained == ["critical unclean_election (unclean_leader_election) on solo-1 "
                             "(later warning unclean_election (last_in_sync_replica_elected) "
                             "on solo-1)"]
    same = {**latest, "states": [{"severity": "warning",
                                  "cause": "last_in_sync_replica_elected"}]}
    assert score(t, [(T0, same)]).passed


def test_an_interim_state_the_truth_names_is_allowed_before_the_last_only():
    """unclean-noloss-3b: critical until the old leader is back (nothing bounded what it
    had acknowledged before), then the expected warning."""
    settled = Expect("nothing lost", "unclean_election", "ledger-0", (), ("warning",))
    unsure = Expect("loss not ruled out yet", "unclean_election", "ledger-0",
                    ("unclean_leader_election",), ("critical",))
    t = GroundTruth("noloss", "unclean_election", T0, (settled,), interim=(unsure,))
    last = finding("unclean_election", "ledger-0", "unclean_leader_election", "warning")
    first = {"severity": "critical", "cause": "unclean_leader_election"}
    assert score(t, [(T0, {**last, "states": [first]})]).passed
    # As the last state, an interim one is still a wrong severity, not a pass.
    s = score(t, [(T0, {**last, **first})])
    assert not s.passed and not s.expects[0].severity_ok
    # Without it in the truth, the earlier critical is a false page.
    bare = GroundTruth("noloss", "unclean_election", T0, (settled,))
    assert not score(bare, [(T0, {**last, "states": [first]})]).passed
    assert GroundTruth.from_json(t.to_json()) == t
