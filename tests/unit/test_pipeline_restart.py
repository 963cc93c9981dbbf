"""A streaming query that fails is started again after a backoff, and the run goes on
(jobs/pipeline.py `RestartBackoff`, `Pipeline.restart_failed`). The queries here are
stand-ins with a StreamingQuery's three members that matter (name, isActive,
exception()); that Spark really resumes a restarted query from its checkpoint is
tried on a full lake disk by bench/bench_fault.py."""

from __future__ import annotations

import logging

import pytest

import jobs.pipeline
from jobs.pipeline import Pipeline, RestartBackoff


class Query:
    def __init__(self, name: str):
        self.name, self.isActive, self.error = name, True, None
        self.lastProgress = None

    def fail(self, error: str) -> None:
        self.isActive, self.error = False, RuntimeError(error)

    def exception(self):
        return self.error


class Starter:
    """Starts a new `Query` of one name each call, or raises while `failing` is set."""

    def __init__(self, name: str):
        self.name, self.started, self.failing = name, [], None

    def __call__(self) -> Query:
        if self.failing:
            raise RuntimeError(self.failing)
        q = Query(self.name)
        self.started.append(q)
        return q


def pipeline_of(*names: str) -> tuple[Pipeline, dict[str, Starter]]:
    p = Pipeline(spark=None, lake=None, settings=None)
    starters = {n: Starter(n) for n in names}
    p.queries = [p._launch(None, s) for s in starters.values()]
    return p, starters


def test_the_delay_doubles_up_to_its_cap_and_starts_over_after_a_healthy_run():
    b = RestartBackoff(first_s=10, max_s=300, healthy_s=600)
    b.started("silver", 0)
    delays = []
    t = 0.0
    for _ in range(7):
        t += 1                          # fails a second after each start
        d = b.failed("silver", t)
        delays.append(d)
        t += d
        b.started("silver", t)
    assert delays == [10, 20, 40, 80, 160, 300, 300]
    assert b.failed("silver", t + 600) == 10      # ran 10 min: a new cause, a short wait
    assert b.failed("gold", 5) == 10              # each query has its own count


def test_a_failed_query_waits_its_backoff_then_starts_again_in_its_place(caplog):
    p, starters = pipeline_of("silver", "gold")
    first_silver, gold = p.queries
    first_silver.fail("java.io.IOException: No space left on device\n\tat ...")
    caplog.set_level(logging.INFO, logger="jobs.pipeline")
    t0 = 1_000_000.0

    assert p.restart_failed(now=t0) == []
    assert p.queries[0] is first_silver               # still listed: reported as down
    logged = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert logged == ["query silver failed; starting it again from its checkpoint in 10 s: "
                      "java.io.IOException: No space left on device"]
    assert any("failed, starting again" in line for line in p.progress_lines())

    assert p.restart_failed(now=t0 + 9) == []         # not yet, and not logged again
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 1
    assert p.restart_failed(now=t0 + 10) == ["silver"]
    assert p.queries[0] is starters["silver"].started[-1] is not first_silver
    assert p.queries[0].isActive and p.queries[1] is gold
    assert len(starters["gold"].started) == 1         # the others were left running


def test_a_start_that_fails_is_tried_again_later_with_a_longer_wait(caplog):
    p, starters = pipeline_of("silver")
    p.queries[0].fail("Kafka down")
    t0 = 1_000_000.0
    p.restart_failed(now=t0)                          # 10 s
    starters["silver"].failing = "org.apache.kafka.common.errors.TimeoutException"
    assert p.restart_failed(now=t0 + 10) == []        # the start raised: 20 s more
    assert p.restart_failed(now=t0 + 29) == []
    starters["silver"].failing = None
    assert p.restart_failed(now=t0 + 30) == ["silver"]
    assert any("could not start again; next try in 20 s" in r.getMessage()
               for r in caplog.records)


def test_a_query_stopped_without_an_error_is_left_stopped():
    p, starters = pipeline_of("silver")
    p.queries[0].isActive = False                     # stopped on purpose (Ctrl-C)
    assert p.restart_failed(now=0) == [] and p.restart_failed(now=10_000) == []
    assert len(starters["silver"].started) == 1


def test_check_still_raises_for_runs_that_stop_at_the_first_failure():
    from jobs.pipeline import PipelineFailed

    p, _ = pipeline_of("silver")
    p.queries[0].fail("boom")
    with pytest.raises(PipelineFailed, match="query silver stopped: boom"):
        p.check()


def test_the_log_names_the_root_cause_not_pyspark_s_wrapper(caplog):
    p, _ = pipeline_of("silver")
    p.queries[0].fail(
        "An exception was raised by the Python Proxy. Return Message: Traceback (most "
        "recent call last):\n  File \"x.py\", line 1, in call\n"
        "py4j.protocol.Py4JJavaError: An error occurred while calling o9270.localCheckpoint.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure: ...\n"
        "\tat org.apache.spark.sql.execution.QueryExecution$.withInternalError(x.scala:717)\n"
        "Caused by: java.util.concurrent.ExecutionException: wrapped\n"
        "Caused by: org.apache.kafka.common.errors.TimeoutException: Timeout of 60000ms "
        "expired before the position for partition kmon.broker_metrics-1 could be determined")
    caplog.set_level(logging.INFO, logger="jobs.pipeline")
    p.restart_failed(now=0)
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert line.endswith(": org.apache.kafka.common.errors.TimeoutException: Timeout of "
                         "60000ms expired before the position for partition "
                         "kmon.broker_metrics-1 could be determined")


class Clock:
    """Stands in for the `time` module in jobs.pipeline: sleeping moves it on."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


class Batches(Query):
    """A running query that starts a batch every `every` s, each busy for `busy` s."""

    def __init__(self, name: str, clock: Clock, every: float, busy: float):
        super().__init__(name)
        self.clock, self.every, self.busy = clock, every, busy
        self.stopped_at, self.interrupted = None, False

    def _in_batch(self) -> bool:
        return self.clock.now % self.every < self.busy

    @property
    def status(self):
        return {"isTriggerActive": self._in_batch()}

    def stop(self):
        self.stopped_at, self.interrupted = self.clock.now, self._in_batch()
        self.isActive = False


def test_stop_takes_each_query_between_its_batches_all_at_once(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(jobs.pipeline, "time", clock)
    silver = Batches("silver", clock, every=4, busy=3.5)      # free at 3.5-4, 7.5-8, ...
    gold = Batches("gold", clock, every=10, busy=3)
    detect = Batches("detect", clock, every=10, busy=6)
    p = Pipeline(spark=None, lake=None, settings=None)
    p.queries = [silver, gold, detect]
    p.stop(batch_wait_s=60)
    assert not any(q.interrupted for q in (silver, gold, detect)) and p.queries == []
    # Each at its own first gap: silver is not kept running while detect finishes.
    assert [round(q.stopped_at, 1) for q in (silver, gold, detect)] == [3.6, 3.0, 6.0]


def test_stop_interrupts_a_batch_still_running_after_the_wait(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(jobs.pipeline, "time", clock)
    q = Batches("silver", clock, every=100, busy=99)
    p = Pipeline(spark=None, lake=None, settings=None)
    p.queries = [q]
    p.stop(batch_wait_s=5)
    assert q.interrupted and not q.isActive and round(q.stopped_at) == 5
