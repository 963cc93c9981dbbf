"""The HTML incident report from hand-built data: sections, charts, SQL blocks, escaping,
no network references; plus the pure pieces under it (causal order, involved entities,
SVG paths, time arguments)."""

from __future__ import annotations

import argparse
import dataclasses
import re
from html.parser import HTMLParser

import pytest

from core.findings import ActionKind, AnomalyType, EntityKind, Finding, Severity, Status
from reports.chain import causal_order
from reports.cli import default_out, parse_time
from reports.involved import involved_brokers, involved_groups, involved_partitions
from reports.render import render_html
from reports.report_data import (
    BrokerSection,
    ChainLink,
    Chart,
    GroupSection,
    Marker,
    Query,
    ReportData,
    Series,
)
from reports.svg_chart import format_number, path_d

pytestmark = pytest.mark.unit

T0 = 1_714_557_600_000  # 2024-05-01 10:00:00 UTC
MIN = 60_000
TOPIC = "<script>alert(1)</script>"
GROUP = "o'brien & \"co\""
STAGE_COLS = ("total_p99_ms", "request_queue_p99_ms", "local_p99_ms", "remote_p99_ms",
              "throttle_p99_ms", "response_queue_p99_ms", "send_p99_ms")


def _finding(fid, type_, entity, first, *, incident="e1", related=(), severity=Severity.HIGH,
             evidence=None, cause="c", kind=EntityKind.PARTITION):
    return Finding(finding_id=fid, cluster="c1", type=type_, severity=severity,
                   entity_kind=kind, entity=entity, first_seen_ms=first, last_seen_ms=first,
                   status=Status.OPEN, evidence=evidence or {}, cause=cause,
                   explanation=f"explanation of {fid} on {TOPIC}",
                   suggested_action=ActionKind.PAGE_HUMAN, incident_id=incident,
                   related=tuple(related))


def sample_findings() -> list[Finding]:
    election = _finding(
        "e1", AnomalyType.UNCLEAN_ELECTION, f"{TOPIC}-2", T0 + 5 * MIN, related=("t1", "r1"),
        severity=Severity.CRITICAL, cause="unclean_leader_election",
        evidence={"topic": TOPIC, "partition": 2, "old_leader": 1, "new_leader": 3,
                  "lost_from": 900, "lost_until": 1000, "messages_lost": 100,
                  "election_ms": T0 + 5 * MIN,
                  "groups_inside": [{"group": GROUP, "committed_offset": 950}]})
    truncation = _finding(
        "t1", AnomalyType.LOG_TRUNCATION, f"{TOPIC}-2", T0 + 20 * MIN, related=("e1",),
        evidence={"topic": TOPIC, "partition": 2, "broker": 1, "truncated_to": 900,
                  "high_watermark": 1000})
    rewind = _finding(
        "r1", AnomalyType.OFFSET_REWIND, f"group:{GROUP}/{TOPIC}-2", T0 + 6 * MIN,
        related=("e1",), kind=EntityKind.GROUP, cause="auto_reset_after_out_of_range",
        evidence={"group": GROUP, "topic": TOPIC, "partition": 2, "old_position": 950,
                  "new_position": 900, "duplicates": 0, "active": True})
    lonely = _finding("s9", AnomalyType.SLOW_BROKER, "broker:2", T0, incident=None,
                      kind=EntityKind.BROKER, severity=Severity.WARNING,
                      evidence={"broker": 2, "api": "Fetch", "stage": "local"})
    return [rewind, lonely, truncation, election]


def _stage_query(broker: int) -> Query:
    rows = tuple((T0 + i * MIN, 100 + i, *(float(10 * (s + 1) + i) for s in range(7)))
                 for i in range(30))
    return Query(f"SELECT ... FROM gold.request_stages_1m WHERE broker = {broker}",
                 ("t_ms", "requests", *STAGE_COLS), rows)


def sample_report() -> ReportData:
    """A report of an unclean election on a hostile topic name, built by hand."""
    findings = sample_findings()
    chain = tuple(ChainLink(f, cause, depth,
                            Query(f"SELECT * FROM gold.anomalies WHERE finding_id = "
                                  f"'{f.finding_id}'", ("finding_id",), ((f.finding_id,),)))
                  for f, cause, depth in causal_order(findings))
    markers = (Marker(T0 + 5 * MIN, f"unclean_election {TOPIC}-2", "finding"),)
    stage_series = tuple(Series(c, c.replace("_p99_ms", " p99"), emphasis=c == "total_p99_ms")
                         for c in STAGE_COLS)
    brokers = tuple(
        BrokerSection("c1", b, Query("SELECT api, sum(requests) ...", ("api", "requests"),
                                     (("Produce", 3000),)),
                      (Chart("stages", f"Broker {b} Produce", _stage_query(b), stage_series,
                             "ms", {"cluster": "c1", "broker": str(b), "api": "Produce"},
                             "gold.request_stages_1m", markers=markers),))
        for b in (1, 3))
    offsets = Query("SELECT ... FROM gold.offset_commits_1m",
                    ("t_ms", "last_offset", "min_offset", "max_offset", "commits"),
                    tuple((T0 + i * MIN, 800 + 10 * i if i != 6 else 900,
                           790 + 10 * i if i != 6 else 900, 800 + 10 * i, 4)
                          for i in range(12)))
    lag = Query("SELECT ... FROM gold.offset_lag_1m",
                ("t_ms", "lag", "committed_offset", "end_offset", "start_offset"),
                tuple((T0 + i * MIN, 5 + i if i != 3 else None, 0, 0, 0) for i in range(12)))
    attrs = {"cluster": "c1", "group": GROUP, "topic": TOPIC, "partition": "2"}
    group = GroupSection(
        "c1", GROUP, TOPIC, 2,
        (Chart("offsets", f"{GROUP} offsets", offsets,
               (Series("last_offset", "last"), Series("min_offset", "lowest")), "offset",
               attrs, "gold.offset_commits_1m", markers=markers, zero_based=False),
         Chart("lag", f"{GROUP} lag", lag, (Series("lag", "lag"),), "messages", attrs,
               "gold.offset_lag_1m", markers=markers)),
        Query("SELECT ... FROM silver.offset_commits",
              ("t_ms", "from_offset", "to_offset", "messages_back"),
              ((T0 + 6 * MIN, 950, 900, 50),)),
        "silver.offset_commits (every commit)")
    summary = Query("SELECT count(*) AS findings ... FROM gold.anomalies",
                    ("findings", "first_seen_ms", "last_seen_ms", "worst_severity",
                     "open_findings", "root_finding_ids"),
                    ((4, T0, T0 + 20 * MIN, "critical", 4, ("e1",)),))
    return ReportData(title=f"kmon incident e1 {TOPIC}", incident_id="e1", start_ms=T0 - 5 * MIN,
                      end_ms=T0 + 35 * MIN, generated_ms=T0 + 40 * MIN, summary=summary,
                      chain=chain, brokers=brokers, groups=(group,),
                      notes=(f"note about {TOPIC}",))


class _Tags(HTMLParser):
    """Every start tag with its attributes, and the text inside <script>/<style> tags."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def _parse(html_text: str) -> list[tuple[str, dict]]:
    p = _Tags()
    p.feed(html_text)
    return p.tags


# --- causal order and involved entities -------------------------------------------------

def test_chain_puts_the_root_first_then_effects_in_time_order_and_lonely_findings_last():
    order = causal_order(sample_findings())
    assert [(f.finding_id, cause, depth) for f, cause, depth in order] == [
        ("e1", None, 0), ("r1", "e1", 1), ("t1", "e1", 1), ("s9", None, 0)]


def test_chain_without_its_root_starts_at_the_earliest_member():
    findings = [f for f in sample_findings() if f.finding_id in ("t1", "r1")]
    order = causal_order(findings)
    assert [f.finding_id for f, _, _ in order] == ["r1", "t1"]
    assert all(cause is None for _, cause, _ in order)


def test_involved_entities_come_from_entity_and_evidence():
    findings = sample_findings()
    assert involved_brokers(findings) == {("c1", 1): set(), ("c1", 2): {"Fetch"},
                                          ("c1", 3): set()}
    assert involved_partitions(findings) == {("c1", TOPIC, 2)}
    assert involved_groups(findings) == {("c1", GROUP, TOPIC, 2)}


def test_kafkas_no_broker_minus_one_is_no_involved_broker():
    # An unclean election whose old leader the controller did not know (old_leader -1, as
    # in the demo's report, which had a "Broker -1" section), and -1 wherever else a
    # detector may copy Kafka's "no broker" into a finding.
    election = _finding("e1", AnomalyType.UNCLEAN_ELECTION, f"{TOPIC}-2", T0,
                        evidence={"topic": TOPIC, "partition": 2, "old_leader": -1,
                                  "new_leader": 3, "controller": -1,
                                  "truncation": {"broker": -1}})
    slow = _finding("s1", AnomalyType.SLOW_BROKER, "broker:-1", T0, kind=EntityKind.BROKER,
                    evidence={"broker": -1, "api": "Produce", "slow_follower": "broker:-1",
                              "held_back_leaders": [-1, 2], "brokers_blamed": [-1]})
    assert involved_brokers([election, slow]) == {("c1", 2): set(), ("c1", 3): set()}


def test_a_slow_client_involves_the_brokers_it_reads_from():
    reader = _finding("c1", AnomalyType.SLOW_CLIENT, "client:reader", T0,
                      kind=EntityKind.CLIENT, evidence={"api": "Fetch", "brokers": [1, 3]})
    assert involved_brokers([reader]) == {("c1", 1): set(), ("c1", 3): set()}


def test_group_chart_sql_takes_whole_minutes_from_silver():
    # gold holds the minutes that start in [start, end); silver's must be the same whole
    # minutes (not the first one from 10:00:30, not a last one cut at 10:10:00.001), and a
    # lake without the gold table gets a statement that does not name it
    from reports import queries as q
    start, end = T0 + 30_000, T0 + 10 * MIN + 1
    silver_range = (f"ts >= timestamp_millis({T0 + MIN}) "
                    f"AND ts < timestamp_millis({T0 + 11 * MIN})")
    for build, gold, columns in (
            (q.committed_offsets_with_silver, q.COMMITS_1M,
             "t_ms, last_offset, min_offset, max_offset, commits, source"),
            (q.lag_with_silver, q.LAG_1M,
             "t_ms, lag, committed_offset, end_offset, start_offset, source")):
        sql = build("c1", GROUP, TOPIC, 2, start, end)
        assert f"window_start >= timestamp_millis({start})" in sql and silver_range in sql
        assert f"FROM {gold}" in sql and f"SELECT {columns}\nFROM minutes" in sql
        silver_only = build("c1", GROUP, TOPIC, 2, start, end, gold=False)
        assert "gold." not in silver_only and silver_range in silver_only
        assert "'o\\'brien" in sql  # the group id quoted
        wide = build("c1", GROUP, TOPIC, 2, start, start + 24 * 60 * MIN)
        assert "GROUP BY 1\nORDER BY t_ms" in wide and "' + ') AS source" in wide


# --- rendering ---------------------------------------------------------------------------

def test_every_section_is_present():
    html_text = render_html(sample_report())
    ids = {a.get("id") for _, a in _parse(html_text)}
    assert {"summary", "chain", "brokers", "groups", "notes"} <= ids
    assert html_text.startswith("<!DOCTYPE html>")
    assert "Root cause" in html_text and "critical" in html_text
    assert "2024-05-01 10:00:00 UTC" in html_text  # the summary's time range


def test_the_chain_lists_root_first_with_evidence_and_action():
    tags = _parse(render_html(sample_report()))
    items = [a for t, a in tags if t == "li" and "kmon-finding" in a.get("class", "")]
    assert [a["data-finding-id"] for a in items] == ["e1", "r1", "t1", "s9"]
    assert "kmon-root" in items[0]["class"]
    html_text = render_html(sample_report())
    assert html_text.count("Suggested action") == 4
    assert "<dt>messages_lost</dt><dd>100</dd>" in html_text
    assert "<dt>active</dt><dd>true</dd>" in html_text
    assert "follows from unclean_election" in html_text
    assert "&amp;lt;" not in html_text  # escaped once, not twice


def test_charts_have_a_path_for_each_series_with_data():
    tags = _parse(render_html(sample_report()))
    svgs = [a for t, a in tags if t == "svg"]
    assert [(a["data-kind"], a.get("data-broker")) for a in svgs] == [
        ("stages", "1"), ("stages", "3"), ("offsets", None), ("lag", None)]
    assert all("kmon-chart" in a["class"] for a in svgs)
    assert svgs[2]["data-topic"] == TOPIC and svgs[2]["data-group"] == GROUP
    # paths in document order: 7 stages x 2 brokers (the total drawn last, on top),
    # 2 offset series, 1 lag series
    paths = [a for t, a in tags if t == "path" and "kmon-series" in a.get("class", "")]
    stages = [*STAGE_COLS[1:], STAGE_COLS[0]]
    assert [p["data-series"] for p in paths] == [*stages, *stages, "last_offset",
                                                 "min_offset", "lag"]
    assert all(re.fullmatch(r"(M[-\d.]+,[-\d.]+(L[-\d.]+,[-\d.]+)+)+", p["d"]) for p in paths)
    lag_path = paths[-1]["d"]
    assert lag_path.count("M") == 2  # the missing value at minute 3 breaks the line
    markers = [a for t, a in tags if t == "line" and "kmon-marker" in a.get("class", "")]
    assert len(markers) == 4


def test_a_sql_block_sits_under_every_chart_table_and_finding():
    data = sample_report()
    html_text = render_html(data)
    details = [a for t, a in _parse(html_text) if t == "details"]
    assert len(details) == len(data.queries())
    assert all("kmon-sql" in a["class"] for a in details)
    for query in data.queries():
        assert f"<code class=\"language-sql\">{_esc(query.sql)}</code>" in html_text


def test_untrusted_strings_are_escaped():
    html_text = render_html(sample_report())
    assert "<script" not in html_text.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html_text
    assert "o&#x27;brien &amp; &quot;co&quot;" in html_text
    tags = [t for t, _ in _parse(html_text)]
    assert "script" not in tags


def test_no_external_references():
    html_text = render_html(sample_report())
    for tag, attrs in _parse(html_text):
        for name in ("src", "href", "xlink:href", "action", "data"):
            assert not re.match(r"\s*(https?:)?//", attrs.get(name) or ""), (tag, attrs)
    assert "http://" not in html_text and "https://" not in html_text
    assert "@import" not in html_text and "url(" not in html_text


def test_an_empty_chart_says_so_and_draws_no_series():
    data = sample_report()
    empty = Chart("lag", "nothing", Query("SELECT 1", ("t_ms", "lag"), ()),
                  (Series("lag", "lag"),), "messages", {"group": "g"}, "gold.offset_lag_1m")
    g = data.groups[0]
    data = ReportData(**{**data.__dict__, "groups": (GroupSection(
        g.cluster, g.group, g.topic, g.partition, (empty,), g.rewinds, g.rewinds_source),)})
    html_text = render_html(data)
    assert 'data-empty="true"' in html_text and "no rows in this window" in html_text
    assert "lag (no data)" in html_text


def _esc(text: str) -> str:
    import html
    return html.escape(text, quote=True)


# --- small pure pieces -------------------------------------------------------------------

@pytest.mark.parametrize("points, expected", [
    ([(0, 1), (10, 2)], "M0.0,1.0L10.0,2.0"),
    ([(0, 1), (5, None), (10, 2), (20, 3)], "M-3.0,1.0L3.0,1.0M10.0,2.0L20.0,3.0"),
    ([(0, None)], ""),
])
def test_path_data(points, expected):
    assert path_d(points) == expected


@pytest.mark.parametrize("value, text", [(3, "3"), (412.0, "412"), (0.12345, "0.123"),
                                          (None, "None"), (10 ** 12, "1000000000000")])
def test_number_format(value, text):
    assert format_number(value) == text


@pytest.mark.parametrize("text, ms", [
    ("1714557600000", T0), ("2024-05-01T10:00:00Z", T0), ("2024-05-01T10:00", T0),
    ("2024-05-01T12:00:00+02:00", T0), ("2024-05-01 10:00:00.250", T0 + 250)])
def test_time_arguments(text, ms):
    assert parse_time(text) == ms


def test_bad_time_argument_names_the_formats():
    with pytest.raises(argparse.ArgumentTypeError, match="ISO-8601"):
        parse_time("yesterday")


def test_rendering_needs_no_spark():
    import subprocess
    import sys
    code = ("import sys, reports.render, reports.report_data, reports.chain, reports.cli; "
            "sys.exit('pyspark' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_default_report_file_names(tmp_path):
    assert default_out(tmp_path, "ab/../c", None, None) == (
        tmp_path / "reports" / "incident-ab_.._c.html")
    assert default_out(tmp_path, None, 1, 2).name == "findings-1-2.html"


def test_a_brokers_slow_requests_come_from_its_findings_and_render_as_a_table():
    from reports.incident import _slow_requests

    def req(ts, judged, client, cid):
        return {"ts_ms": ts, "api": "Produce", "client_id": client, "correlation_id": cid,
                "judged_ms": judged, "total_ms": judged, "request_queue_ms": 1.0,
                "local_ms": 2.0, "remote_ms": judged - 3.0, "throttle_ms": 0.0,
                "response_queue_ms": 0.0, "send_ms": 0.0, "error_codes": [],
                "kept_because": ["slow", "slowest"]}

    hostile = "<script>alert(1)</script>"
    a = _finding("a", AnomalyType.SLOW_BROKER, "broker:1", T0, kind=EntityKind.BROKER,
                 evidence={"broker": 1, "api": "Produce", "slow_requests_source":
                           "silver.request_exemplars",
                           "slow_requests": [req(T0, 500.0, "p1", 7), req(T0 + 1, 900.0,
                                                                          hostile, 8)]})
    b = _finding("b", AnomalyType.SLOW_BROKER, "broker:1", T0 + MIN, kind=EntityKind.BROKER,
                 evidence={"broker": 1, "api": "Produce", "slow_requests_source":
                           "silver.request_exemplars",
                           "slow_requests": [req(T0 + 1, 900.0, hostile, 8),
                                             req(T0 + 2, 700.0, "p2", 9)]})
    other = _finding("c", AnomalyType.SLOW_BROKER, "broker:2", T0, kind=EntityKind.BROKER,
                     evidence={"broker": 2, "slow_requests": [req(T0, 5000.0, "x", 1)]})
    got = _slow_requests([a, b, other], "c1", 1)
    assert [r["correlation_id"] for r in got["slow_requests"]] == [8, 9, 7]
    assert got["slow_requests_source"] == "silver.request_exemplars"

    data = sample_report()
    broker = dataclasses.replace(data.brokers[0], **got)
    html_text = render_html(dataclasses.replace(data, brokers=(broker, *data.brokers[1:])))
    tables = [a for t, a in _parse(html_text) if t == "table"]
    assert {"class": "kmon-slow-requests"} in tables
    section = html_text[html_text.index("kmon-slow-requests"):]
    section = section[:section.index("</table>")]
    assert section.count("<tr>") == 4          # the header and three requests
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in section and "<script" not in section
    assert "slow, slowest" in section
    assert "kmon-slow-requests" not in render_html(data)
