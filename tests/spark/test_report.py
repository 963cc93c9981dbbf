"""The incident report on real Spark and Delta: an unclean election on orders-2 (broker 1 ->
3) sends a consumer group back from 950 to 900. The detectors and correlation make the two
findings; silver tables hold the telemetry and the gold tables are made from them by the
gold job's own functions; the report is built and rendered, and every SQL statement it
embeds is run again and must return the numbers it shows."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, BooleanType, LongType, StringType, StructField, StructType

from core.findings import AnomalyType, update_findings
from detectors.correlation import correlate
from detectors.lost_range import UncleanElection
from detectors.offset_rewind import detect_offset_anomalies
from detectors.partition_signals import GroupMembership, OffsetCommit, PartitionOffsets
from detectors.unclean_election import detect_unclean_elections
from infra.lake import Lake, register_tables
from ingest.request_windows import aggregate
from jobs.gold import offset_commits_per_minute, offset_lag
from jobs.gold_windows import minute_tables
from reports import queries
from reports.incident import ReportError, build_report
from reports.render import render_html
from reports.svg_chart import format_number, utc
from schemas import offset_commits, partition_offsets, request_windows

REPO = Path(__file__).resolve().parents[2]
T0 = 1_714_557_600_000  # 2024-05-01 10:00:00 UTC
MIN = 60_000
GROUP = "bill'ing \"x\" <b>"  # a group id may hold anything; the SQL must quote it
TABLES = (("gold", "anomalies"), ("gold", "request_stages_1m"), ("gold", "offset_commits_1m"),
          ("gold", "offset_lag_1m"), ("silver", "request_windows"), ("silver", "offset_commits"),
          ("silver", "partition_offsets"))

ANOMALIES_SCHEMA = StructType([
    *(StructField(c, StringType()) for c in ("finding_id", "cluster", "type", "severity",
                                             "entity_kind", "entity")),
    StructField("first_seen_ms", LongType()), StructField("last_seen_ms", LongType()),
    *(StructField(c, StringType()) for c in ("status", "evidence_json", "cause", "explanation",
                                             "suggested_action", "incident_id")),
    StructField("related", ArrayType(StringType())), StructField("resolved_ms", LongType()),
    StructField("is_root_cause", BooleanType()),
])


def at(seconds: float) -> int:
    return T0 + int(seconds * 1000)


# gold.request_stages_1m holds broker 1's minutes before 10:09 only, gold.offset_commits_1m
# and gold.offset_lag_1m the group's
GOLD_UNTIL_S = 540
COMMITS = [(60, 800), (270, 950), (360, 900), (420, 910), (600, 930), (780, 960)]
ENDS = [(0, 780), (60, 820), (120, 860), (180, 900), (240, 990), (290, 1000), (310, 900),
        (420, 920), (540, 935), (600, 940), (720, 960), (840, 975)]
TOMBSTONE_S = 790  # in 13:00's minute, after its commit (silver only: after gold's last)
# the columns of the group charts, as the gold tables name them
COMMIT_COLUMNS = ("last_offset", "min_offset", "max_offset", "commits")
LAG_COLUMNS = ("lag", "committed_offset", "end_offset", "start_offset")


def incident_findings():
    election = UncleanElection("c1", "orders", 2, at(300), old_leader=1, new_leader=3,
                               leader_epoch=5)
    commits = [OffsetCommit("c1", GROUP, "orders", 2, o, at(t)) for t, o in COMMITS]
    offsets = [PartitionOffsets("c1", "orders", 2, at(t), end, 0) for t, end in ENDS]
    now = at(900)
    detections = (detect_unclean_elections([election], offsets=offsets, commits=commits)
                  + detect_offset_anomalies(commits, offsets=offsets,
                                            memberships=[GroupMembership("c1", GROUP, at(0), 2)],
                                            now_ms=now))
    return correlate(update_findings([], detections, now_ms=now))


def _stage_rows() -> list[dict]:
    rows = []
    for i in range(120):  # every 10 s for 20 minutes
        t = at(10 * i)
        slow = 30 <= i < 40  # the minutes around the election
        for broker in (1, 3):
            for n in range(3):
                remote = (400.0 if slow and broker == 1 else 5.0) + 7 * n + (i % 6)
                stages = {"request_queue_ms": 1.0 + n, "local_ms": 2.0 + (i % 4), "remote_ms":
                          remote, "throttle_ms": 0.0, "response_queue_ms": 0.5,
                          "send_ms": 0.25 * (n + 1)}
                rows.append({"cluster": "c1", "broker": broker, "ts_ms": t + n, "api": "Produce",
                             "api_key": 0, "total_ms": sum(stages.values()),
                             "is_controller_traffic": False, **stages})
        rows.append({"cluster": "c1", "broker": 1, "ts_ms": t + 5, "api": "Fetch", "api_key": 1,
                     "total_ms": 500.0, "request_queue_ms": 0.0, "local_ms": 1.0,
                     "remote_ms": 499.0, "throttle_ms": 0.0, "response_queue_ms": 0.0,
                     "send_ms": 0.0, "is_controller_traffic": False})
        # quorum traffic on broker 3: must not reach any p99
        rows.append({"cluster": "c1", "broker": 3, "ts_ms": t + 7, "api": "Produce",
                     "api_key": 0, "total_ms": 9000.0, "request_queue_ms": 9000.0,
                     "local_ms": 0.0, "remote_ms": 0.0, "throttle_ms": 0.0,
                     "response_queue_ms": 0.0, "send_ms": 0.0, "is_controller_traffic": True})
    return rows


def _window_rows() -> list[dict]:
    """silver.request_windows rows of `_stage_rows()`: each broker's requests through the
    edge aggregation, as its agent would send them."""
    by_broker: dict[int, list[dict]] = {}
    for r in sorted(_stage_rows(), key=lambda r: r["ts_ms"]):
        lines = by_broker.setdefault(r["broker"], [])
        lines.append({**r, "fetch_kind": None, "fetch_replica_id": None, "acks": 1,
                      "client_id": "p", "remote_addr": "10.0.0.9:4000", "error_codes": [],
                      "request_bytes": 100, "response_bytes": 10,
                      "record_id": f"c1:{r['broker']}:1:{100 * len(lines)}"})
    return [o.record for b, lines in sorted(by_broker.items())
            for o in aggregate(lines, "c1", b) if o.stream == "request_windows"]


def _gold_stage_minutes(windows):
    """gold.request_stages_1m as the gold job makes it (its own functions), batch."""
    return minute_tables(windows)["request_stages_1m"]


def _ts(seconds: float) -> str:
    return f"timestamp_millis({at(seconds)})"


def _silver(spark, schema, rows):
    return (spark.createDataFrame(rows, schema)
            .withColumn("ts", F.timestamp_millis("ts_ms"))
            .withColumn("date", F.to_date("ts")))


def _write(df, lake: Lake, layer: str, name: str, partitioned: bool = True) -> None:
    w = df.write.format("delta").mode("overwrite")
    (w.partitionBy("date") if partitioned else w).save(lake.table(layer, name))


def _drop_registrations(spark) -> None:
    # The session is shared by the whole test run: another test may have registered the
    # same names over its own lake.
    for layer, name in TABLES:
        spark.sql(f"DROP TABLE IF EXISTS {layer}.{name}")


@pytest.fixture(scope="module")
def incident(spark, tmp_path_factory):
    lake = Lake(str(tmp_path_factory.mktemp("report_lake")))
    findings = incident_findings()
    assert {f.type for f in findings} == {AnomalyType.UNCLEAN_ELECTION, AnomalyType.OFFSET_REWIND}

    stages = _silver(spark, request_windows.SCHEMA, _window_rows())
    _write(stages, lake, "silver", "request_windows")
    # gold for broker 1 only: broker 3's chart must fall back to silver; and broker 1's gold
    # ends at 10:09, before the incident does (13:00), as when the gold job's watermark has
    # not passed the later minutes yet (the demo's report at its end): its chart must go on
    # from silver
    _write(_gold_stage_minutes(stages.where(f"broker = 1 AND ts_ms < {at(GOLD_UNTIL_S)}")),
           lake, "gold", "request_stages_1m")
    commits = _silver(spark, offset_commits.SCHEMA, [
        {"cluster": "c1", "ts_ms": at(t), "group_id": GROUP, "topic": "orders", "partition": 2,
         "offset": o, "is_tombstone": False, "source_partition": 7, "source_offset": 100 + i}
        for i, (t, o) in enumerate(COMMITS)] + [
        # the group's offset deleted after its last commit: no commit, no offset
        {"cluster": "c1", "ts_ms": at(TOMBSTONE_S), "group_id": GROUP, "topic": "orders",
         "partition": 2, "offset": None, "is_tombstone": True, "source_partition": 7,
         "source_offset": 100 + len(COMMITS)}])
    _write(commits, lake, "silver", "offset_commits")
    # the group's gold offset tables end at 10:09 too (the incident's last finding is at
    # 13:00): the commits minute table waits out a 10-minute watermark; its charts must go
    # on from silver
    _write(offset_commits_per_minute(commits).where(f"window_start < {_ts(GOLD_UNTIL_S)}"),
           lake, "gold", "offset_commits_1m")
    ends = _silver(spark, partition_offsets.SCHEMA, [
        {"cluster": "c1", "ts_ms": at(t), "topic": "orders", "partition": 2,
         "earliest_offset": 0, "latest_offset": end, "leader": 1 if t < 300 else 3}
        for t, end in ENDS])
    _write(ends, lake, "silver", "partition_offsets")
    _write(offset_lag(ends, commits).where(f"window_start < {_ts(GOLD_UNTIL_S)}"), lake,
           "gold", "offset_lag_1m")
    _write(spark.createDataFrame([f.to_row() for f in findings], ANOMALIES_SCHEMA), lake,
           "gold", "anomalies", partitioned=False)

    _drop_registrations(spark)
    root = next(f for f in findings if f.type is AnomalyType.UNCLEAN_ELECTION)
    data = build_report(spark, lake, incident_id=root.finding_id, now_ms=at(1000))
    yield lake, findings, data, render_html(data)
    _drop_registrations(spark)


def _rows(spark, sql):
    return tuple(tuple(tuple(v) if isinstance(v, list) else v for v in r)
                 for r in spark.sql(sql).collect())


def test_chain_summary_and_window(incident):
    _lake, findings, data, _html = incident
    election = next(f for f in findings if f.type is AnomalyType.UNCLEAN_ELECTION)
    rewind = next(f for f in findings if f.type is AnomalyType.OFFSET_REWIND)
    assert [(c.finding.finding_id, c.caused_by) for c in data.chain] == [
        (election.finding_id, None), (rewind.finding_id, election.finding_id)]
    assert data.chain[0].finding == election and data.chain[1].finding == rewind
    s = data.summary.records()[0]
    # the rewind recovered with the commit of 960 at 13:00
    assert s == {"findings": 2, "first_seen_ms": at(300), "last_seen_ms": at(780),
                 "worst_severity": "critical", "open_findings": 2,
                 "root_finding_ids": (election.finding_id,)}
    assert (data.start_ms, data.end_ms) == (at(300) - 15 * MIN, at(780) + 15 * MIN)


def test_every_embedded_sql_returns_the_rows_the_report_holds(spark, incident):
    _lake, _findings, data, _html = incident
    assert len(data.queries()) == 1 + 2 + 2 * 2 + 3  # summary, findings, 2 brokers, 1 group
    for q in data.queries():
        assert _rows(spark, q.sql) == q.rows, q.sql
        assert tuple(spark.sql(q.sql).columns) == q.columns


def _silver_stage_minutes(spark, lake, broker: int) -> list[tuple]:
    """What the gold job would write for the broker's Produce minutes, from all of silver."""
    silver = spark.read.format("delta").load(lake.table("silver", "request_windows"))
    return [tuple(r) for r in _gold_stage_minutes(silver.where(f"broker = {broker}"))
            .where("api = 'Produce'").orderBy("window_start")
            .select(F.unix_millis("window_start").alias("t"), "requests",
                    *queries.P99_COLUMNS).collect()]


def _same_rows(got: list[tuple], want: list[tuple]) -> bool:
    """Equal rows, the p99s to float rounding (the report's SQL and the gold job merge
    the same histograms in a different order)."""
    return len(got) == len(want) and all(
        len(g) == len(w) and all(x == pytest.approx(y, rel=1e-12) for x, y in zip(g, w))
        for g, w in zip(got, want))


def test_broker_stage_series_come_from_gold_or_fall_back_to_silver(spark, incident):
    lake, _findings, data, _html = incident
    assert [(b.broker, [c.attrs["api"] for c in b.charts]) for b in data.brokers] == [
        (1, ["Produce"]), (3, ["Produce"])]
    assert data.brokers[0].apis.rows == (("Produce", 162), ("Fetch", 54))
    gold_chart, silver_chart = data.brokers[0].charts[0], data.brokers[1].charts[0]
    assert gold_chart.source == "gold.request_stages_1m + silver.request_windows"
    assert silver_chart.source == "silver.request_windows"
    assert any("broker 3" in n.lower() for n in data.notes)

    gold = (spark.read.format("delta").load(lake.table("gold", "request_stages_1m"))
            .where("broker = 1 AND api = 'Produce'")
            .select(F.unix_millis("window_start").alias("t"), "remote_p99_ms").orderBy("t")
            .collect())
    assert [(t, v) for t, v in gold_chart.query.points("remote_p99_ms") if t < at(GOLD_UNTIL_S)
            ] == [(r["t"], r["remote_p99_ms"]) for r in gold
                  if data.start_ms <= r["t"] < data.end_ms]
    assert max(v for _, v in gold_chart.query.points("remote_p99_ms")) >= 400
    # the fallback computes what the gold job would have: same p99s, quorum traffic left out
    records = silver_chart.query.records()
    assert {r.pop("source") for r in records} == {"silver"}
    assert _same_rows(_silver_stage_minutes(spark, lake, 3), [tuple(r.values()) for r in records])
    assert max(silver_chart.query.column("request_queue_p99_ms")) < 10


def test_a_stage_chart_covers_the_incident_when_gold_has_not_caught_up(spark, incident):
    # broker 1's gold ends at 10:09; silver goes on to 10:19:50, past the incident's last
    # finding (13:00): the chart must reach silver's last minute, gold's minutes as gold
    # wrote them, the later ones as the gold job will write them
    lake, findings, data, _html = incident
    chart = data.brokers[0].charts[0]
    records = chart.query.records()
    assert [r["t_ms"] for r in records] == [T0 + i * MIN for i in range(20)]
    assert max(f.last_seen_ms for f in findings) < records[-1]["t_ms"]
    cut = at(GOLD_UNTIL_S) // MIN * MIN
    assert [r.pop("source") for r in records] == (["gold"] * ((cut - T0) // MIN)
                                                  + ["silver"] * ((T0 + 20 * MIN - cut) // MIN))
    expected = _silver_stage_minutes(spark, lake, 1)
    assert _same_rows([tuple(r.values()) for r in records if r["t_ms"] >= cut],
                      [e for e in expected if e[0] >= cut])
    assert any("broker 1 produce" in n.lower() and "silver" in n for n in data.notes)


def test_group_offsets_lag_and_rewinds(spark, incident):
    lake, _findings, data, _html = incident
    assert [(g.group, g.topic, g.partition) for g in data.groups] == [(GROUP, "orders", 2)]
    g = data.groups[0]
    assert g.rewinds.records() == [{"t_ms": at(360), "from_offset": 950, "to_offset": 900,
                                    "messages_back": 50}]
    offsets, lag = g.charts
    assert offsets.query.points("last_offset") == [
        (T0 + MIN, 800.0), (T0 + 4 * MIN, 950.0), (T0 + 6 * MIN, 900.0), (T0 + 7 * MIN, 910.0),
        (T0 + 10 * MIN, 930.0), (T0 + 13 * MIN, 960.0)]
    # gold.offset_lag_1m as the gold job writes it once it has caught up (the fixture's
    # table holds its minutes before GOLD_UNTIL_S)
    gold_lag = {t: v[0] for t, v in _gold_minutes(spark, lake)[1].items()}
    assert dict(lag.query.points("lag")) == {t: float(v) for t, v in gold_lag.items()}
    assert gold_lag[T0 + 4 * MIN] == 1000 - 950  # end 1000 at 4:50, last commit 950 at 4:30
    assert any(m.kind == "rewind" and m.t_ms == at(360) for m in offsets.markers)


def _gold_minutes(spark, lake) -> tuple[dict[int, tuple], dict[int, tuple]]:
    """What the gold job computes for the group's minutes from all of silver (its own
    functions): {minute: (last_offset, min_offset, max_offset, commits)} and
    {minute: (lag, committed_offset, end_offset, start_offset)}."""
    commits = spark.read.format("delta").load(lake.table("silver", "offset_commits"))
    ends = spark.read.format("delta").load(lake.table("silver", "partition_offsets"))

    def by_minute(df, columns):
        return {r[0]: tuple(r[1:]) for r in df.where(F.col("group_id") == GROUP)
                .select(F.unix_millis("window_start"), *columns).collect()}
    return (by_minute(offset_commits_per_minute(commits), COMMIT_COLUMNS),
            by_minute(offset_lag(ends, commits), LAG_COLUMNS))


def _gold_table(spark, lake, name: str, columns) -> dict[int, tuple]:
    return {r[0]: tuple(r[1:]) for r in spark.read.format("delta").load(lake.table("gold", name))
            .where(F.col("group_id") == GROUP)
            .select(F.unix_millis("window_start"), *columns).collect()}


def _chart_minutes(chart, columns) -> dict[str, dict[int, tuple]]:
    """{source: {t_ms: values}} of a chart's rows."""
    out: dict[str, dict[int, tuple]] = {}
    for r in chart.query.records():
        out.setdefault(r["source"], {})[r["t_ms"]] = tuple(r[c] for c in columns)
    return out


def test_group_charts_cover_the_incident_when_gold_has_not_caught_up(spark, incident):
    # the group's gold minutes end at 10:09; silver's commits go on to 13:00 (the incident's
    # last finding) and its end offsets to 14:00: both charts must reach silver's last
    # minute, gold's minutes as gold wrote them, the later ones as the gold job will write
    # them (its own functions over the same silver rows)
    lake, findings, data, _html = incident
    offsets, lag = data.groups[0].charts
    cut = at(GOLD_UNTIL_S) // MIN * MIN
    commits_expected, lag_expected = _gold_minutes(spark, lake)
    silver_last = {
        name: spark.read.format("delta").load(lake.table("silver", name))
        .agg(F.max("ts_ms")).first()[0] // MIN * MIN
        for name in ("offset_commits", "partition_offsets")}
    assert silver_last == {"offset_commits": T0 + 13 * MIN, "partition_offsets": T0 + 14 * MIN}
    for chart, columns, table, expected, last in (
            (offsets, COMMIT_COLUMNS, "offset_commits_1m", commits_expected,
             silver_last["offset_commits"]),
            (lag, LAG_COLUMNS, "offset_lag_1m", lag_expected,
             silver_last["partition_offsets"])):
        gold = _gold_table(spark, lake, table, columns)
        assert gold and max(gold) < cut <= max(f.last_seen_ms for f in findings) <= last
        assert chart.query.columns == ("t_ms", *columns, "source")
        times = chart.query.column("t_ms")
        assert times == sorted(expected) and times[-1] == last, chart.title
        assert chart.query.column("source") == ["gold" if t < cut else "silver" for t in times]
        by_source = _chart_minutes(chart, columns)
        assert by_source["gold"] == gold
        assert by_source["silver"] == {t: v for t, v in expected.items() if t >= cut}
    assert offsets.source == "gold.offset_commits_1m + silver.offset_commits"
    assert lag.source == "gold.offset_lag_1m + silver.partition_offsets + silver.offset_commits"
    # silver's minutes are the ones after the incident: the lag after the rewind and the
    # recovery commit of 960 at 13:00
    assert _chart_minutes(offsets, ("last_offset", "commits"))["silver"] == {
        T0 + 10 * MIN: (930, 1), T0 + 13 * MIN: (960, 1)}  # the tombstone is no commit
    for chart in (offsets, lag):
        assert utc(T0 + 7 * MIN) in chart.note and "source: silver" in chart.note, chart.note
    assert any(n.startswith(f"The commits of {GROUP} on orders-2") and "silver.offset_commits"
               in n for n in data.notes)
    assert any(n.startswith(f"The lag of {GROUP} on orders-2") and "silver.partition_offsets"
               in n for n in data.notes)


def test_lag_from_silver_takes_the_groups_last_commit_before_the_window(spark, incident):
    # 10:09-10:15, all after gold's last minute: minute 10:09's lag is against the commit
    # of 910 at 10:07, before the window
    lake, *_ = incident
    data = build_report(spark, lake, start_ms=at(540), end_ms=at(900), now_ms=at(1000))
    for q in data.queries():
        assert _rows(spark, q.sql) == q.rows, q.sql
    offsets, lag = data.groups[0].charts
    commits_expected, lag_expected = _gold_minutes(spark, lake)
    assert _chart_minutes(lag, LAG_COLUMNS) == {"silver": {
        t: v for t, v in lag_expected.items() if at(540) <= t < at(900)}}
    assert _chart_minutes(lag, ("lag", "committed_offset"))["silver"][at(540)] == (25, 910)
    assert _chart_minutes(offsets, COMMIT_COLUMNS) == {"silver": {
        t: v for t, v in commits_expected.items() if at(540) <= t < at(900)}}
    assert lag.source == "silver.partition_offsets + silver.offset_commits"


def test_the_html_shows_the_numbers_the_sql_returns(spark, incident):
    _lake, findings, data, page = incident
    # every plotted point carries its value in a tooltip: compare with a fresh run of the SQL
    for chart in [c for b in data.brokers for c in b.charts] + [c for g in data.groups
                                                                for c in g.charts]:
        fresh = spark.sql(chart.query.sql)
        cols = fresh.columns
        for row in fresh.collect():
            for s in chart.series:
                v = row[cols.index(s.column)]
                if v is not None:
                    tip = f"{s.label}: {format_number(float(v))} {chart.unit} at {utc(row['t_ms'])}"
                    assert html.escape(tip, quote=True) in page, tip
    # a finding's evidence as printed equals the JSON its SQL returns
    for link in data.chain:
        evidence = json.loads(spark.sql(link.query.sql).first()["evidence_json"])
        for key in ("old_position", "new_position", "lost_from", "lost_until", "messages_lost"):
            if key in evidence:
                assert f"<dt>{key}</dt><dd>{format_number(evidence[key])}</dd>" in page
    # the rewinds table and the summary
    assert re.search(r'<td class="kmon-num">950</td><td class="kmon-num">900</td>'
                     r'<td class="kmon-num">50</td>', page)
    assert "2 (2 open)" in page
    assert html.escape(GROUP, quote=True) in page and GROUP not in page
    assert 'data-kind="stages" data-cluster="c1" data-broker="3"' in page


def test_a_range_report_holds_only_what_it_covers(spark, incident):
    lake, findings, _data, _html = incident
    data = build_report(spark, lake, start_ms=at(330), end_ms=at(420), now_ms=at(1000))
    assert [c.finding.type for c in data.chain] == [AnomalyType.OFFSET_REWIND]
    assert data.chain[0].caused_by is None  # its cause lies before the range
    assert (data.start_ms, data.end_ms) == (at(330), at(420))
    assert data.summary.records()[0]["root_finding_ids"] == ()
    for q in data.queries():
        assert _rows(spark, q.sql) == q.rows, q.sql
    page = render_html(data)
    assert "outside this report" in page and "no finding here is an incident" in page


def test_a_long_range_uses_wider_buckets(spark, incident):
    lake, *_ = incident
    data = build_report(spark, lake, start_ms=T0 - 12 * 60 * MIN, end_ms=T0 + 60 * MIN,
                        now_ms=at(1000))
    assert queries.bucket_ms(data.start_ms, data.end_ms) == 5 * MIN
    for q in data.queries():
        assert _rows(spark, q.sql) == q.rows, q.sql
    stages = data.brokers[0].charts[0].query.records()
    assert [r["t_ms"] for r in stages] == [T0 + i * 5 * MIN for i in range(4)]
    assert [r["requests"] for r in stages] == [90] * 4  # 3 Produce every 10 s
    assert max(r["remote_p99_ms"] for r in stages) >= 400  # the spike survives as a max
    # gold holds 10:00-10:08 of broker 1, silver the minutes after
    assert [r["source"] for r in stages] == ["gold", "gold + silver", "silver", "silver"]
    offsets = data.groups[0].charts[0].query.records()
    assert [(r["t_ms"] - T0, r["last_offset"], r["min_offset"]) for r in offsets] == [
        (0, 950, 800), (5 * MIN, 910, 900), (10 * MIN, 960, 930)]
    # the group's gold holds its minutes before 10:09: 10:10 and 13:00 come from silver
    assert [r["source"] for r in offsets] == ["gold", "gold", "silver"]
    assert [r["commits"] for r in offsets] == [2, 2, 2]
    # lag minutes 10:01-10:05 and 10:07 in gold, 10:09 (silver) beside 10:05 and 10:07
    _commits, lag_expected = _gold_minutes(spark, lake)
    lag = data.groups[0].charts[1].query.records()
    assert [(r["t_ms"], r["source"]) for r in lag] == [
        (T0, "gold"), (T0 + 5 * MIN, "gold + silver"), (T0 + 10 * MIN, "silver")]
    for r in lag:
        minutes = sorted(t for t in lag_expected if r["t_ms"] <= t < r["t_ms"] + 5 * MIN)
        assert (r["lag"], r["committed_offset"], r["end_offset"]) == (
            max(lag_expected[t][0] for t in minutes), *lag_expected[minutes[-1]][1:3])


def test_an_unknown_incident_is_an_error(spark, incident):
    lake, *_ = incident
    with pytest.raises(ReportError, match="no finding"):
        build_report(spark, lake, incident_id="nope'; DROP TABLE x")


def test_the_command_writes_the_report_and_prints_its_path(incident, tmp_path):
    lake, _findings, data, _html = incident
    out = tmp_path / "out" / "incident.html"
    env = {**os.environ, "KMON__SPARK__STORAGE_ROOT": lake.root,
           "KMON__SPARK__SHUFFLE_PARTITIONS": "2"}
    # its own process and Spark session, as `kmon report` runs; the timeout is a hang guard
    r = subprocess.run([sys.executable, "-m", "cli", "report", "--incident", data.incident_id,
                        "--out", str(out)], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == str(out.resolve())
    page = out.read_text(encoding="utf-8")
    assert f'data-finding-id="{data.chain[0].finding.finding_id}"' in page
    assert page.count('class="kmon-chart"') == 4


def test_without_gold_offset_tables_the_group_charts_come_from_silver(spark, incident,
                                                                       tmp_path):
    # a lake whose gold job never ran: silver and the findings only
    lake, *_ = incident
    bare = Lake(str(tmp_path / "lake"))
    for layer, name in (("silver", "offset_commits"), ("silver", "partition_offsets")):
        _write(spark.read.format("delta").load(lake.table(layer, name)), bare, layer, name)
    _write(spark.read.format("delta").load(lake.table("gold", "anomalies")), bare, "gold",
           "anomalies", partitioned=False)
    _drop_registrations(spark)
    try:
        data = build_report(spark, bare, start_ms=at(300), end_ms=at(900), now_ms=at(1000))
        for q in data.queries():
            if not q.columns:  # not run: the stage tables do not exist here
                continue
            assert _rows(spark, q.sql) == q.rows, q.sql
        assert not spark.catalog.tableExists("gold.offset_lag_1m")
    finally:
        _drop_registrations(spark)
        register_tables(spark, lake)
    offsets, lag = data.groups[0].charts
    commits_expected, lag_expected = _gold_minutes(spark, lake)
    assert _chart_minutes(offsets, COMMIT_COLUMNS) == {"silver": {
        t: v for t, v in commits_expected.items() if at(300) <= t < at(900)}}
    assert _chart_minutes(lag, LAG_COLUMNS) == {"silver": {
        t: v for t, v in lag_expected.items() if at(300) <= t < at(900)}}
    assert (offsets.source, lag.source) == (
        "silver.offset_commits", "silver.partition_offsets + silver.offset_commits")
    assert any("gold.offset_lag_1m does not exist" in n for n in data.notes)
