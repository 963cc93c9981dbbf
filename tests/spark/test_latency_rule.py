"""slow_broker's latency rule is written twice: `detectors.slow_broker.rules.judged_latency`
judges the stage windows in Python, and `jobs.detector_inputs.latency_column` computes the same
latency in Spark for the baselines the windows are compared with. Both must give the same
number for the same gold row, or a broker is judged against a baseline of another measure.

Each scenario is one gold stage-percentile row; the Python side sees it as the reader
builds it (`stage_window_from_row`), the Spark side as a DataFrame row, and every scenario
says what the rule makes of it. The rule branches on: the API being a purgatory API
(core.signals.PURGATORY_APIS, by exact request-log name), Remote left out of those
APIs' total, the largest of the other stages when that is more, and 0 as the floor. Null
stages stand for 0 ms.

Outside what the Spark form sees, and why that is safe:
- judged_latency takes a window's total_excl_remote_p99_ms when it has one; gold has no such
  column (asserted below), so no window read from the lake has one.
- total and remote are never null in gold: silver requires total_ms and remote_ms
  (asserted below), and a percentile of non-null values is not null.
"""

from __future__ import annotations

import dataclasses

import pytest
from pyspark.sql.types import StringType, StructField, StructType

from core import signals
from core.signals import PURGATORY_APIS
from detectors.slow_broker import STAGES, SlowBrokerSection
from detectors.slow_broker.rules import judged_latency
from jobs.detector_inputs import latency_column, stage_window_from_row
from jobs.gold import stage_percentiles
from schemas import request_stages

P99 = tuple(f"{s}_p99_ms" for s in ("total", *STAGES))
DEFAULT = SlowBrokerSection()
# Other purgatory APIs, one set for both forms: Produce's Remote (acks=all) and
# FetchSnapshot's left out, Fetch judged on its total.
CUSTOM = frozenset({"Produce", "FetchSnapshot"})


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    api: str
    total: float | None
    expected: float                 # under PURGATORY_APIS
    expected_custom: float          # under CUSTOM
    stages: dict = dataclasses.field(default_factory=dict)   # stage -> p99 ms (default 0)

    def row(self) -> dict:
        return {"api": self.api, "total_p99_ms": self.total,
                **{f"{s}_p99_ms": self.stages.get(s, 0.0) for s in STAGES}}


SCENARIOS = [
    # Not a purgatory API: the total, Remote and all.
    Scenario("produce acks=all waits in remote", "Produce", 600.0, 600.0, 12.0,
             {"remote": 588.0, "local": 4.0, "send": 12.0}),
    Scenario("produce all zero", "Produce", 0.0, 0.0, 0.0),
    Scenario("metadata, a stage above the total", "Metadata", 5.0, 5.0, 5.0, {"local": 9.0}),
    Scenario("unwatched api", "ApiVersions", 3.0, 3.0, 3.0, {"remote": 2.0}),
    Scenario("fetchsnapshot is not fetch", "FetchSnapshot", 700.0, 700.0, 10.0,
             {"remote": 690.0}),
    # Purgatory APIs: total - remote, or a larger own stage.
    Scenario("fetch waits out fetch.max.wait.ms", "Fetch", 520.0, 20.0, 520.0,
             {"remote": 500.0, "local": 3.0, "send": 2.0}),
    Scenario("fetch without remote", "Fetch", 40.0, 40.0, 40.0, {"local": 30.0}),
    Scenario("fractional ms", "Fetch", 500.7, 500.7 - 499.9, 500.7, {"remote": 499.9}),
    Scenario("request queue largest", "Fetch", 510.0, 30.0, 510.0,
             {"remote": 505.0, "request_queue": 30.0}),
    Scenario("local largest", "Fetch", 510.0, 31.0, 510.0,
             {"remote": 505.0, "local": 31.0}),
    Scenario("throttle largest", "Fetch", 900.0, 300.0, 900.0,
             {"remote": 880.0, "throttle": 300.0}),
    Scenario("response queue largest", "JoinGroup", 3000.0, 33.0, 3000.0,
             {"remote": 2990.0, "response_queue": 33.0}),
    Scenario("send largest", "SyncGroup", 1000.0, 34.0, 1000.0,
             {"remote": 990.0, "send": 34.0}),
    Scenario("remote p99 above total p99", "Fetch", 100.0, 7.0, 100.0,
             {"remote": 120.0, "send": 7.0}),
    Scenario("purgatory all zero", "Fetch", 0.0, 0.0, 0.0),
    # Names compare exactly: the lake holds request-log names only, and a configuration's
    # spellings become those when it is read (core.signals.canonical_api).
    Scenario("a spelling that is no request-log name", "FETCH_CONSUMER", 515.0, 515.0,
             515.0, {"remote": 500.0}),
    Scenario("produce upper case", "PRODUCE", 600.0, 600.0, 600.0, {"remote": 600.0}),
    # Null stages count as 0 ms.
    Scenario("null own stages", "Fetch", 520.0, 20.0, 520.0,
             {"remote": 500.0, "request_queue": None, "local": None, "throttle": None,
              "response_queue": None, "send": None}),
    Scenario("null stages, remote above total", "Fetch", 100.0, 0.0, 100.0,
             {"remote": 120.0, "request_queue": None, "local": None, "throttle": None,
              "response_queue": None, "send": None}),
    Scenario("null stage beside a larger one", "Fetch", 510.0, 40.0, 510.0,
             {"remote": 505.0, "local": None, "send": 40.0}),
    # Negative times never pass silver's checks; both forms still floor at 0.
    Scenario("negative everywhere", "Fetch", 10.0, 0.0, 10.0,
             {"remote": 20.0, "request_queue": -1.0, "local": -1.0, "throttle": -1.0,
              "response_queue": -1.0, "send": -1.0}),
]


def gold_columns(spark):
    """gold's stage-percentile schema (jobs.gold.stage_percentiles over silver's)."""
    silver = spark.createDataFrame([], request_stages.SILVER_SCHEMA)
    return stage_percentiles(silver, "10 seconds").schema


def test_gold_gives_the_spark_form_everything_the_python_form_reads(spark):
    gold = gold_columns(spark)
    assert {"api", *P99} <= set(gold.fieldNames())
    assert "total_excl_remote_p99_ms" not in gold.fieldNames()
    assert {"total_ms", "remote_ms", "api"} <= set(request_stages.REQUIRED)


def test_the_scenarios_cover_every_purgatory_api_and_own_stage():
    assert {s.api for s in SCENARIOS} >= {*PURGATORY_APIS, "Produce", "Metadata"}
    answered_by = {stage for s in SCENARIOS for stage, ms in s.stages.items()
                   if stage != "remote" and ms and ms == s.expected
                   and ms > s.total - s.stages.get("remote", 0.0)}
    assert answered_by == set(STAGES) - {"remote"}


@pytest.mark.parametrize("purgatory", [PURGATORY_APIS, CUSTOM], ids=["default", "custom"])
def test_spark_and_python_latency_agree_row_by_row(spark, purgatory, monkeypatch):
    monkeypatch.setattr(signals, "PURGATORY_APIS", purgatory)   # both forms read it
    config = DEFAULT
    gold = gold_columns(spark)
    schema = StructType([StructField("scenario", StringType()), gold["api"],
                         *[gold[c] for c in P99]])
    rows = {s.name: s.row() for s in SCENARIOS}
    df = spark.createDataFrame(
        [(name, *[r[c] for c in schema.fieldNames()[1:]]) for name, r in rows.items()], schema)
    by_name = {x["scenario"]: x["latency"]
               for x in df.select("scenario", latency_column(config).alias("latency")).collect()}
    in_spark = [by_name.get(s.name, "missing") for s in SCENARIOS]
    in_python = [judged_latency(stage_window_from_row(
        {**rows[s.name], "cluster": "c1", "broker": 1, "window_start_ms": 0, "requests": 1000}))
        for s in SCENARIOS]
    expected = [s.expected if purgatory is PURGATORY_APIS else s.expected_custom
                for s in SCENARIOS]

    assert len(rows) == len(SCENARIOS)   # names are unique
    disagree = [(s.name, spark_ms, python_ms)
                for s, spark_ms, python_ms in zip(SCENARIOS, in_spark, in_python)
                if spark_ms != python_ms]
    assert disagree == [], "scenario, Spark, Python"
    wrong = [(s.name, got, want) for s, got, want in zip(SCENARIOS, in_python, expected)
             if got != want]
    assert wrong == [], "scenario, both forms, expected"
