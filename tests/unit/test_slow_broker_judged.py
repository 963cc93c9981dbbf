"""Windows judged once (detectors/slow_broker/judged.py): an evaluation keeps the windows
whose inputs are the objects it judged before and judges the rest, from the state before
the first that differs, and finds what judging every window finds."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from core.outages import BrokerOutage
from detectors.slow_broker import (FollowerFetchWindow, RequestStageWindow, SlowBrokerSection,
                                   assess_windows, detect_slow_brokers)
from detectors.slow_broker import detect as detect_module
from detectors.slow_broker.judged import JudgedWindows

pytestmark = pytest.mark.unit

T0 = 1_800_000_000_000
W = 10_000
BROKERS = 12
RANGE = 30          # windows an evaluation judges (its 300-s range)
SLOW_FROM = 25      # broker 5's Produce slow in its Local stage from this window on
CONFIG = SlowBrokerSection()


def fleet(windows: int = 45, seed: int = 3) -> dict[int, tuple[list, list]]:
    """Per window, its stage rows and follower fetches (two followers per leader)."""
    rng = random.Random(seed)
    out = {}
    for w in range(windows):
        t = T0 + w * W
        rows = []
        for b in range(BROKERS):
            for api in ("Produce", "Fetch", "Metadata"):
                slow = 700.0 if b == 5 and api == "Produce" and w >= SLOW_FROM else 0.0
                local = rng.lognormvariate(2, 0.5) + slow
                total = local + 1.0
                rows.append(RequestStageWindow("c", b, api, t, 500, total, 0.1, local, 0.5,
                                               0.0, 0.1, 0.2, total))
        fetches = [FollowerFetchWindow("c", t, b, (b + k) % BROKERS, 20, 500.0 + rng.random(),
                                       0.2) for b in range(BROKERS) for k in (1, 2)]
        out[w] = (rows, fetches)
    return out


def reread(window: tuple[list, list]) -> tuple[list, list]:
    """The window read again: equal rows, new objects (as the read side gives them)."""
    rows, fetches = window
    return [replace(r) for r in rows], [replace(f) for f in fetches]


def evaluation(windows: dict[int, tuple[list, list]], last: int):
    """The inputs of an evaluation whose newest window is `last`."""
    span = [windows[w] for w in range(last - RANGE + 1, last + 1)]
    return ([r for rows, _ in span for r in rows], [f for _, fs in span for f in fs])


def test_sliding_evaluations_judge_the_new_windows_and_find_what_judging_all_finds():
    windows = fleet()
    judged = JudgedWindows()
    for last in range(RANGE - 1, 45):
        # the newest window is new, the one before it read again; the older ones kept
        windows[last - 1] = reread(windows[last - 1])
        rows, fetches = evaluation(windows, last)
        carried = detect_slow_brokers(rows, follower_fetches=fetches, config=CONFIG,
                                      carried=judged)
        whole = detect_slow_brokers(rows, follower_fetches=fetches, config=CONFIG)
        assert carried == whole, last
        assert judged.judged_last() == (RANGE if last == RANGE - 1 else 2)
    assert {d.entity for d in whole} == {"broker:5"}


def test_a_late_row_in_a_kept_window_judges_it_and_every_later_window_again():
    windows = fleet()
    judged = JudgedWindows()
    last = 40
    rows, fetches = evaluation(windows, last)
    first = assess_windows(rows, follower_fetches=fetches, config=CONFIG, judged=judged)
    late = last - 6
    late_rows, late_fetches = windows[late]
    windows[late] = ([*late_rows, RequestStageWindow("c", 99, "Produce", T0 + late * W, 500,
                                                     900.0, 0.1, 899.0)], late_fetches)
    rows, fetches = evaluation(windows, last)
    again = assess_windows(rows, follower_fetches=fetches, config=CONFIG, judged=judged)
    assert judged.judged_last() == 7
    assert [a is b for a, b in zip(first, again)] == [True] * (RANGE - 7) + [False] * 7
    assert again == assess_windows(rows, follower_fetches=fetches, config=CONFIG)


def test_a_disruption_learned_later_reaches_the_windows_already_judged():
    windows = fleet()
    judged = JudgedWindows()
    rows, fetches = evaluation(windows, 40)
    before = detect_slow_brokers(rows, follower_fetches=fetches, config=CONFIG, carried=judged)
    assert {d.entity for d in before} == {"broker:5"}
    # broker 5 restarted just before it was slow: its warm-up explains the slowness
    out = [BrokerOutage("c", 5, T0 + (SLOW_FROM - 2) * W, T0 + 41 * W, "broker_shutdown",
                        T0 + (SLOW_FROM - 1) * W)]
    after = detect_slow_brokers(rows, follower_fetches=fetches, outages=out, config=CONFIG,
                                carried=judged)
    assert judged.judged_last() > 2
    assert after == detect_slow_brokers(rows, follower_fetches=fetches, outages=out,
                                        config=CONFIG)
    assert after != before


def test_an_evaluation_that_failed_leaves_nothing_to_judge_from(monkeypatch):
    windows = fleet()
    judged = JudgedWindows()
    rows, fetches = evaluation(windows, 40)
    assess_windows(rows, follower_fetches=fetches, config=CONFIG, judged=judged)
    windows[39] = reread(windows[39])
    rows, fetches = evaluation(windows, 40)
    real = detect_module.assess_window

    def fails(*args, **kwargs):
        raise RuntimeError("an evaluation that fails half way")

    monkeypatch.setattr(detect_module, "assess_window", fails)
    with pytest.raises(RuntimeError):
        assess_windows(rows, follower_fetches=fetches, config=CONFIG, judged=judged)
    monkeypatch.setattr(detect_module, "assess_window", real)
    assess_windows(rows, follower_fetches=fetches, config=CONFIG, judged=judged)
    assert judged.judged_last() == RANGE


def test_other_settings_judge_every_window_again():
    windows = fleet()
    judged = JudgedWindows()
    rows, fetches = evaluation(windows, 40)
    assess_windows(rows, follower_fetches=fetches, config=CONFIG, judged=judged)
    assess_windows(rows, follower_fetches=fetches, config=CONFIG, judged=judged)
    assert judged.judged_last() == 0
    stricter = replace(CONFIG, threshold_ms=CONFIG.threshold_ms * 2)
    assert (assess_windows(rows, follower_fetches=fetches, config=stricter, judged=judged)
            == assess_windows(rows, follower_fetches=fetches, config=stricter))
    assert judged.judged_last() == RANGE


def test_the_history_forgets_the_windows_judged_again_and_those_out_of_the_range():
    from detectors.slow_broker.rules import History, judge_rows

    rows = fleet()
    history = History()
    for w in range(10):
        history.remember(judge_rows(rows[w][0], history, {}, CONFIG))
    row = rows[10][0][0]
    assert len(history.usual(row, CONFIG.min_requests_per_window)[0]) == 10
    history.forget_from(T0 + 7 * W)
    history.drop_before(T0 + 2 * W)
    assert len(history.usual(row, CONFIG.min_requests_per_window)[0]) == 5
    assert sorted(history.windows[(row.broker, row.api)]) == [T0 + w * W for w in range(2, 7)]
    slow = replace(rows[7][0][0], total_p99_ms=5000.0, local_p99_ms=4999.0)
    history.remember(judge_rows([slow, *rows[7][0][1:]], history, {}, CONFIG))
    assert history.unusual[(slow.broker, slow.api)] == {T0 + 7 * W}
    history.forget_from(T0 + 7 * W)
    assert not history.unusual[(slow.broker, slow.api)]


def test_a_window_judged_again_undoes_what_it_said_of_the_followers_seen():
    from detectors.slow_broker.judged import ClusterJudgements, Judged

    state = ClusterJudgements()
    for w, followers in enumerate(([1, 2], [1], [3])):
        fetches = [FollowerFetchWindow("c", T0 + w * W, 0, f, 20) for f in followers]
        state.windows[T0 + w * W] = Judged((), (), None, state.see(fetches, T0 + w * W))
    assert state.last_seen == {0: {1: T0 + W, 2: T0, 3: T0 + 2 * W}}
    state.forget_from(T0 + W)
    assert state.last_seen == {0: {1: T0, 2: T0}}
    state.drop_before(T0 + W)
    assert state.last_seen == {0: {}} and not state.windows


def test_a_window_the_input_no_longer_has_is_forgotten_with_what_it_taught():
    windows = fleet()
    judged = JudgedWindows()
    rows, fetches = evaluation(windows, 40)
    assess_windows(rows, follower_fetches=fetches, config=CONFIG, judged=judged)
    gone = T0 + 35 * W
    rows = [r for r in rows if r.window_start_ms != gone]
    fetches = [f for f in fetches if f.window_start_ms != gone]
    again = assess_windows(rows, follower_fetches=fetches, config=CONFIG, judged=judged)
    assert judged.judged_last() == 5
    assert again == assess_windows(rows, follower_fetches=fetches, config=CONFIG)
    assert gone not in judged._clusters["c"].windows
