"""The slow-client rule's input on Spark (jobs/detector_inputs/client_sends.py): which
silver.request_stages rows come back as `ClientSendWindow`s, with their slow counts, and
that the rule finds the slow reader in them and nobody else.

Two 10-second windows of a three-broker cluster:
- slow-reader: 2 fetches a window from broker 1, each 3 s to send, and fast Metadata;
- billing: 50 fast fetches a window from broker 1, 20 from broker 2;
- hiccup: 10 fetches a window from broker 2, one slow in the second window;
- quiet: 30 fast fetches a window from broker 3 (no slow send near it: never read);
- broker 2's replica fetcher: 10 fast fetches a window from broker 1, one slow at
  broker 3 in the second window (a replica: judged by the follower blame, not as a client).
"""

from __future__ import annotations

import dataclasses

import pytest

from detectors.slow_broker import RequestStageWindow, SlowBrokerSection, detect_slow_brokers
from jobs.detector_inputs import REQUEST_STAGE_KEYS, read_client_sends
from jobs.detector_inputs.tables import TimeRange
from jobs.gold import STAGES as STAGE_TIMINGS

T0 = 1_767_225_600_000   # on the 10 s grid
W = 10_000
CONFIG = SlowBrokerSection()
RANGE = TimeRange(T0, T0 + 2 * W)


def request(w: int, i: int, broker: int, client: str, send: float, api: str = "Fetch",
            follower: bool = False) -> dict:
    ts = T0 + w * W + 100 + i * 10
    return {"cluster": "c1", "broker": broker, "api": api, "ts_ms": ts, "ts": None,
            "is_controller_traffic": False,
            "fetch_kind": ("follower" if follower else "consumer") if api == "Fetch" else None,
            "fetch_replica_id": 2 if follower else None, "remote_addr": f"{client}:1",
            "correlation_id": i, "client_id": client, "total_ms": send + 1.0,
            "request_queue_ms": 0.1, "local_ms": 0.5, "remote_ms": 0.0, "throttle_ms": 0.0,
            "response_queue_ms": 0.1, "send_ms": send}


def telemetry() -> list[dict]:
    out = []
    for w in (0, 1):
        out += [request(w, i, 1, "slow-reader", 3000.0) for i in range(2)]
        out += [request(w, i, 1, "slow-reader", 0.2, api="Metadata") for i in range(3)]
        out += [request(w, i, 1, "billing", 0.4) for i in range(50)]
        out += [request(w, i, 2, "billing", 0.4) for i in range(20)]
        out += [request(w, i, 2, "hiccup", 900.0 if (w, i) == (1, 0) else 0.4)
                for i in range(10)]
        out += [request(w, i, 3, "quiet", 0.4) for i in range(30)]
        out += [request(w, i, 1, "broker-2-fetcher", 0.5, follower=True) for i in range(10)]
    out.append(request(1, 0, 3, "broker-2-fetcher", 800.0, follower=True))
    return out


@pytest.fixture(scope="module")
def stages(spark):
    from pyspark.sql import functions as F

    from schemas.request_stages import SILVER_SCHEMA

    schema = SILVER_SCHEMA
    rows = [{**{f.name: None for f in schema.fields}, **r} for r in telemetry()]
    df = (spark.createDataFrame(rows, schema)
          .withColumn("ts", F.timestamp_millis("ts_ms"))
          .select(*REQUEST_STAGE_KEYS, *STAGE_TIMINGS))
    return df.cache()


def keyed(sends) -> set[tuple]:
    return {((x.window_start_ms - T0) // W, x.broker, x.client_id, x.api, x.follower,
             x.requests, x.slow_requests) for x in sends}


def test_the_rows_the_rules_read_and_no_others(spark, stages):
    sends = read_client_sends(spark, None, CONFIG, RANGE, [], stages)
    assert keyed(sends) == {
        # slow-reader: every row, its fast Metadata too
        (0, 1, "slow-reader", "Fetch", False, 2, 2), (1, 1, "slow-reader", "Fetch", False, 2, 2),
        (0, 1, "slow-reader", "Metadata", False, 3, 0),
        (1, 1, "slow-reader", "Metadata", False, 3, 0),
        # everyone at broker 1's fetches (slow sends there), the replica fetcher included
        (0, 1, "billing", "Fetch", False, 50, 0), (1, 1, "billing", "Fetch", False, 50, 0),
        (0, 1, "broker-2-fetcher", "Fetch", True, 10, 0),
        (1, 1, "broker-2-fetcher", "Fetch", True, 10, 0),
        # hiccup: every row; broker 2's other client in the window it was slow
        (0, 2, "hiccup", "Fetch", False, 10, 0), (1, 2, "hiccup", "Fetch", False, 10, 1),
        (1, 2, "billing", "Fetch", False, 20, 0),
        # broker 3 in the window its replica fetcher was slow: everyone there
        (1, 3, "broker-2-fetcher", "Fetch", True, 1, 1), (1, 3, "quiet", "Fetch", False, 30, 0),
    }
    p99 = {(x.broker, x.client_id, x.api): x.send_p99_ms for x in sends
           if x.window_start_ms == T0 + W}
    assert p99[(1, "slow-reader", "Fetch")] == 3000.0
    assert p99[(1, "billing", "Fetch")] == 0.4


def test_the_slow_reader_is_found_in_them_and_nobody_else(spark, stages):
    sends = read_client_sends(spark, None, CONFIG, RANGE, [], stages)
    rows = [RequestStageWindow("c1", b, "Fetch", T0 + w * W, n, 2.0, send_p99_ms=0.5)
            for w in (0, 1) for b, n in ((1, 62), (2, 30), (3, 30))]
    got = {d.entity: d for d in detect_slow_brokers(rows, client_sends=sends, config=CONFIG)}
    assert set(got) == {"client:slow-reader"}
    assert got["client:slow-reader"].evidence["per_broker"][0]["broker_requests"] == 62


def test_per_api_thresholds_count_the_slow_sends(spark, stages):
    lenient = dataclasses.replace(CONFIG, api_threshold_ms={"Fetch": 5000})
    assert read_client_sends(spark, None, lenient, RANGE, [], stages) == []


def test_a_send_candidate_brings_its_clients_without_any_slow_send(spark, stages):
    lenient = dataclasses.replace(CONFIG, threshold_ms=10_000.0)
    candidate = RequestStageWindow("c1", 3, "Fetch", T0, 200, 900.0, send_p99_ms=800.0)
    sends = read_client_sends(spark, None, lenient, RANGE, [candidate], stages)
    assert keyed(sends) == set()     # 900 ms is under a 10 s threshold: no candidate
    sends = read_client_sends(spark, None, CONFIG, TimeRange(T0, T0 + W), [candidate], stages)
    assert {(x.broker, x.client_id) for x in sends if x.broker == 3} == {(3, "quiet")}

