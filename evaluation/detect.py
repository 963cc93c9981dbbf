"""Run the detectors over the lake and keep their findings in gold.anomalies.

One evaluation at `now_ms` (`evaluate`):

1. read the inputs of [now - lookback, now) (evaluation/inputs/: DuckDB over the
   Delta tables aggregates, only small rows come back);
2. run the detectors (detectors/registry.py `run_detectors`: pure, one loop over them);
3. read the findings of gold.anomalies that are still open, or resolved within
   correlation.chain_window_s, and first seen at or before now (`read_findings`; the
   detector query keeps the last evaluation's result instead, `carried_findings`);
4. `update_findings` turns the detections into findings with a lifecycle (refresh, open,
   resolve), then `correlate` links them into incidents;
5. MERGE the rows that changed into gold.anomalies by finding_id (`write_findings`).

Finding ids are hashes of what was seen and when, never of when it was evaluated, so an
evaluation repeated (a restarted query, a replay) writes the same rows again: the table
stays one row per finding. gold.anomalies has the columns of `Finding.to_row` plus
``date`` (the UTC date of first_seen, the partition column; first_seen never changes for
an id, so neither does a row's partition).

Three ways to run it:

- `start_detector_query`: a streaming query that evaluates on every trigger, with a
  ``rate`` source as its clock tick: every micro-batch evaluates, new telemetry or not,
  so findings also resolve when the signal stops. In `kmon run` a tick first waits for
  the silver query's next commit (`wait_for_data`, jobs/silver_commits.py), so the
  evaluation reads the freshest silver. ``on_findings(findings, now_ms)`` is
  called in each evaluation once the findings are known, before they are written (the
  exporter's ``KmonExporter.set_findings``): an alert does not wait for the MERGE. The
  slow rest (``in_background``: the remediation decision step; then the MERGE) runs in a
  write-behind thread (jobs/write_behind.py) while the next evaluation reads.
- `evaluate`: one evaluation (tests, a CLI command).
- `replay`: batch mode over any historic range, evaluating at each step's end; the same
  ids as a live run with the same evaluation times.

`now_ms` always comes from the caller or a clock passed in (`system_clock_ms` is only the
default clock of the streaming query).
"""

from __future__ import annotations

import datetime as dt
import functools
import gc
import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from core.config_keys import ConfigError
from core.findings import Detection, Finding, Status, sort_findings, update_findings
from detectors.compaction_lag import CompactedTopicConfig
from detectors.correlation import correlate
from detectors.registry import run_detectors
from infra.lake import Lake, skipping_properties
from infra.lake_sql import LakeSql, delta_uri
from evaluation.config import DetectionConfig
from evaluation.inputs import (BaselineCache, CommitSeedCache, DetectorInputs, WindowReadCache,
                                  check_config, read_inputs)
from evaluation.inputs.window_cache import Written
from evaluation.slow_requests import attach_slow_requests
from jobs.write_behind import BackgroundJobFailed, WriteBehind
from schemas.anomalies import ANOMALY_SCHEMA

log = logging.getLogger(__name__)

ANOMALIES_TABLE = "anomalies"
QUERY_NAME = "detect_anomalies"
# What one evaluation reads. It must hold slow_broker.persistence_lookback_windows closed
# windows after gold's watermark delay (and MIN_HISTORY_WINDOWS more when there is no
# hour of gold.request_stages_1m yet), and the evidence windows of the other detectors.
DEFAULT_LOOKBACK_S = 300.0
DEFAULT_TRIGGER = {"processingTime": "10 seconds"}
DETECT_POOL = "detect"

def system_clock_ms() -> int:
    """The wall clock, epoch ms: the streaming query's default clock."""
    return time.time_ns() // 1_000_000


# --- pure steps ------------------------------------------------------------------------------

def next_findings(previous: Iterable[Finding], detections: Iterable[Detection],
                  config: DetectionConfig, now_ms: int) -> list[Finding]:
    """The lifecycle, then correlation: this evaluation's findings."""
    updated = update_findings(previous, detections, now_ms=now_ms, config=config.findings)
    return sort_findings(correlate(updated, config.correlation))


def changed_findings(previous: Iterable[Finding], current: Iterable[Finding]) -> list[Finding]:
    """The findings whose row differs from what the table holds (compared as rows, so
    evidence that went through JSON compares equal to the same evidence fresh)."""
    before = {f.finding_id: f.to_row() for f in previous}
    return [f for f in current if before.get(f.finding_id) != f.to_row()]


def replay_times(start_ms: int, end_ms: int, step_s: float) -> list[int]:
    """Evaluation times of a replay: the end of each step of [start_ms, end_ms); the last
    step may be shorter."""
    step_ms = int(step_s * 1000)
    if step_ms <= 0:
        raise ValueError(f"replay step must be positive, got {step_s!r} s")
    if end_ms <= start_ms:
        raise ValueError(f"empty replay range [{start_ms}, {end_ms})")
    times = list(range(start_ms + step_ms, end_ms, step_ms))
    return times + [end_ms]


def finding_row(f: Finding) -> dict:
    """A gold.anomalies row: `Finding.to_row` plus its partition date."""
    day = dt.datetime.fromtimestamp(f.first_seen_ms / 1000, tz=dt.timezone.utc).date()
    return {**f.to_row(), "date": day}


# --- the table -------------------------------------------------------------------------------

def ensure_anomalies_table(spark: SparkSession, path: str) -> None:
    from delta.tables import DeltaTable

    if not DeltaTable.isDeltaTable(spark, path):
        (spark.createDataFrame([], ANOMALY_SCHEMA).write.format("delta")
         .options(**skipping_properties(ANOMALY_SCHEMA.fieldNames()))
         .partitionBy("date").save(path))


def read_findings(spark: SparkSession, path: str, now_ms: int,
                  config: DetectionConfig) -> list[Finding]:
    """The findings an evaluation at now_ms starts from: open ones, and those resolved
    within the correlation window (correlation may still link them), first seen by now
    (a replay over a range already evaluated sees the table as it was). The same rule as
    `carried_findings`, applied to the table."""
    from delta.tables import DeltaTable

    if not DeltaTable.isDeltaTable(spark, path):
        return []
    chain_ms = int(config.correlation.chain_window_s * 1000)
    rows = (spark.read.format("delta").load(path)
            .where((F.col("first_seen_ms") <= now_ms)
                   & ((F.col("status") == Status.OPEN.value)
                      | (F.col("resolved_ms") >= now_ms - chain_ms)))
            .drop("date").collect())
    return [Finding.from_row(r.asDict()) for r in rows]


def carried_findings(findings: Iterable[Finding], now_ms: int,
                     config: DetectionConfig) -> list[Finding]:
    """What `read_findings` would read at now_ms from a table whose rows are `findings`
    (an evaluation's result, all of it written): the detector query starts each
    evaluation from the last one's result instead of reading gold.anomalies again."""
    chain_ms = int(config.correlation.chain_window_s * 1000)
    return [f for f in findings
            if f.first_seen_ms <= now_ms
            and (f.status is Status.OPEN
                 or (f.resolved_ms is not None and f.resolved_ms >= now_ms - chain_ms))]


def write_findings(spark: SparkSession, path: str, findings: Iterable[Finding]) -> int:
    """MERGE the findings into the table by finding_id; returns how many rows were sent."""
    from delta.tables import DeltaTable

    rows = [finding_row(f) for f in findings]
    if not rows:
        return 0
    ensure_anomalies_table(spark, path)
    source = spark.createDataFrame(rows, ANOMALY_SCHEMA)
    # The dates as literals too: Delta prunes the table's other days before it looks for
    # matches (a join condition alone makes it scan every day the table holds).
    days = ", ".join(f"DATE'{d.isoformat()}'" for d in sorted({r["date"] for r in rows}))
    (DeltaTable.forPath(spark, path).alias("t")
     .merge(source.alias("s"),
            f"t.date IN ({days}) AND t.date = s.date AND t.finding_id = s.finding_id")
     .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())
    return len(rows)


# --- running ---------------------------------------------------------------------------------

@dataclass
class Assessment:
    """What one evaluation found, before anything is written: its findings, the rows of
    gold.anomalies they change, and where the time went."""
    now_ms: int
    findings: list[Finding]
    changed: list[Finding]
    detections: int
    input_counts: dict
    assessed_s: float
    read_s: dict            # each read's wall seconds (they overlap)
    data_wait_s: float | None = None   # waited for silver's commit before it began

    def log(self, *, handed_s: float, written: int, written_s: float,
            waited_s: float | None = None, decided: bool = False) -> None:
        """The evaluation's log line. `waited_s`: the write ran in the background after
        waiting that long for the previous one; `decided`: the decision step ran with it
        (its time is in `written_s`)."""
        background = ("" if waited_s is None else
                      f"then in the background after {waited_s:.1f} s waiting: "
                      f"{'decided and ' if decided else ''}")
        total = self.assessed_s + handed_s + written_s
        waited = ("" if self.data_wait_s is None else
                  f"after {self.data_wait_s:.1f} s waiting for silver's commit, ")
        log.info("detectors at %d: %d detections, %d findings (%d open), %d rows written in "
                 "%.1f s (%sassessed in %.1f s, handed over in %.1f s, %swritten in %.1f s); "
                 "inputs %s; reads (s) %s", self.now_ms, self.detections, len(self.findings),
                 sum(f.status is Status.OPEN for f in self.findings), written, total,
                 waited, self.assessed_s, handed_s, background, written_s, self.input_counts,
                 self.read_s)


@contextmanager
def cyclic_gc_paused():
    """CPython's cyclic garbage collector paused for the block, as it was after it. An
    evaluation makes hundreds of thousands of short-lived objects (rows, inputs,
    verdicts) with no reference cycles, which reference counting frees; each burst of
    them set off collections that walked the whole heap, a third of the rules' time at
    2,000 brokers. Cycles made meanwhile are collected once it resumes."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def assess(spark: SparkSession, lake: Lake, config: DetectionConfig, now_ms: int,
           lookback_s: float = DEFAULT_LOOKBACK_S, *, table: str = ANOMALIES_TABLE,
           topic_configs: Iterable[CompactedTopicConfig] = (),
           previous: Iterable[Finding] | None = None,
           baseline_cache: BaselineCache | None = None,
           window_cache: WindowReadCache | None = None,
           commit_seed: CommitSeedCache | None = None,
           sql: LakeSql | None = None,
           on_inputs: Callable[[int, DetectorInputs], None] | None = None,
           carried: dict | None = None) -> Assessment:
    """Steps 1-4 of an evaluation at now_ms over [now - lookback, now): read, detect, the
    lifecycle and correlation. Writes nothing.

    `previous`: the result of the last evaluation of this table by the caller, when the
    caller is the table's only writer (the detector query); None reads the table.
    `baseline_cache`: the caller's (the detector query's) slow-broker baselines;
    `window_cache`: its window reads, the older windows kept (evaluation/inputs/window_cache.py);
    `commit_seed`: its commits' starting positions (partition_signals.CommitSeedCache);
    `sql`: its reader of the lake without the JVM (infra/lake_sql.py; None: one for this
    evaluation); `on_inputs(now_ms, inputs)`: called with what was read (a replay keeps
    them, to run the detectors again without Spark: matrix/corpus.py `rescore`);
    `carried`: what the detectors carry between its evaluations (registry.Detector), kept
    and updated."""
    check_config(config)
    started = time.monotonic()
    path = lake.table("gold", table)
    own_sql = sql is None
    sql = LakeSql(lake) if own_sql else sql
    try:
        with cyclic_gc_paused():
            inputs = read_inputs(lake, config, now_ms - int(lookback_s * 1000), now_ms,
                                 topic_configs, baseline_cache=baseline_cache,
                                 window_cache=window_cache, commit_seed=commit_seed, sql=sql)
            if on_inputs is not None:
                on_inputs(now_ms, inputs)
            detections = attach_slow_requests(sql, run_detectors(inputs, config, now_ms,
                                                                    carried=carried))
    finally:
        if own_sql:
            sql.close()
    previous = (read_findings(spark, path, now_ms, config) if previous is None
                else carried_findings(previous, now_ms, config))
    findings = next_findings(previous, detections, config, now_ms)
    return Assessment(now_ms, findings, changed_findings(previous, findings), len(detections),
                      inputs.counts(), time.monotonic() - started, dict(inputs.read_s))


def evaluate(spark: SparkSession, lake: Lake, config: DetectionConfig, now_ms: int,
             lookback_s: float = DEFAULT_LOOKBACK_S, *, table: str = ANOMALIES_TABLE,
             topic_configs: Iterable[CompactedTopicConfig] = (),
             previous: Iterable[Finding] | None = None,
             baseline_cache: BaselineCache | None = None,
             window_cache: WindowReadCache | None = None,
             before_write: Callable[[list[Finding]], None] | None = None,
             sql: LakeSql | None = None, carried: dict | None = None) -> list[Finding]:
    """One evaluation at now_ms (`assess`, then step 5); returns its findings (open and
    recently resolved, correlated) after writing the changed ones to gold.<table>.

    `before_write(findings)` is called with the findings before the MERGE."""
    a = assess(spark, lake, config, now_ms, lookback_s, table=table,
               topic_configs=topic_configs, previous=previous, baseline_cache=baseline_cache,
               window_cache=window_cache, sql=sql, carried=carried)
    handed = time.monotonic()
    if before_write is not None:
        before_write(a.findings)
    writing = time.monotonic()
    written = write_findings(spark, lake.table("gold", table), a.changed)
    a.log(handed_s=writing - handed, written=written, written_s=time.monotonic() - writing)
    return a.findings


def replay(spark: SparkSession, lake: Lake, config: DetectionConfig, start_ms: int, end_ms: int,
           step_s: float, *, lookback_s: float = DEFAULT_LOOKBACK_S,
           table: str = ANOMALIES_TABLE,
           topic_configs: Iterable[CompactedTopicConfig] = ()) -> list[Finding]:
    """Evaluate at the end of every step of [start_ms, end_ms), writing gold.<table>;
    returns every finding the replay touched, in its last state."""
    configs = list(topic_configs)
    last: dict[str, Finding] = {}
    sql = LakeSql(lake)
    try:
        for now_ms in replay_times(start_ms, end_ms, step_s):
            for f in evaluate(spark, lake, config, now_ms, lookback_s, table=table,
                              topic_configs=configs, sql=sql):
                last[f.finding_id] = f
    finally:
        sql.close()
    return sort_findings(last.values())


class DetectorQuery:
    """The detector's StreamingQuery with its write-behind: everything else is the
    StreamingQuery's, but `stop` and `awaitTermination` also wait for the last
    evaluation's write, and `exception` reports that write's failure too."""

    def __init__(self, query, writer: WriteBehind):
        self._query, self._writer = query, writer
        self._failed: BaseException | None = None

    def __getattr__(self, name):
        return getattr(self._query, name)

    def _drain(self) -> None:
        try:
            self._writer.drain()
        except BackgroundJobFailed as e:
            # Not lost: the next start reads the table and evaluates again; the finding
            # ids are the same, so the rows come back as they were.
            self._failed = e
            log.error("%s; the next start evaluates again", e)

    def stop(self) -> None:
        # The write first: stopping cancels the query's jobs, the write's too (it runs in
        # the query's job group); a tick started meanwhile is cancelled, which is safe.
        self._drain()
        self._query.stop()
        self._drain()

    def awaitTermination(self, timeout=None):
        ended = (self._query.awaitTermination() if timeout is None
                 else self._query.awaitTermination(timeout))
        if ended is not False:
            self._drain()
        return ended

    def exception(self):
        return self._query.exception() or self._failed


def start_detector_query(spark: SparkSession, lake: Lake, config: DetectionConfig,
                         trigger: Mapping | None = None,
                         on_findings: Callable[[list[Finding], int], None] | None = None, *,
                         clock: Callable[[], int] = system_clock_ms,
                         lookback_s: float = DEFAULT_LOOKBACK_S,
                         table: str = ANOMALIES_TABLE,
                         topic_configs: Callable[[int], list[CompactedTopicConfig]] | None = None,
                         query_name: str = QUERY_NAME,
                         in_background: Callable[[list[Finding], int], None] | None = None,
                         wait_for_data: Callable[[], float] | None = None,
                         written_since: Written | None = None,
                         on_inputs: Callable[[int, DetectorInputs], None] | None = None
                         ) -> DetectorQuery:
    """A StreamingQuery that evaluates at clock() on every trigger.

    `trigger` is a DataStreamWriter.trigger keyword dict (default every 10 s;
    {"availableNow": True} evaluates once and stops). `topic_configs(now_ms)` gives the
    watched cluster's compacted topic configs (e.g. a `evaluation.inputs.TopicConfigCache`
    over `describe_compacted_topics`). The table is created before the query starts so
    the catalog can register it.

    Each tick assesses, hands the findings to `on_findings(findings, now_ms)` (the
    exporter: the alert), then leaves the rest to a write-behind thread: `in_background(
    findings, now_ms)` (the remediation decision step) and the MERGE into gold.<table>.
    The next tick's reads overlap that work; its own write waits for it (one at a time, in
    order), and a failed write stops the query at the next tick, naming it.

    `wait_for_data()` is called at the start of each tick, before the clock is read, and
    returns the seconds it waited: `jobs.silver_commits.SilverCommits.wait_fresh`, so an
    evaluation starts right after the silver query's commit and reads the freshest data.
    `written_since` (`SilverCommits.written_since`) tells the window reads which windows
    silver wrote since their last read (evaluation/inputs/window_cache.py).
    `on_inputs(now_ms, inputs)` is called with what each evaluation read (`assess`).
    """
    check_config(config)
    try:
        delta_uri(lake.root)   # the detector reads the lake with delta-rs (infra/lake_sql.py)
    except ValueError as e:
        raise ConfigError(f"{config.source}: key 'spark.storage_root' ({lake.root!r}): "
                          f"{e}") from None
    path = lake.table("gold", table)
    ensure_anomalies_table(spark, path)
    writer = WriteBehind(query_name)
    on_tick = DetectorTicks(spark, lake, config, path, writer, clock=clock,
                            lookback_s=lookback_s, table=table, topic_configs=topic_configs,
                            on_findings=on_findings, in_background=in_background,
                            wait_for_data=wait_for_data, written_since=written_since,
                            on_inputs=on_inputs)
    ticks = spark.readStream.format("rate").option("rowsPerSecond", 1).load()
    query = (ticks.writeStream.queryName(query_name)
             .option("checkpointLocation", lake.checkpoint(query_name))
             .foreachBatch(on_tick)
             .trigger(**dict(trigger or DEFAULT_TRIGGER)).start())
    return DetectorQuery(query, writer)


class DetectorTicks:
    """The detector query's `foreachBatch` function: one evaluation per tick, in steps.
    Assess (after waiting for fresh data, at clock()), hand the findings over
    (`on_findings`), then leave the decision step and the MERGE to the write-behind.

    It keeps the last evaluation's findings: the next one starts from them instead of
    reading the table back (about a second per evaluation). The query is the table's
    writer; after a restart, or an evaluation that failed, the table is read again.
    """

    def __init__(self, spark: SparkSession, lake: Lake, config: DetectionConfig, path: str,
                 writer: WriteBehind, *, clock: Callable[[], int],
                 lookback_s: float, table: str,
                 topic_configs: Callable[[int], list[CompactedTopicConfig]] | None,
                 on_findings: Callable[[list[Finding], int], None] | None,
                 in_background: Callable[[list[Finding], int], None] | None,
                 wait_for_data: Callable[[], float] | None,
                 written_since: Written | None = None,
                 on_inputs: Callable[[int, DetectorInputs], None] | None = None) -> None:
        self.spark, self.lake, self.config, self.path = spark, lake, config, path
        self.writer, self.clock = writer, clock
        self.lookback_s, self.table = lookback_s, table
        self.topic_configs, self.on_findings = topic_configs, on_findings
        self.in_background, self.wait_for_data = in_background, wait_for_data
        self.on_inputs = on_inputs
        self.baselines = BaselineCache()
        self.windows = WindowReadCache(written=written_since)
        self.commit_seed = CommitSeedCache()
        self.carried: dict = {}
        self.sql = LakeSql(lake)
        self.last_findings: list[Finding] | None = None

    def __call__(self, _batch, _batch_id: int) -> None:
        # Its own scheduler pool (fair scheduling, infra/spark_session.py): the evaluation's
        # jobs do not wait behind every streaming query's tasks.
        self.spark.sparkContext.setLocalProperty("spark.scheduler.pool", DETECT_POOL)
        a = self.assess_now()
        handed_s = self.hand_over(a)
        self.writer.submit(f"writing the findings of the evaluation at {a.now_ms}",
                           functools.partial(self.write_behind, a, handed_s))
        self.last_findings = a.findings

    def assess_now(self) -> Assessment:
        """Wait for fresh data, read the clock, assess from the last evaluation's findings
        (None while this one runs: if it fails, the next reads the table)."""
        data_wait_s = self.wait_for_data() if self.wait_for_data is not None else None
        now_ms = self.clock()
        configs = self.topic_configs(now_ms) if self.topic_configs is not None else ()
        previous, self.last_findings = self.last_findings, None
        a = assess(self.spark, self.lake, self.config, now_ms, self.lookback_s,
                   table=self.table, topic_configs=configs, previous=previous,
                   baseline_cache=self.baselines, window_cache=self.windows,
                   commit_seed=self.commit_seed, sql=self.sql, carried=self.carried,
                   on_inputs=self.on_inputs)
        a.data_wait_s = data_wait_s
        return a

    def hand_over(self, a: Assessment) -> float:
        """`on_findings` (the alert) before anything is written; returns the seconds it took."""
        handing = time.monotonic()
        if self.on_findings is not None:
            self.on_findings(a.findings, a.now_ms)
        return time.monotonic() - handing

    def write_behind(self, a: Assessment, handed_s: float) -> None:
        """In the write-behind thread: the decision step, then the MERGE, then the log line."""
        started = time.monotonic()
        if self.in_background is not None:
            self.in_background(a.findings, a.now_ms)
        written = write_findings(self.spark, self.path, a.changed)
        a.log(handed_s=handed_s, written=written, written_s=time.monotonic() - started,
              waited_s=self.writer.waited_s, decided=self.in_background is not None)
