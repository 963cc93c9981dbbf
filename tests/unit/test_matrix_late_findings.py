"""A finding handed over after its scenario ended, with evidence from before that
scenario's fault was healed, is scored in that scenario, not the next (matrix/live.py)."""

from __future__ import annotations

import pytest

from matrix.live import ScenarioResult, split_late
from matrix.scenarios import catalog
from matrix.score import score
from matrix.truth import Expect, GroundTruth

pytestmark = pytest.mark.unit

T0 = 1_000_000
HEALED = T0 + 200_000


def finding(entity, cause, first_seen_ms, severity="warning", type_="compaction_lag"):
    return {"type": type_, "entity": entity, "cause": cause, "severity": severity,
            "first_seen_ms": first_seen_ms}


def test_evidence_from_before_the_previous_heal_is_the_previous_scenarios():
    # throttled-cleaner-3b then offsets-deleted-3b, live: broker 3's cleaner still behind
    # after the throttle was lifted; the finding's new reason was handed over in the next
    # scenario with evidence from 115 s before the heal.
    lagging = (HEALED + 97_000, finding("broker:3", "cleaner_falling_behind", HEALED - 25_000))
    own = (HEALED + 130_000, finding("group:g/t-1", "offsets_deleted", HEALED + 120_000,
                                     type_="offset_rewind"))
    assert split_late([lagging, own], HEALED) == ([own], [lagging])
    # the first scenario of a session has none before it
    assert split_late([lagging, own], None) == ([lagging, own], [])


def test_the_previous_scenario_is_scored_again_with_its_late_findings():
    s = next(x for x in catalog() if x.name == "throttled-cleaner-3b")
    truth = GroundTruth(s.name, "compaction", T0,
                        (Expect("cleaner behind", "compaction_lag", "broker:3",
                                ("cleaner_falling_behind",)),))
    seen = [(T0 + 54_000, finding("broker:3", "cleaner_falling_behind", T0 + 1_000))]
    r = ScenarioResult(s, score(truth, seen), T0, HEALED + 90_000, {"seen": []},
                       truth=truth, seen=seen)
    late = [(HEALED + 97_000, finding("broker:3", "cleaner_falling_behind", HEALED - 25_000)),
            (HEALED + 98_000, finding("broker:1", "slow_unattributed", HEALED - 5_000,
                                      type_="slow_broker"))]
    r.late(late)
    assert not r.score.passed
    assert r.score.unexplained == ["warning slow_broker (slow_unattributed) on broker:1"]
    assert len(r.notes["seen"]) == 2 and "after the end" in r.notes["seen"][0]
