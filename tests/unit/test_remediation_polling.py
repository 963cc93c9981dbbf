"""The executor's wait for a change to show: held on several reads in a row, so a broker
still replaying the metadata log cannot end the wait on one read, nor undo it."""

from __future__ import annotations

from remediation.live_cluster import poll_until_held


class FakeTime:
    def __init__(self):
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def answers(*values: bool):
    seq = iter(values)
    calls = []

    def predicate() -> bool:
        calls.append(1)
        return next(seq)
    return predicate, calls


def test_one_read_that_holds_between_two_that_do_not_does_not_end_the_wait():
    t = FakeTime()
    predicate, calls = answers(True, False, True, True, True, False)
    assert poll_until_held("x", predicate, 60, reads=3, clock=t.clock, sleep=t.sleep)
    assert len(calls) == 5


def test_one_read_is_enough_by_default():
    t = FakeTime()
    predicate, calls = answers(False, True)
    assert poll_until_held("x", predicate, 60, clock=t.clock, sleep=t.sleep)
    assert len(calls) == 2


def test_a_change_that_never_holds_long_enough_times_out(caplog):
    t = FakeTime()
    flicker = [True, False] * 100
    predicate, calls = answers(*flicker)
    assert not poll_until_held("leadership off broker 2", predicate, 10, reads=2,
                               clock=t.clock, sleep=t.sleep)
    assert t.now <= 10.5 and len(calls) == 22
    assert "gave up waiting for leadership off broker 2 after 10 s" in caplog.text
