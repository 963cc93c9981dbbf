"""The request-log windows end to end (issue 24): a recorded cluster's real request
logs through the real request-log agent, the landing folder and the
silver query, into the four window tables. What must hold whatever the windows: every
request line is counted in exactly one window row, only OffsetCommit lines still go out
whole, nothing is quarantined, and every exemplar points at a window row."""

from __future__ import annotations

import dataclasses
import lzma

import pytest

from matrix.corpus import prepare_replay, recordings

RECORDING = "throttled-cleaner-3b"     # three brokers, one of the corpus's smallest


@pytest.fixture(scope="module")
def lake(spark, kmon_config, tmp_path_factory):
    rec = recordings(names=[RECORDING])[0]
    config = kmon_config
    prepared = prepare_replay(spark, config, rec, tmp_path_factory.mktemp("windows"))
    lines = {}
    for node in sorted((rec.path / "raw").glob("node-*")):
        packed = node / "kafka-request.log.xz"
        text = lzma.decompress(packed.read_bytes()) if packed.exists() else b""
        lines[int(node.name.split("-")[1])] = text.count(b"\n")
    return prepared.lake_root, lines


def _silver(spark, root, name):
    return spark.read.format("delta").load(f"{root}/silver/{name}")


def test_every_request_line_is_in_exactly_one_window(spark, lake):
    root, lines = lake
    counted = {r["broker"]: r["n"] for r in _silver(spark, root, "request_windows")
               .groupBy("broker").agg({"requests": "sum"})
               .withColumnRenamed("sum(requests)", "n").collect()}
    assert counted == {b: n for b, n in lines.items() if n}
    assert sum(counted.values()) > 10_000


def test_only_commits_go_out_whole_and_nothing_is_quarantined(spark, lake):
    root, _ = lake
    apis = {r["api"] for r in _silver(spark, root, "request_stages").select("api").distinct()
            .collect()}
    assert apis <= {"OffsetCommit", "TxnOffsetCommit"} and apis
    assert _silver(spark, root, "quarantine").count() == 0


def test_exemplars_and_side_tables_belong_to_their_windows(spark, lake):
    root, _ = lake
    windows = _silver(spark, root, "request_windows").select("record_id")
    exemplars = _silver(spark, root, "request_exemplars")
    assert exemplars.count() > 0
    assert exemplars.join(windows, exemplars.window_id == windows.record_id,
                          "left_anti").count() == 0
    assert _silver(spark, root, "follower_fetch_windows").count() > 0
    assert _silver(spark, root, "client_send_windows").count() > 0


def _client_lines(rec_path):
    """(broker, record) of every client-traffic line of the recording's request logs."""
    from ingest.request_log import parse_request_line

    for node in sorted((rec_path / "raw").glob("node-*")):
        packed = node / "kafka-request.log.xz"
        if not packed.exists():
            continue
        broker = int(node.name.split("-")[1])
        for raw in lzma.decompress(packed.read_bytes()).splitlines():
            r = parse_request_line(raw, cluster="c", broker=broker)
            if not r["is_controller_traffic"]:
                yield broker, r


def _exact_p99s(rec_path) -> dict[tuple, dict[str, float | int]]:
    """Per (broker, api, window start): the request count and the exact nearest-rank p99
    of each stage and of total - remote, from the raw request-log lines (client traffic)."""
    import math
    from collections import defaultdict

    fields = {"total": "total_ms", "request_queue": "request_queue_ms", "local": "local_ms",
              "remote": "remote_ms", "throttle": "throttle_ms",
              "response_queue": "response_queue_ms", "send": "send_ms"}
    values: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for broker, r in _client_lines(rec_path):
        v = values[(broker, r["api"], r["ts_ms"] - r["ts_ms"] % 10_000)]
        for stage, f in fields.items():
            v[stage].append(r[f])
        v["total_minus_remote"].append(max(r["total_ms"] - r["remote_ms"], 0.0))

    def p99(xs: list[float]) -> float:
        return sorted(xs)[max(1, math.ceil(0.99 * len(xs))) - 1]
    return {k: {"requests": len(v["total"]), **{s: p99(xs) for s, xs in v.items()}}
            for k, v in values.items()}


def test_stage_p99s_are_within_the_bucket_error_of_the_exact_ones(spark, lake, kmon_config):
    """Issue 24's accuracy criterion, on a real cluster's request log: every window's p99
    per broker, API and stage, as the slow-broker detector reads it,
    is within ALPHA (2 %) of the exact nearest-rank p99 of the raw lines."""
    from core.latency_histogram import ALPHA
    from infra.lake import Lake
    from infra.lake_sql import LakeSql
    from evaluation.inputs.request_windows import STAGE_FIELDS, read_window_stage_windows
    from evaluation.inputs.tables import TimeRange

    root, _ = lake
    exact = _exact_p99s(recordings(names=[RECORDING])[0].path)
    start = min(w for _, _, w in exact)
    end = max(w for _, _, w in exact) + 10_000
    sb = kmon_config.slow_broker
    rows = read_window_stage_windows(LakeSql(Lake(root)), sb, TimeRange(start, end))
    expected = {k for k in exact if k[1] in sb.watched_apis}
    assert {(r.broker, r.api, r.window_start_ms) for r in rows} == expected
    for r in rows:
        want = exact[(r.broker, r.api, r.window_start_ms)]
        assert r.requests == want["requests"]
        for stage, field in STAGE_FIELDS.items():
            got = getattr(r, field)
            assert abs(got - want[stage]) <= ALPHA * want[stage] * (1 + 1e-9), (r, stage)


def test_producer_times_are_the_raw_lines_own_times_and_queued_shares(spark, lake, kmon_config):
    """The slow-link rule's own-request times (counted at the edge,
    merged in Spark) against the raw lines, computed from every line: per
    window, broker and producer the Produce requests and the share of those following
    another on their connection (any API, same window) that the broker read within
    QUEUED_GAP_MS of answering it, exactly; the TotalTime p50 and p99 within 2 %."""
    from collections import defaultdict

    from infra.lake import Lake
    from infra.lake_sql import LakeSql
    from evaluation.inputs.request_windows import read_window_producer_times
    from evaluation.inputs.tables import TimeRange
    from schemas.client_send_windows import QUEUED_GAP_MS

    root, _ = lake
    sb = kmon_config.slow_broker
    win = sb.window_ms
    lines = list(_client_lines(recordings(names=[RECORDING])[0].path))
    producers = {r["client_id"] for _, r in lines if r["api"] == "Produce"}
    conns = defaultdict(list)
    for broker, r in lines:
        if r["client_id"] in producers:
            conns[(broker, r["client_id"], r["remote_addr"],
                   r["ts_ms"] - r["ts_ms"] % win)].append(r)
    exact: dict = defaultdict(lambda: [0, 0, []])
    for (broker, client, addr, start), rows in conns.items():
        rows.sort(key=lambda r: (r["ts_ms"], r["correlation_id"]))
        prev = None
        for r in rows:
            gap = None if prev is None or addr is None else (r["ts_ms"] - r["total_ms"]) - prev
            prev = r["ts_ms"]
            if r["api"] == "Produce":
                e = exact[(broker, start, client)]
                e[2].append(r["total_ms"])
                if gap is not None:
                    e[0] += 1
                    e[1] += gap <= QUEUED_GAP_MS
    start = min(w for _, w, _ in exact)
    end = max(w for _, w, _ in exact) + win
    got = read_window_producer_times(LakeSql(Lake(root)), sb, TimeRange(start, end),
                                     producers)
    assert {(x.broker, x.window_start_ms, x.client_id) for x in got} == set(exact)
    queued = 0
    for x in got:
        followed, n_queued, totals = exact[(x.broker, x.window_start_ms, x.client_id)]
        totals.sort()
        assert x.requests == len(totals)
        assert x.queued_share == (n_queued / followed if followed else None), x
        assert _within(x.total_p99_ms, _nearest_rank(totals, 0.99)), x
        assert _within(x.total_p50_ms, _nearest_rank(totals, 0.5)), x
        queued += n_queued
    assert queued and len(producers) > 1


def _exact_minutes(rec_path) -> dict[tuple, dict[str, list[float]]]:
    """Per (broker, request key, minute start): each stage's values from the raw
    request-log lines (client traffic), sorted."""
    from collections import defaultdict

    from ingest.request_windows import request_key

    values: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for broker, r in _client_lines(rec_path):
        key = request_key(r["api"], r["fetch_kind"], r["acks"])
        v = values[(broker, key, r["ts_ms"] - r["ts_ms"] % 60_000)]
        for stage in GOLD_STAGES:
            v[stage].append(r[f"{stage}_ms"])
    return {k: {s: sorted(xs) for s, xs in v.items()} for k, v in values.items()}


GOLD_STAGES = ("total", "request_queue", "local", "remote", "throttle", "response_queue",
               "send")


def _nearest_rank(xs: list[float], q: float) -> float:
    import math
    return xs[max(1, math.ceil(q * len(xs))) - 1]


def _within(got: float, want: float) -> bool:
    from core.latency_histogram import ALPHA
    return abs(got - want) <= ALPHA * want * (1 + 1e-9)


@pytest.fixture(scope="module")
def gold_minutes(spark, lake, tmp_path_factory):
    """The gold minute tables' streaming query over the replayed silver.request_windows,
    with a 1-s watermark (the recording is shorter than the pipeline's 330 s lateness, so
    the pipeline's own run released no minute): every minute but the last is released."""
    import os

    from infra.lake import Lake
    from infra.lake_sql import LakeSql
    from jobs.gold_windows import start_minute_tables

    root, _ = lake
    gold_root = tmp_path_factory.mktemp("gold-windows")
    os.symlink(f"{root}/silver", gold_root / "silver")
    glake = Lake(str(gold_root))
    start_minute_tables(spark, glake, 1, {"availableNow": True}).awaitTermination()
    out = {t: spark.read.format("delta").load(glake.table("gold", t)).collect()
           for t in ("request_keys_1m", "request_stages_1m", "fleet_stages_1m")}
    return {**out, "lake": glake}


def test_gold_key_minutes_are_within_the_bucket_error_of_the_exact_ones(lake, gold_minutes):
    """Issue 24's accuracy criterion on gold: per broker, request key and minute, the
    count, max (exact), p50 and p99, and p999 where the minute has 1,000 requests, within
    ALPHA of the exact nearest-rank percentiles of the raw lines."""
    exact = _exact_minutes(recordings(names=[RECORDING])[0].path)
    rows = gold_minutes["request_keys_1m"]
    last = max(m for _, _, m in exact)
    released = {k for k in exact if k[2] < last}
    got = {(r.broker, r.key, int(r.window_start.timestamp() * 1000)): r for r in rows}
    assert set(got) == released and len(released) > 20
    p999s = 0
    for k, r in got.items():
        want = exact[k]
        assert r.requests == len(want["total"]), k
        for stage in GOLD_STAGES:
            xs = want[stage]
            assert getattr(r, f"{stage}_max_ms") == xs[-1], (k, stage)
            for label, q in (("p50", 0.5), ("p99", 0.99)):
                assert _within(getattr(r, f"{stage}_{label}_ms"), _nearest_rank(xs, q)), \
                    (k, stage, label)
            if len(xs) >= 1000:
                p999s += 1
                assert _within(getattr(r, f"{stage}_p999_ms"), _nearest_rank(xs, 0.999)), \
                    (k, stage)
    assert p999s > 0


def test_gold_api_minutes_and_the_fleet_rollup_merge_the_keys_and_brokers(lake,
                                                                         gold_minutes):
    """gold.request_stages_1m (per API, keys merged) and gold.fleet_stages_1m (per key,
    brokers merged) against the exact percentiles of the same lines, grouped the same."""
    from collections import defaultdict

    exact = _exact_minutes(recordings(names=[RECORDING])[0].path)
    last = max(m for _, _, m in exact)
    by_api: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    fleet: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    brokers: dict[tuple, set[int]] = defaultdict(set)
    for (broker, key, minute), v in exact.items():
        if minute == last:
            continue
        for stage, xs in v.items():
            by_api[(broker, key.split(":")[0], minute)][stage] += xs
            fleet[(key, minute)][stage] += xs
        brokers[(key, minute)].add(broker)
    for grouped, rows, key_of in (
            (by_api, gold_minutes["request_stages_1m"], lambda r: (r.broker, r.api)),
            (fleet, gold_minutes["fleet_stages_1m"], lambda r: (r.key,))):
        got = {(*key_of(r), int(r.window_start.timestamp() * 1000)): r for r in rows}
        assert set(got) == set(grouped)
        for k, r in got.items():
            want = {s: sorted(xs) for s, xs in grouped[k].items()}
            assert r.requests == len(want["total"]), k
            for stage in GOLD_STAGES:
                assert _within(getattr(r, f"{stage}_p99_ms"),
                               _nearest_rank(want[stage], 0.99)), (k, stage)
    for r in gold_minutes["fleet_stages_1m"]:
        minute = int(r.window_start.timestamp() * 1000)
        assert r.brokers == len(brokers[(r.key, minute)])
        assert sum(r.total_counts) == r.requests


def test_the_reports_stage_minutes_come_from_the_window_histograms(spark, lake):
    """The incident report's fallback from silver (gold has not written the minutes yet:
    here it wrote none, the recording being shorter than the lateness): the SQL it
    prints, run as printed, gives each minute's request count and each stage's p99
    within ALPHA of the exact ones."""
    from infra.lake import Lake, register_tables
    from reports import queries as q

    root, _ = lake
    register_tables(spark, Lake(root))
    exact = _exact_minutes(recordings(names=[RECORDING])[0].path)
    cluster = _silver(spark, root, "request_windows").first()["cluster"]
    start = min(m for _, _, m in exact)
    end = max(m for _, _, m in exact) + 60_000
    checked = 0
    for broker in sorted({b for b, _, _ in exact}):
        sql = q.stages_silver(cluster, broker, "Produce", start, end)
        rows = spark.sql(sql).collect()
        want = {}
        for (b, key, minute), v in exact.items():
            if b == broker and key.startswith("Produce"):
                for stage, xs in v.items():
                    want.setdefault(minute, {}).setdefault(stage, []).extend(xs)
        assert {r.t_ms for r in rows} == set(want)
        for r in rows:
            w = {s: sorted(xs) for s, xs in want[r.t_ms].items()}
            assert r.requests == len(w["total"])
            for stage in GOLD_STAGES:
                assert _within(getattr(r, f"{stage}_p99_ms"), _nearest_rank(w[stage], 0.99))
                checked += 1
    assert checked > 50


def test_a_slow_broker_finding_carries_the_slowest_exemplars(spark, lake):
    """A slow-broker finding's evidence holds the slow requests from
    silver.request_exemplars: the edge keeps the slowest requests of every window, so the
    first is the slowest Produce line of the broker in the span, exactly; every one is a
    real line (its correlation id and times are the line's)."""
    from core.findings import ActionKind, AnomalyType, Detection, EntityKind, Severity
    from infra.lake import Lake
    from infra.lake_sql import LakeSql
    from ingest.request_log import parse_request_line
    from evaluation.slow_requests import attach_slow_requests

    root, _ = lake
    rec = recordings(names=[RECORDING])[0]
    cluster = _silver(spark, root, "request_windows").first()["cluster"]
    lines = {}
    raw = lzma.decompress((rec.path / "raw" / "node-1" / "kafka-request.log.xz").read_bytes())
    for line in raw.splitlines():
        r = parse_request_line(line, cluster=cluster, broker=1)
        if r["api"] == "Produce" and not r["is_controller_traffic"]:
            lines[r["correlation_id"], r["client_id"]] = r
    start = min(r["ts_ms"] for r in lines.values())
    end = max(r["ts_ms"] for r in lines.values()) + 1
    other = Detection(cluster=cluster, type=AnomalyType.OFFSET_REWIND,
                      severity=Severity.INFO, entity_kind=EntityKind.GROUP, entity="group:g",
                      first_seen_ms=start, last_seen_ms=end, cause="x", explanation="x",
                      suggested_action=ActionKind.NONE, evidence={"broker": 1, "api": "Produce"})
    slow = dataclasses.replace(other, type=AnomalyType.SLOW_BROKER,
                               entity_kind=EntityKind.BROKER, entity="broker:1")
    out = attach_slow_requests(LakeSql(Lake(root)), [other, slow], limit=5)
    assert out[0] == other
    got = out[1].evidence["slow_requests"]
    assert out[1].evidence["slow_requests_source"] == "silver.request_exemplars"
    assert len(got) == 5 and got[0]["judged_ms"] == max(r["total_ms"] for r in lines.values())
    assert [g["judged_ms"] for g in got] == sorted((g["judged_ms"] for g in got), reverse=True)
    for g in got:
        line = lines[g["correlation_id"], g["client_id"]]
        assert (g["ts_ms"], g["total_ms"], g["remote_ms"]) == (
            line["ts_ms"], round(line["total_ms"], 3), round(line["remote_ms"], 3))
        assert "slowest" in g["kept_because"] or "slow" in g["kept_because"]


def test_one_read_of_the_follower_windows_gives_the_fetches_and_the_replicas_sends(
        spark, lake, kmon_config):
    """silver.follower_fetch_windows is read once for both of its uses
    (read_window_follower_windows): per leader, follower and window, a fetch window and
    the replica's send window (client broker-<id>, API Fetch), each with the exact request
    count of the raw lines, and the sends at or over the Fetch threshold counted from the
    merged histogram: between the exact counts at the threshold +/- ALPHA. The threshold
    is the raw follower sends' 99th percentile, so some windows have slow sends."""
    import math
    from collections import Counter

    from core.latency_histogram import ALPHA
    from detectors.slow_broker import ClientSendWindow, FollowerFetchWindow
    from infra.lake import Lake
    from infra.lake_sql import LakeSql
    from evaluation.inputs.request_windows import read_window_follower_windows
    from evaluation.inputs.tables import TimeRange

    root, _ = lake
    sends = [(b, r["fetch_replica_id"], r["ts_ms"] - r["ts_ms"] % 10_000, r["send_ms"])
             for b, r in _client_lines(recordings(names=[RECORDING])[0].path)
             if r["fetch_kind"] == "follower"]
    times = sorted(x[3] for x in sends)
    threshold = max(times[math.ceil(0.99 * len(times)) - 1], 0.01)
    sb = dataclasses.replace(kmon_config.slow_broker, threshold_ms=threshold,
                             api_threshold_ms={})
    windows = sorted({w for _, _, w, _ in sends})
    both = read_window_follower_windows(LakeSql(Lake(root)), sb,
                                        TimeRange(windows[0], windows[-1] + 10_000))
    fetches = {(x.leader, x.follower, x.window_start_ms): x for x in both
               if isinstance(x, FollowerFetchWindow)}
    replicas = {(x.broker, int(x.client_id.removeprefix("broker-")), x.window_start_ms): x
                for x in both if isinstance(x, ClientSendWindow)}
    requests = Counter((b, f, w) for b, f, w, _ in sends)
    assert fetches.keys() == replicas.keys() == requests.keys()
    low = Counter((b, f, w) for b, f, w, t in sends if t >= threshold * (1 + ALPHA))
    high = Counter((b, f, w) for b, f, w, t in sends if t >= threshold * (1 - ALPHA))
    for k, n in requests.items():
        x = replicas[k]
        assert fetches[k].requests == x.requests == n, k
        assert (x.api, x.follower, x.send_p99_ms) == ("Fetch", True, fetches[k].send_p99_ms)
        assert low[k] <= x.slow_requests <= high[k], (k, x.slow_requests, low[k], high[k])
    assert sum(x.slow_requests for x in replicas.values()) > 0


def test_held_requests_are_the_kept_lines_held_in_their_brokers_own_stages(lake, kmon_config):
    """read_held_requests gives the requests kept whole that their brokers held in their
    own stages (RequestQueue + Local + ResponseQueue) at least the lowest watched
    threshold / peer_ratio: each is a raw line's, and every line over the exemplar
    threshold that was held that long is there (the edge keeps those whole, up to its cap
    per key and window)."""
    from collections import Counter

    from core.signals import judged_ms
    from infra.lake import Lake
    from infra.lake_sql import LakeSql
    from evaluation.inputs.request_windows import read_held_requests
    from evaluation.inputs.tables import TimeRange

    root, _ = lake
    sb = dataclasses.replace(kmon_config.slow_broker, threshold_ms=30.0, api_threshold_ms={},
                             peer_ratio=3.0)
    lines = {}
    for b, r in _client_lines(recordings(names=[RECORDING])[0].path):
        own = r["request_queue_ms"] + r["local_ms"] + r["response_queue_ms"]
        lines.setdefault((b, r["ts_ms"], round(r["total_ms"], 3)), []).append((own, r))
    start = min(ts for _, ts, _ in lines)
    got = read_held_requests(LakeSql(Lake(root)), sb, TimeRange(start, max(
        ts for _, ts, _ in lines) + 1))
    assert got and [h.end_ms for h in got] == sorted(h.end_ms for h in got)
    for h in got:
        assert h.held_ms >= 10.0
        assert any(abs(own - h.held_ms) < 0.01 and r["api"] == h.api
                   for own, r in lines[(h.broker, h.end_ms, round(h.total_ms, 3))]), h
    found = {(h.broker, h.end_ms, round(h.total_ms, 3)) for h in got}
    over = {(k, r["api"]) for k, xs in lines.items() for _, r in xs if judged_ms(
        r["api"], r["total_ms"], r["remote_ms"]) >= kmon_config.request_log.exemplar_slow_ms}
    # the edge keeps exemplar_slow_cap of them per key and window (a sample past it): the
    # broker/API/windows with no more than that many keep them all
    per_window = Counter((k[0], api, k[1] // 10_000) for k, api in over)
    slow = {k for k, api in over if per_window[(k[0], api, k[1] // 10_000)]
            <= kmon_config.request_log.exemplar_slow_cap and any(
                own >= 10.0 for own, _ in lines[k])}
    assert len(slow) > 100 and slow <= found
    # with no API watched no row is judged, and there is no threshold to read from
    unwatched = dataclasses.replace(sb, watched_apis=[])
    assert read_held_requests(LakeSql(Lake(root)), unwatched, TimeRange(start, start + 1)) == []


def test_the_live_detectors_cached_window_reads_equal_whole_reads(spark, lake, kmon_config):
    """The live detector reads only the newest windows again and keeps the older ones
    (evaluation/inputs/window_cache.py): step by step over the recording, as the
    detector query evaluates, each of the four window reads through the cache gives the
    same rows as reading the whole range, while reading about 60 s of the 300 (the held
    requests by their own end time)."""
    from infra.lake import Lake
    from infra.lake_sql import LakeSql
    from evaluation.inputs.request_windows import (read_held_requests,
                                                      read_window_client_sends,
                                                      read_window_follower_windows,
                                                      read_window_stage_windows)
    from evaluation.inputs.tables import TimeRange
    from evaluation.inputs.window_cache import WindowReadCache

    root, _ = lake
    sb = kmon_config.slow_broker
    ts = [r["ts_ms"] for r in _silver(spark, root, "request_windows").select("ts_ms").collect()]
    cache = WindowReadCache(reread_s=60)
    sql = LakeSql(Lake(root))
    reads = {"stage_windows": read_window_stage_windows, "client_sends": read_window_client_sends,
             "follower_windows": read_window_follower_windows, "held": read_held_requests}
    first = (min(ts) + max(ts)) // 2 // 10_000 * 10_000 + 3_000
    now, seen = first, 0
    while now <= first + 100_000:
        r = TimeRange(now - 300_000, now)
        for name, read in reads.items():
            def whole(sub, read=read):
                return read(sql, sb, sub)
            got = cache.read(name, r, sb.window_ms, whole,
                             **({"time_of": lambda h: h.end_ms} if name == "held" else {}))
            want = whole(r)
            assert sorted(map(repr, got)) == sorted(map(repr, want)), (name, now)
            seen += len(want)
            assert cache.windows_read[name] <= 70_000 or now == first
        now += 20_000          # every other tick: still a continuation
    assert seen > 100


def test_baselines_from_gold_minutes_and_the_silver_tail_equal_silver_alone(
        spark, lake, gold_minutes, kmon_config, tmp_path):
    """The slow-broker baselines read the minutes gold.request_stages_1m
    holds (its own-time p99 column) and merge only the newer windows from silver: on the
    recording, with gold holding all but its last minute, they equal the baselines merged
    from silver alone."""
    import os

    from infra.lake import Lake
    from infra.lake_sql import LakeSql
    from evaluation.inputs.request_windows import read_window_baselines
    from evaluation.inputs.tables import TimeRange
    from jobs.gold_windows import OWN_TIME_P99

    root, _ = lake
    sb = kmon_config.slow_broker
    gold = [m for m in gold_minutes["request_stages_1m"] if m[OWN_TIME_P99] is not None]
    assert gold and all(m[OWN_TIME_P99] <= m["total_p99_ms"] * 1.02 + 1e-9 for m in gold)
    ts = [r["ts_ms"] for r in _silver(spark, root, "request_windows").select("ts_ms").collect()]
    r = TimeRange(max(ts) + 20_000, max(ts) + 320_000)
    silver_only = tmp_path / "silver-only"
    silver_only.mkdir()
    os.symlink(f"{root}/silver", silver_only / "silver")
    want = read_window_baselines(LakeSql(Lake(str(silver_only))), sb, r, min_minutes=2)
    got = read_window_baselines(LakeSql(gold_minutes["lake"]), sb, r, min_minutes=2)
    assert want and sorted(map(repr, got)) == sorted(map(repr, want))
