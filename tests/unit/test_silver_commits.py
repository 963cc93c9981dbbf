"""SilverCommits: when the detector query's evaluation may start (jobs/silver_commits.py).

Real threads and a real Condition; only the clock that dates the commits is fake, so
"how long ago" is exact. The waits that must block use short real timeouts."""

from __future__ import annotations

import threading

from jobs.silver_commits import SilverCommits


class FakeClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def batch(batch_id: int, stream: str = "request_stages", query: str = "silver") -> dict:
    return {"query": query, "batch_id": batch_id, "stream": stream, "rows_quarantined": 0}


def test_a_commit_within_the_fresh_window_starts_the_evaluation_at_once():
    clock = FakeClock()
    commits = SilverCommits(clock=clock)
    commits.notice(batch(7))
    clock.t += 0.8
    assert commits.wait_fresh(1.0, timeout_s=5.0) == 0.0


def test_an_older_commit_waits_for_the_next_one():
    clock = FakeClock()
    commits = SilverCommits(clock=clock)
    commits.notice(batch(7))
    clock.t += 6.0                      # the last commit is 6 s old
    waited: list[float] = []
    waiter = threading.Thread(target=lambda: waited.append(commits.wait_fresh(1.0, 30.0)))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive(), "returned before silver committed again"
    clock.t += 4.0                      # the next commit, 4 s into the wait
    commits.notice(batch(8))
    waiter.join(5.0)
    assert not waiter.is_alive()
    assert waited == [4.0]


def test_no_commit_at_all_waits_until_the_timeout_then_evaluates_anyway():
    commits = SilverCommits()           # no telemetry: findings must still resolve
    waited = commits.wait_fresh(1.0, timeout_s=0.2)
    assert 0.15 <= waited < 5.0


def test_one_batch_of_several_streams_is_one_commit():
    commits = SilverCommits()
    for stream in ("request_stages", "broker_logs", "jmx_metrics"):
        commits.notice(batch(3, stream))
    commits.notice(batch(4))
    assert commits.commits == 2


def test_the_slow_silver_query_does_not_count():
    commits = SilverCommits()
    commits.notice(batch(1, "client_stats", query="silver_slow"))
    assert commits.commits == 0
    assert commits.wait_fresh(1.0, timeout_s=0.1) > 0.0   # nothing fresh: it waited


def test_close_ends_a_wait_in_progress_and_later_ones():
    commits = SilverCommits()
    waited: list[float] = []
    waiter = threading.Thread(target=lambda: waited.append(commits.wait_fresh(1.0, 60.0)))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive()
    commits.close()
    waiter.join(5.0)
    assert not waiter.is_alive() and waited[0] < 5.0
    assert commits.wait_fresh(1.0, 60.0) == 0.0


def test_written_since_gives_each_streams_oldest_row_after_the_mark():
    commits = SilverCommits()
    assert commits.written_since(None) == (0, None)      # no mark: not known
    commits.notice({**batch(1), "low_ms": 5_000})
    mark, lows = commits.written_since(0)
    assert lows == {"request_stages": 5_000}
    commits.notice({**batch(2), "low_ms": 9_000})
    commits.notice({**batch(2, stream="follower_fetch_windows"), "low_ms": 3_000})
    commits.notice({**batch(3), "low_ms": 7_000})
    commits.notice({**batch(3, query="silver_slow"), "low_ms": 1_000})   # not this query's
    commits.notice(batch(4))                                           # no valid rows
    mark2, lows = commits.written_since(mark)
    assert lows == {"request_stages": 7_000, "follower_fetch_windows": 3_000}
    assert commits.written_since(mark2) == (mark2, {})


def test_written_since_a_mark_older_than_what_is_kept_is_not_known(monkeypatch):
    import jobs.silver_commits as sc

    monkeypatch.setattr(sc, "WRITTEN_KEPT", 3)
    commits = SilverCommits()
    mark, _ = commits.written_since(0)
    for i in range(5):
        commits.notice({**batch(i), "low_ms": 1_000 * i})
    assert commits.written_since(mark)[1] is None
    assert commits.written_since(3)[1] == {"request_stages": 3_000}
    assert commits.written_since(1)[1] is None     # row 2 was forgotten
