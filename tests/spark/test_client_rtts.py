"""The slow-link rule's input on Spark (evaluation/inputs/client_rtts.py): librdkafka
statistics documents through the pipeline into silver.client_stats, read back as
`ClientRttWindow`s, and the rule finds the producer behind a slow link in them.

The documents are the captured producer's and consumer's (tests/fixtures/client_stats,
librdkafka 2.16.0), renamed and with their rtt windows set, two a window (every 5 s) for
three 10-second windows of a three-broker cluster:
- far-producer: rtt p99 800 ms (p50 720) at every broker in windows 1 and 2 (20 ms in
  window 0), and broker 3's window empty (p99 0: it sent broker 3 nothing);
- orders: 35 ms (p50 17.5) at every broker in its first document of each window, 20 ms
  (p50 10) in its second;
- bursty-producer: 2,000 ms (p50 1,800) at every broker in the first document of
  windows 1 and 2 (a burst queued on its connections), 20 ms (p50 18) in every other
  document: the highest median of each window is slow, the latest is not;
- a consumer at 505 ms (its fetch wait): not read.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from detectors.slow_broker import RequestStageWindow, SlowBrokerSection, detect_slow_brokers
from detectors.slow_client import detect_slow_clients
from infra.lake import Lake
from infra.lake_sql import LakeSql
from ingest.client_stats import parse_client_stats
from ingest.sinks import LandingSink
from evaluation.inputs import read_client_rtts
from evaluation.inputs.tables import TimeRange
from jobs.pipeline import Pipeline
from jobs.streams import QUARANTINE, stream

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "client_stats" / "librdkafka-2.16.jsonl"
T0 = 1_767_225_600_000   # on the 10 s grid
W = 10_000
CONFIG = SlowBrokerSection()


def captured() -> dict[str, dict]:
    docs = [json.loads(x) for x in FIXTURE.read_text().splitlines() if x.startswith("{")]
    return {"producer": next(d for d in docs if d["type"] == "producer"),
            "consumer": next(d for d in docs if d["type"] == "consumer")}


def document(template: dict, client: str, rtt_ms: dict[int, float],
             median: float = 0.5) -> str:
    """The captured document as `client`'s, with each broker's rtt p99 (ms) set, and its
    p50 that share of it."""
    doc = json.loads(json.dumps(template))
    doc["client_id"], doc["name"] = client, f"{client}#{template['type']}-1"
    for b in doc["brokers"].values():
        if b.get("nodeid", -1) >= 0:
            b["rtt"]["p99"] = int(rtt_ms[b["nodeid"]] * 1000)
            b["rtt"]["p50"] = int(rtt_ms[b["nodeid"]] * median * 1000)
    return json.dumps(doc)


def documents() -> list[tuple[int, str]]:
    t = captured()
    out = []
    for w in range(3):
        for k in range(2):
            ts = T0 + w * W + 2_000 + k * 5_000
            far = 800.0 if w else 20.0
            out.append((ts, document(t["producer"], "far-producer", {1: far, 2: far, 3: 0.0},
                                     median=0.9)))
            out.append((ts, document(t["producer"], "orders",
                                     dict.fromkeys((1, 2, 3), 20.0 if k else 35.0))))
            burst = 2000.0 if w and not k else 20.0
            out.append((ts, document(t["producer"], "bursty-producer",
                                     dict.fromkeys((1, 2, 3), burst), median=0.9)))
            out.append((ts, document(t["consumer"], "billing", dict.fromkeys((1, 2, 3), 505.0))))
    return out


@pytest.fixture(scope="module")
def lake(spark, kmon_config, tmp_path_factory) -> Lake:
    lake = Lake(str(tmp_path_factory.mktemp("client-rtts") / "lake"))
    sink = LandingSink(lake.landing_root, "test")
    for i, (ts, doc) in enumerate(documents()):
        records = parse_client_stats(doc, cluster="c1", ts_ms=ts)
        assert isinstance(records, list), records
        for j, rec in enumerate(records):
            sink.send("client_stats", "k", {**rec, "record_id": f"test:{i}:{j}"})
    sink.flush()
    Pipeline(spark, lake, kmon_config.pipeline,
             streams=(stream("client_stats"), stream(QUARANTINE))).process_available()
    assert spark.read.format("delta").load(lake.table("silver", QUARANTINE)).count() == 0
    return lake


def test_the_producers_round_trips_per_window_and_broker(spark, lake):
    rtts = read_client_rtts(LakeSql(lake), CONFIG, TimeRange(T0, T0 + 3 * W))
    got = {((x.window_start_ms - T0) // W, x.client_id, x.broker): x.rtt_p99_ms for x in rtts}
    assert got == {
        # far-producer: broker 3's empty window left out
        **{(w, "far-producer", b): (800.0 if w else 20.0) for w in range(3) for b in (1, 2)},
        # orders: the higher of its two documents a window; the consumer is not read
        **{(w, "orders", b): 35.0 for w in range(3) for b in (1, 2, 3)},
        **{(w, "bursty-producer", b): (2000.0 if w else 20.0)
           for w in range(3) for b in (1, 2, 3)},
    }
    assert {x.client_type for x in rtts} == {"producer"}
    medians = {((x.window_start_ms - T0) // W, x.client_id, x.broker): x.rtt_p50_ms
               for x in rtts}
    assert medians[(1, "far-producer", 1)] == 720.0 and medians[(0, "far-producer", 1)] == 18.0
    assert medians[(2, "orders", 3)] == 10.0          # the later of its two documents
    assert medians[(1, "bursty-producer", 2)] == 18.0   # its burst was the earlier one
    assert read_client_rtts(LakeSql(lake), CONFIG, TimeRange(T0 + 3 * W, T0 + 4 * W)) == []


def test_the_producer_behind_the_slow_link_is_found_in_them(spark, lake):
    rtts = read_client_rtts(LakeSql(lake), CONFIG, TimeRange(T0, T0 + 3 * W))
    rows = [RequestStageWindow("c1", b, "Produce", T0 + w * W, 600, 8.0)
            for w in range(3) for b in (1, 2, 3)]
    got = {d.entity: d for d in detect_slow_brokers(rows, config=CONFIG)
           + detect_slow_clients(rows, client_rtts=rtts, config=CONFIG)}
    # bursty-producer's medians were slow at every broker in two windows, and back to
    # 18 ms by each window's end: queueing that came and went, no slow path
    assert set(got) == {"client:far-producer"}
    assert got["client:far-producer"].cause == "client_slow_link"
    assert got["client:far-producer"].evidence["brokers"] == [1, 2]


BACKLOG = FIXTURE.parents[1] / "request_stages" / "backlogged-producer-requests.csv"
BEFORE, BACKLOGGED = (1795982950000, 1795982960000), (1795983040000, 1795983050000)


def _recorded_requests() -> list[dict]:
    lines = [x for x in BACKLOG.read_text().splitlines() if not x.startswith("#")]
    header = lines[0].split(",")
    rows = [dict(zip(header, x.split(","))) for x in lines[1:]]
    return [{**r, "ts_ms": int(r["ts_ms"]), "broker": int(r["broker"]),
             "correlation_id": int(r["correlation_id"]), "total_ms": float(r["total_ms"])}
            for r in rows]


def _queued_share_here(rows: list[dict], window_start: int) -> float:
    """Of the window's requests with one before them on the connection in the window, the
    share the broker read within 2 ms of answering that one."""
    mine = sorted((r for r in rows if r["ts_ms"] - r["ts_ms"] % W == window_start),
                  key=lambda r: (r["ts_ms"], r["correlation_id"]))
    gaps = [b["ts_ms"] - b["total_ms"] - a["ts_ms"] for a, b in zip(mine, mine[1:])]
    return sum(g <= 2.0 for g in gaps) / len(gaps)


def test_a_backlogged_producers_requests_waited_in_the_socket():
    """The edge's queued share (ingest/request_windows.py, client_send_windows' followed
    and queued) on recorded requests (unclean-noloss-3b, live): the share of a producer's
    requests the broker read as soon as it had answered the one before."""
    from ingest.request_windows import aggregate

    rows = _recorded_requests()
    records = [{**r, "cluster": "local", "is_controller_traffic": False, "fetch_kind": None,
                "fetch_replica_id": None, "acks": -1, "error_codes": [], "request_bytes": 100,
                "response_bytes": 10, "request_queue_ms": 0.0, "local_ms": 0.0,
                "remote_ms": 0.0, "throttle_ms": 0.0, "response_queue_ms": 0.0,
                "send_ms": 0.0, "record_id": f"local:3:1:{100 * i}"}
               for i, r in enumerate(sorted(rows, key=lambda r: (r["ts_ms"],
                                                                 r["correlation_id"])))]
    sends = [o.record for o in aggregate(records, "local", 3)
             if o.stream == "client_send_windows"
             and o.record["client_id"] == "customers-producer"]
    got: dict[int, list[int]] = {}
    for x in sends:
        n = got.setdefault(x["ts_ms"], [0, 0])
        n[0] += x["followed"]
        n[1] += x["queued"]
    assert {*BEFORE, *BACKLOGGED} <= set(got)
    share = {w: queued / followed for w, (followed, queued) in got.items()}
    for w in (*BEFORE, *BACKLOGGED):
        assert share[w] == pytest.approx(_queued_share_here(rows, w)), w
    assert all(share[w] < 0.2 for w in BEFORE)            # linger.ms apart
    assert all(share[w] > 0.75 for w in BACKLOGGED)       # back to back
