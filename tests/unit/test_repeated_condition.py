"""ingest/repeated_condition.py: a repeating warning is logged at its start and its end."""

from __future__ import annotations

import logging

import pytest

from ingest.repeated_condition import RepeatedCondition

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def conditions(caplog):
    caplog.set_level(logging.DEBUG, logger="test.repeated")
    clock = Clock()
    return RepeatedCondition(logging.getLogger("test.repeated"), clock=clock,
                             remind_after_s=600), clock, caplog


def lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records]


def test_a_condition_every_second_for_a_minute_is_two_lines_with_its_count(conditions):
    c, clock, caplog = conditions
    for second in range(60):
        clock.now = second
        c.occurred("ledger-0", "list_offsets of %s: %s", "ledger-0", "LEADER_NOT_AVAILABLE")
    clock.now = 60
    assert c.ended("ledger-0")
    assert lines(caplog) == [
        "list_offsets of ledger-0: LEADER_NOT_AVAILABLE (logged once until it ends)",
        "list_offsets of ledger-0: LEADER_NOT_AVAILABLE: over after 60 times in 60 s"]
    assert all(r.levelno == logging.WARNING for r in caplog.records)


def test_each_key_is_its_own_condition(conditions):
    c, clock, caplog = conditions
    assert c.occurred("ledger-0", "ledger-0 has no leader")
    assert c.occurred("ledger-1", "ledger-1 has no leader")
    assert not c.occurred("ledger-0", "ledger-0 has no leader")
    assert c.holding() == {"ledger-0", "ledger-1"}
    c.ended("ledger-1")
    assert c.holding() == {"ledger-0"} and len(caplog.records) == 3


def test_an_end_without_a_start_logs_nothing(conditions):
    c, _, caplog = conditions
    assert not c.ended("broker-2")
    assert caplog.records == []


def test_it_starts_again_after_it_ended(conditions):
    c, _, caplog = conditions
    c.occurred("flush", "flush failed")
    c.ended("flush")
    assert c.occurred("flush", "flush failed")
    assert len(caplog.records) == 3 and "over after 1 time in" in lines(caplog)[1]


def test_a_long_condition_is_recalled_with_its_count_and_latest_detail(conditions):
    c, clock, caplog = conditions
    c.occurred("scrape", "scraping %s failed: %s", "broker 2", "timed out")
    for second in range(1, 700):
        clock.now = second
        c.occurred("scrape", "scraping %s failed: %s", "broker 2",
                   "timed out" if second < 650 else "connection refused")
    assert lines(caplog)[1] == "scraping broker 2 failed: timed out: still so, 601 times in 600 s"
    assert len(caplog.records) == 2     # one reminder in 700 s
    clock.now = 700
    c.ended("scrape")
    assert lines(caplog)[2] == ("scraping broker 2 failed: timed out: over after 700 times in "
                                "700 s (latest: scraping broker 2 failed: connection refused)")


def test_the_level_is_the_callers(caplog):
    caplog.set_level(logging.DEBUG, logger="test.repeated")
    c = RepeatedCondition(logging.getLogger("test.repeated"), level=logging.ERROR)
    c.occurred("k", "down")
    c.ended("k")
    assert [r.levelno for r in caplog.records] == [logging.ERROR, logging.ERROR]
