"""jobs/write_behind.py: one background job at a time, in order; a failure surfaces at the
next submit or drain, named. Plain threads (no SparkContext: InheritableThread then
behaves as threading.Thread)."""

from __future__ import annotations

import threading

import pytest

from jobs.write_behind import BackgroundJobFailed, WriteBehind

pytestmark = pytest.mark.unit


def test_a_job_runs_in_the_background_while_the_caller_goes_on():
    release, ran = threading.Event(), []
    w = WriteBehind("q")

    def job():
        release.wait(5)
        ran.append("first")

    w.submit("first", job)
    assert w.busy() and ran == []          # submit returned with the job still running
    release.set()
    w.drain()
    assert ran == ["first"] and not w.busy()


def test_the_next_submit_waits_for_the_job_in_flight_so_jobs_never_overlap():
    release, order = threading.Event(), []
    in_flight = []
    w = WriteBehind("q")

    def job(name, wait=None):
        def run():
            in_flight.append(name)
            assert len(in_flight) == 1, f"{name} overlapped {in_flight}"
            if wait is not None:
                wait.wait(5)
            order.append(name)
            in_flight.remove(name)
        return run

    release_b = threading.Event()
    w.submit("a", job("a", release))
    threading.Timer(0.2, release.set).start()
    w.submit("b", job("b", release_b))      # blocks until "a" ended
    assert order == ["a"] and w.busy()
    release_b.set()
    w.drain()
    assert order == ["a", "b"]


def test_a_failed_job_is_raised_by_the_next_submit_which_then_runs_nothing():
    w = WriteBehind("detect_anomalies")
    ran = []

    def fail():
        raise OSError("disk full")

    w.submit("writing the findings of the evaluation at 5", fail)
    with pytest.raises(BackgroundJobFailed, match=r"detect_anomalies: writing the findings "
                       r"of the evaluation at 5 failed: disk full") as e:
        w.submit("next", lambda: ran.append("next"))
    assert isinstance(e.value.__cause__, OSError)
    assert ran == []
    w.drain()                               # raised once: cleared
    w.submit("after", lambda: ran.append("after"))
    w.drain()
    assert ran == ["after"]


def test_drain_raises_the_failure_and_a_timeout_leaves_the_job_running():
    w = WriteBehind("q")
    w.submit("bad", lambda: 1 / 0)
    with pytest.raises(BackgroundJobFailed, match="q: bad failed: division by zero"):
        w.drain()
    release = threading.Event()
    w.submit("slow", lambda: release.wait(5))
    with pytest.raises(TimeoutError, match="q: slow still running after 0 s"):
        w.drain(timeout_s=0.1)
    assert w.busy()
    release.set()
    w.drain()
    assert not w.busy()


def test_a_drain_from_another_thread_while_a_job_is_being_started_does_not_fail(
        monkeypatch):
    """`DetectorQuery.stop()` drains in the caller's thread while the query's thread may be
    in `submit`. A drain that sees the job after the thread object exists and before it has
    started must not join it (CI: "cannot join thread before it is started"). The thread
    class holds its start() until a drain from another thread has run."""
    import pyspark.util

    drained, errors = threading.Event(), []

    class HeldThread(threading.Thread):
        def start(self):
            def drain_elsewhere():
                try:
                    w.drain()
                except BaseException as e:  # noqa: BLE001 - the test's subject
                    errors.append(e)
                drained.set()
            threading.Thread(target=drain_elsewhere).start()
            assert drained.wait(5)
            super().start()

    monkeypatch.setattr(pyspark.util, "InheritableThread", HeldThread)
    ran = []
    w = WriteBehind("q")
    w.submit("job", lambda: ran.append(1))
    w.drain()
    assert errors == [] and ran == [1]
