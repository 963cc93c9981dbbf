"""The ablation bench (bench/rule_ablation.py): every mechanism it switches off exists
under the name it patches, and switching one off changes the rules' result on a case
that needs it; `compare` reports what was lost and gained."""

from __future__ import annotations

from contextlib import ExitStack

import pytest

from bench.rule_ablation import _patches, compare
from detectors.slow_broker import detect_slow_brokers
from tests.unit.test_detector_slow_broker import (CONFIG, FAULT, follower_fetches, healthy,
                                                  replaced)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("name", sorted(_patches()))
def test_every_ablation_patches_a_name_that_exists(name):
    with ExitStack() as stack:
        for p in _patches()[name][1]():
            stack.enter_context(p)      # mock.patch raises on a missing attribute


def test_switching_off_the_follower_blame_loses_the_slow_follower():
    rows = healthy()
    for leader in (1, 2):
        rows = replaced(rows, leader, "Produce", FAULT, total=1520.0, remote=1500.0)
    fetches = follower_fetches(FAULT, {(1, 3): 1500.0, (2, 3): 1400.0})
    causes = lambda: {d.entity: d.cause for d in detect_slow_brokers(  # noqa: E731
        rows, follower_fetches=fetches, config=CONFIG)}
    assert causes()["broker:3"] == "slow_follower"
    with ExitStack() as stack:
        for p in _patches()["follower_blame"][1]():
            stack.enter_context(p)
        off = causes()
    # the leaders' waits, explained by no one, are most of the cluster: nobody is named
    assert "broker:3" not in off and "slow_follower" not in off.values()


def test_compare_names_what_a_recording_lost_and_gained():
    def seen(*items):
        return [[t, {"type": "slow_broker", "entity": e, "cause": c, "severity": "high"}]
                for t, e, c in items]
    base = {"a": {"passed": True, "seen": seen((10, "broker:1", "x"))},
            "b": {"passed": True, "seen": seen((10, "broker:2", "y"))}}
    after = {"a": {"passed": True, "seen": seen((10, "broker:1", "x"))},
             "b": {"passed": False, "seen": seen((20, "broker:2", "y"))}}
    assert compare(base, after) == {"b": {
        "passed": False, "lost": [(10, "slow_broker", "broker:2", "y", "high")],
        "gained": [(20, "slow_broker", "broker:2", "y", "high")]}}
