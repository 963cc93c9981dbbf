"""The fleet simulator (bench/fleet_sim.py): real window shapes at fleet size, faults
where and when they are asked for, records silver accepts."""

from __future__ import annotations

import pytest

from bench.fleet_sim import WINDOW_MS, Fault, FleetSim, templates_from_recording
from core.latency_histogram import quantile_of_arrays
from schemas import client_send_windows, follower_fetch_windows, request_exemplars, request_windows

T0 = 1_800_000_000_000
ONSET = T0 + 2 * WINDOW_MS
TABLES = {"request_windows": request_windows, "follower_fetch_windows": follower_fetch_windows,
          "client_send_windows": client_send_windows, "request_exemplars": request_exemplars}


@pytest.fixture(scope="module")
def templates():
    # the bench's own default: a healthy recording (a fault's would bring its own gaps)
    from bench.fleet_sim import DEFAULT_RECORDING
    return templates_from_recording(DEFAULT_RECORDING)


@pytest.fixture(scope="module")
def sim(templates):
    client = next(c["client_id"] for cs in templates.clients["Produce:acks=1"] for c in cs
                  if c["client_id"])
    faults = [Fault("slow_broker", 5, ONSET, ONSET + 10 * WINDOW_MS, delay_ms=600.0),
              Fault("slow_follower", 11, ONSET, ONSET + 10 * WINDOW_MS, delay_ms=600.0),
              Fault("slow_client", 23, ONSET, ONSET + 10 * WINDOW_MS, delay_ms=600.0,
                    client_id=f"{client}-{23 % 50}")]
    return FleetSim(templates, 40, faults=faults)


def _p99(rec, stage="total"):
    return quantile_of_arrays(rec[f"{stage}_buckets"], rec[f"{stage}_counts"], 0.99)


def test_records_have_the_schemas_columns_and_unique_ids(sim):
    w = sim.window(T0)
    ids = [r["record_id"] for recs in w.values() for r in recs]
    assert len(ids) == len(set(ids))
    for stream, recs in w.items():
        assert recs, stream
        for r in recs:
            assert list(r)[:-1] == TABLES[stream].SCHEMA.fieldNames() or \
                set(r) - {"record_id"} == set(TABLES[stream].SCHEMA.fieldNames()), stream
    assert sim.window(T0) == w                       # deterministic


def test_each_broker_serves_about_the_asked_rate_with_histograms_that_add_up(sim):
    w = sim.window(T0)
    per_broker = {}
    for r in w["request_windows"]:
        per_broker[r["broker"]] = per_broker.get(r["broker"], 0) + r["requests"]
        for stage in ("total", "local", "remote", "send", "total_minus_remote"):
            assert sum(r[f"{stage}_counts"]) == r["requests"]
    assert set(per_broker) == set(range(40))
    mean = sum(per_broker.values()) / len(per_broker)
    assert 0.7 * 100_000 < mean < 1.3 * 100_000     # 10,000 requests/s, 10-s windows
    for r in w["follower_fetch_windows"]:
        assert r["follower"] in {(r["broker"] + 1) % 40, (r["broker"] + 2) % 40}
        assert sum(r["send_counts"]) == r["requests"]


def test_a_slow_broker_is_slow_from_its_onset_and_only_there(sim):
    """Broker 5's Produce over the slow-broker threshold from the onset, in Local; no
    other Produce over it but the acks=-1 of the leaders slow follower 11 holds back."""
    leaders = {(11 - k) % 40 for k in (1, 2)}
    for start in (ONSET - WINDOW_MS, ONSET):
        for r in sim.window(start)["request_windows"]:
            if r["api"] != "Produce":
                continue
            slow = start >= ONSET and (r["broker"] == 5 or r["key"] == "Produce:acks=-1"
                                       and r["broker"] in leaders)
            assert (_p99(r) > 300) == slow, (start, r["broker"], r["key"])
            if slow and r["broker"] == 5:
                assert _p99(r, "local") > 0.98 * 600 and r["local_max_ms"] > 600


def test_a_slow_follower_shows_on_the_leaders_it_follows(sim):
    during = sim.window(ONSET)
    gaps = {(r["broker"], r["follower"]): r["max_fetch_gap_ms"]
            for r in during["follower_fetch_windows"]}
    leaders = {(11 - k) % 40 for k in (1, 2)}
    assert {b for (b, f) in gaps if f == 11} == leaders
    assert min(gaps[(b, 11)] for b in leaders) >= 600 > max(
        g for (b, f), g in gaps.items() if f != 11 and g is not None)
    for r in during["request_windows"]:
        if r["key"] == "Produce:acks=-1" and r["broker"] in leaders:
            assert _p99(r, "remote") > 300


def test_a_slow_client_is_slow_at_every_broker_it_reads_from_and_no_other_is(sim):
    f = sim.faults[2]
    for start in (ONSET - WINDOW_MS, ONSET):
        rows = sim.window(start)["client_send_windows"]
        assert {r["broker"] for r in rows if r["client_id"] == f.client_id} >= {23}
        for r in rows:
            p99 = quantile_of_arrays(r["send_buckets"], r["send_counts"], 0.99)
            slow = start >= ONSET and r["client_id"] == f.client_id
            assert (p99 > 0.98 * 600) == slow, (start, r["broker"], r["client_id"])


def test_bad_faults_are_refused(templates):
    with pytest.raises(ValueError, match="fault kind"):
        Fault("slow_disk", 1, 0, 1)
    with pytest.raises(ValueError, match="broker 50"):
        FleetSim(templates, 10, faults=[Fault("slow_broker", 50, 0, 1)])


def test_the_fleet_profile_ships_fewer_exemplars_and_client_rows_and_loses_no_request(templates):
    """exemplar_slowest / top_clients as the agent applies them: per key and window only the
    k slowest of the recorded slowest exemplars (slow and error ones kept), only the busiest
    clients and any slow one on rows of their own, the rest summed into the `other` row."""
    client = next(c["client_id"] for cs in templates.clients["Produce:acks=1"] for c in cs
                  if c["client_id"])
    fault = Fault("slow_client", 7, T0, T0 + WINDOW_MS, delay_ms=600.0,
                  client_id=f"{client}-{7 % 50}")
    full = FleetSim(templates, 20, faults=[fault]).window(T0)
    lean = FleetSim(templates, 20, faults=[fault], exemplar_slowest=1, top_clients=0).window(T0)
    assert lean["request_windows"] == full["request_windows"]

    def per_window(rows):
        out = {}
        for r in rows:
            wid = r["record_id"].rsplit(":client=", 1)[0].removesuffix(":other")
            out.setdefault(wid, []).append(r)
        return out

    for wid, rows in per_window(full["client_send_windows"]).items():
        kept = per_window(lean["client_send_windows"])[wid]
        assert sum(r["requests"] for r in kept) == sum(r["requests"] for r in rows)
        assert sum(sum(r["send_counts"]) for r in kept) == sum(r["requests"] for r in rows)
        assert [r["client_id"] for r in kept if r["client_id"]] == \
            [r["client_id"] for r in rows if r["client_id"] == fault.client_id]
    assert any(r["client_id"] == fault.client_id for r in lean["client_send_windows"])
    by_window = {}
    for e in lean["request_exemplars"]:
        if e["exemplar_reasons"] == ["slowest"]:
            by_window[e["window_id"]] = by_window.get(e["window_id"], 0) + 1
    assert by_window and max(by_window.values()) == 1
    assert {e["record_id"] for e in lean["request_exemplars"]} <= \
        {e["record_id"] for e in full["request_exemplars"]}
    assert len(lean["request_exemplars"]) < len(full["request_exemplars"]) / 2


def test_detection_times_a_fault_to_the_hand_over_and_keeps_the_timeline(sim):
    """bench_fleet scores as the matrix does: onset to the hand-over of the first
    evaluation that names the fault (its start kept beside it); a finding first seen
    before the onset is not the fault's."""
    from types import SimpleNamespace

    from bench.bench_fleet import detection
    from core.findings import AnomalyType

    def finding(entity, cause, first_seen_ms, kind=AnomalyType.SLOW_BROKER):
        return SimpleNamespace(type=kind, entity=entity, cause=cause,
                               first_seen_ms=first_seen_ms)

    client = next(f.client_id for f in sim.faults if f.kind == "slow_client")
    early = finding("broker:5", "old", ONSET - 3 * WINDOW_MS)
    seen = [(ONSET + 20_000, [early]),
            (ONSET + 30_000, [early, finding("broker:11", "slow_follower", ONSET),
                              finding("broker:10", "remote_produce_slow_follower", ONSET)]),
            (ONSET + 45_000, [finding("broker:5", "local_disk_or_page_cache", ONSET),
                              finding(f"client:{client}", "client_slow_read", ONSET,
                                      AnomalyType.SLOW_CLIENT),
                              finding("broker:77", "x", ONSET)])]
    handed = [now + 12_000 for now, _ in seen]
    out = detection(seen, handed, list(sim.faults), ONSET, sim)
    assert out["faults"]["slow_follower broker:11"] == {
        "after_onset_s": 42.0, "evaluated_s": 30.0, "type": "slow_broker",
        "cause": "slow_follower", "entity": "broker:11"}
    assert out["faults"]["slow_broker broker:5"]["after_onset_s"] == 57.0
    assert [t["evaluated_s"] for t in out["timeline"]] == [20.0, 30.0, 45.0]
    assert "slow_broker broker:10 remote_produce_slow_follower" in out["timeline"][1]["findings"]
    assert out["other_findings"] == [("slow_broker", "broker:77", "x")]
