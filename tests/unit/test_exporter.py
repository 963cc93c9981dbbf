"""kmon/exporter.py: finding series, counts, detection latency, pipeline health, HTTP serving.

Each test builds its own registry. The progress dicts have the shape pyspark 4.1.3's
`StreamingQuery.lastProgress` returns (captured from a rate-source query with a
watermark; the Kafka source's `metrics` added as Spark's Kafka source reports them).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import urllib.request
from datetime import datetime, timezone

import pytest
from prometheus_client import CollectorRegistry

from core.findings import ActionKind, AnomalyType, EntityKind, Finding, Severity, Status
from kmon.exporter import KmonExporter, parse_spark_time

T0 = 1_780_000_000_000  # ms


def finding(fid: str, *, cluster: str = "prod-eu", type_: AnomalyType = AnomalyType.SLOW_BROKER,
            severity: Severity = Severity.HIGH, entity: str = "broker:3",
            kind: EntityKind = EntityKind.BROKER, first_seen_ms: int = T0,
            status: Status = Status.OPEN, incident: str | None = None,
            cause: str = "local_disk_or_page_cache",
            action: ActionKind = ActionKind.MOVE_LEADERSHIP) -> Finding:
    return Finding(finding_id=fid, cluster=cluster, type=type_, severity=severity,
                   entity_kind=kind, entity=entity, first_seen_ms=first_seen_ms,
                   last_seen_ms=first_seen_ms + 60_000, status=status, evidence={"broker": 3},
                   cause=cause, explanation="x", suggested_action=action, incident_id=incident,
                   resolved_ms=None if status is Status.OPEN else first_seen_ms + 600_000)


ELECTION = finding("f-elect", type_=AnomalyType.UNCLEAN_ELECTION, severity=Severity.CRITICAL,
                   entity="orders-2", kind=EntityKind.PARTITION, incident="f-elect",
                   cause="unclean_leader_election", action=ActionKind.PAGE_HUMAN)
TRUNCATION = finding("f-trunc", type_=AnomalyType.LOG_TRUNCATION, entity="orders-2",
                     kind=EntityKind.PARTITION, incident="f-elect",
                     cause="truncated_below_high_watermark", action=ActionKind.PAGE_HUMAN,
                     first_seen_ms=T0 + 30_000)
SLOW = finding("f-slow")


@pytest.fixture
def registry():
    return CollectorRegistry()


@pytest.fixture
def exporter(registry):
    return KmonExporter(registry)


def open_series(registry) -> dict[str, dict[str, str]]:
    """finding label -> the labels of its kmon_findings_open sample."""
    out = {}
    for metric in registry.collect():
        if metric.name == "kmon_findings_open":
            for s in metric.samples:
                assert s.value == 1
                out[s.labels["finding"]] = s.labels
    return out


def count(registry, cluster, type_, severity):
    return registry.get_sample_value("kmon_findings_open_count",
                                     {"cluster": cluster, "type": type_, "severity": severity})


def latency_count(registry, type_):
    return registry.get_sample_value("kmon_finding_detection_latency_seconds_count",
                                     {"type": type_})


# --- findings ----------------------------------------------------------------------------

def test_open_findings_are_series_with_their_labels(exporter, registry):
    exporter.set_findings([ELECTION, TRUNCATION], now_ms=T0 + 60_000)
    series = open_series(registry)
    assert series["f-elect"] == {
        "cluster": "prod-eu", "type": "unclean_election", "severity": "critical",
        "entity_kind": "partition", "entity": "orders-2", "incident": "f-elect",
        "finding": "f-elect", "cause": "unclean_leader_election", "action": "page_human"}
    assert series["f-trunc"]["incident"] == "f-elect"
    assert series["f-trunc"]["type"] == "log_truncation"


def test_a_finding_linked_to_nothing_is_its_own_incident(exporter, registry):
    exporter.set_findings([SLOW], now_ms=T0)
    assert open_series(registry)["f-slow"]["incident"] == "f-slow"


def test_each_call_replaces_the_label_set_so_resolved_findings_disappear(exporter, registry):
    exporter.set_findings([ELECTION, SLOW], now_ms=T0)
    assert set(open_series(registry)) == {"f-elect", "f-slow"}
    resolved = dataclasses.replace(SLOW, status=Status.RESOLVED, resolved_ms=T0 + 300_000)
    exporter.set_findings([ELECTION, resolved], now_ms=T0 + 300_000)
    assert set(open_series(registry)) == {"f-elect"}
    exporter.set_findings([], now_ms=T0 + 400_000)
    assert open_series(registry) == {}


def test_a_changed_label_replaces_the_series_rather_than_adding_one(exporter, registry):
    exporter.set_findings([SLOW], now_ms=T0)
    exporter.set_findings([dataclasses.replace(SLOW, severity=Severity.WARNING)], now_ms=T0 + 1)
    series = open_series(registry)
    assert len(series) == 1 and series["f-slow"]["severity"] == "warning"


def test_counts_have_a_zero_for_every_type_and_severity(exporter, registry):
    exporter.set_findings([ELECTION, TRUNCATION, SLOW], now_ms=T0)
    assert count(registry, "prod-eu", "unclean_election", "critical") == 1
    assert count(registry, "prod-eu", "log_truncation", "high") == 1
    assert count(registry, "prod-eu", "slow_broker", "high") == 1
    assert count(registry, "prod-eu", "slow_broker", "warning") == 0
    for t in AnomalyType:
        for s in Severity:
            assert count(registry, "prod-eu", t.value, s.value) is not None, (t, s)
    exporter.set_findings([], now_ms=T0 + 1)
    assert count(registry, "prod-eu", "unclean_election", "critical") == 0


def test_clusters_named_at_construction_report_zeros_before_any_finding(registry):
    KmonExporter(registry, clusters=["prod-eu", "prod-us"])
    assert count(registry, "prod-us", "compaction_lag", "warning") == 0
    assert open_series(registry) == {}


def test_resolved_findings_are_not_counted(exporter, registry):
    resolved = dataclasses.replace(SLOW, status=Status.RESOLVED, resolved_ms=T0)
    exporter.set_findings([resolved], now_ms=T0)
    assert count(registry, "prod-eu", "slow_broker", "high") == 0


def test_detection_latency_is_observed_once_per_finding_id(exporter, registry):
    exporter.set_findings([ELECTION], now_ms=T0 + 45_000)
    assert latency_count(registry, "unclean_election") == 1
    assert registry.get_sample_value("kmon_finding_detection_latency_seconds_sum",
                                     {"type": "unclean_election"}) == pytest.approx(45.0)
    # the same finding again (refreshed: later last_seen), plus a new one
    refreshed = dataclasses.replace(ELECTION, last_seen_ms=T0 + 120_000)
    exporter.set_findings([refreshed, TRUNCATION], now_ms=T0 + 120_000)
    exporter.set_findings([refreshed, TRUNCATION], now_ms=T0 + 180_000)
    assert latency_count(registry, "unclean_election") == 1
    assert latency_count(registry, "log_truncation") == 1
    assert registry.get_sample_value("kmon_finding_detection_latency_seconds_sum",
                                     {"type": "log_truncation"}) == pytest.approx(90.0)
    # 90 s falls in the 120 s bucket, not the 60 s one
    assert registry.get_sample_value("kmon_finding_detection_latency_seconds_bucket",
                                     {"type": "log_truncation", "le": "60.0"}) == 0
    assert registry.get_sample_value("kmon_finding_detection_latency_seconds_bucket",
                                     {"type": "log_truncation", "le": "120.0"}) == 1


def test_a_finding_that_arrives_already_resolved_is_not_a_detection(exporter, registry):
    resolved = dataclasses.replace(SLOW, status=Status.RESOLVED, resolved_ms=T0)
    exporter.set_findings([resolved], now_ms=T0 + 10_000)
    assert latency_count(registry, "slow_broker") is None


def test_a_detection_stamped_before_its_first_seen_counts_as_zero_latency(exporter, registry):
    exporter.set_findings([finding("f-skew", first_seen_ms=T0 + 5_000)], now_ms=T0)
    assert registry.get_sample_value("kmon_finding_detection_latency_seconds_sum",
                                     {"type": "slow_broker"}) == 0


def test_two_exporters_cannot_share_a_registry(registry):
    KmonExporter(registry)
    with pytest.raises(ValueError):
        KmonExporter(registry)


# --- across a restart ---------------------------------------------------------------------

def restarted(tmp_path, clock_ms: int, **kw) -> tuple[KmonExporter, CollectorRegistry]:
    registry = CollectorRegistry()
    return KmonExporter(registry, state_path=tmp_path / "state.json",
                        clock=lambda: clock_ms, **kw), registry


def test_a_restarted_exporter_serves_the_open_findings_it_had(tmp_path):
    before, reg_before = restarted(tmp_path, T0 + 60_000)
    resolved = dataclasses.replace(SLOW, status=Status.RESOLVED, resolved_ms=T0)
    before.set_findings([ELECTION, TRUNCATION, resolved], now_ms=T0 + 60_000)
    after, reg_after = restarted(tmp_path, T0 + 90_000)
    assert open_series(reg_after) == open_series(reg_before)
    assert set(open_series(reg_after)) == {"f-elect", "f-trunc"}
    assert count(reg_after, "prod-eu", "unclean_election", "critical") == 1
    assert count(reg_after, "prod-eu", "slow_broker", "high") == 0
    # The restored findings' latency was observed before the restart: not again.
    after.set_findings([ELECTION, TRUNCATION, SLOW], now_ms=T0 + 120_000)
    assert latency_count(reg_after, "unclean_election") is None
    assert latency_count(reg_after, "slow_broker") == 1


def test_the_saved_state_follows_every_evaluation(tmp_path):
    first, _ = restarted(tmp_path, T0)
    first.set_findings([ELECTION], now_ms=T0)
    first.set_findings([], now_ms=T0 + 20_000)
    _, registry = restarted(tmp_path, T0 + 30_000)
    assert open_series(registry) == {}
    assert count(registry, "prod-eu", "unclean_election", "critical") == 0
    assert not (tmp_path / "state.json.tmp").exists()


def test_a_state_older_than_the_restore_limit_is_not_served(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="kmon.exporter")
    before, _ = restarted(tmp_path, T0)
    before.set_findings([ELECTION], now_ms=T0)
    _, registry = restarted(tmp_path, T0 + 601_000)
    assert open_series(registry) == {}
    assert "601 s old" in caplog.text
    _, registry = restarted(tmp_path, T0 + 601_000, restore_within_s=3600)
    assert set(open_series(registry)) == {"f-elect"}


@pytest.mark.parametrize("text, why", [
    ("{not json", "Expecting property name"),
    ('{"version": 99, "written_ms": 0, "clusters": [], "open_ids": [], "open_series": []}',
     "version 99"),
    ('{"version": 1, "written_ms": 1780000000000, "clusters": [], "open_ids": [], '
     '"open_series": [["prod-eu", "slow_broker"]]}', "without the 9 labels"),
    ('{"version": 1, "written_ms": 1780000000000, "clusters": [], "open_ids": [], '
     '"open_series": [["c", "no_such_type", "high", "broker", "broker:1", "i", "f", "x", '
     '"none"]]}', "unknown type or severity"),
    ('{"version": 1}', "no key 'open_series'"),
])
def test_an_unreadable_state_is_named_and_left_out(tmp_path, caplog, text, why):
    (tmp_path / "state.json").write_text(text)
    _, registry = restarted(tmp_path, T0)
    assert open_series(registry) == {}
    assert str(tmp_path / "state.json") in caplog.text and why in caplog.text
    assert count(registry, "prod-eu", "slow_broker", "high") is None   # no cluster known


def test_a_state_that_cannot_be_saved_is_one_warning_and_serving_goes_on(tmp_path, caplog):
    (tmp_path / "file").write_text("")
    registry = CollectorRegistry()
    exporter = KmonExporter(registry, state_path=tmp_path / "file" / "state.json")
    for i in range(3):
        exporter.set_findings([ELECTION], now_ms=T0 + i)
    assert set(open_series(registry)) == {"f-elect"}
    warnings = [r for r in caplog.records
                if r.levelname == "WARNING" and "not saved" in r.getMessage()]
    assert len(warnings) == 1


def test_no_state_path_writes_nothing(tmp_path, exporter):
    exporter.set_findings([ELECTION], now_ms=T0)
    assert list(tmp_path.iterdir()) == []


# --- pipeline health ---------------------------------------------------------------------

PROGRESS = {  # pyspark 4.1.3 lastProgress of a windowed count with a 5 s watermark
    "id": "0c00dbe6-9f2b-4a89-b269-b4e3f86ee3a5",
    "runId": "180eadf6-9f52-43cb-a244-8c12aa47644a",
    "name": "gold_request_stages_1m",
    "timestamp": "2026-11-22T11:17:18.001Z",
    "batchId": 10,
    "batchDuration": 792,
    "durationMs": {"addBatch": 592, "commitOffsets": 68, "getBatch": 0, "latestOffset": 0,
                   "queryPlanning": 57, "triggerExecution": 792, "walCommit": 73},
    "eventTime": {"avg": "2026-11-22T11:17:16.795Z", "max": "2026-11-22T11:17:17.770Z",
                  "min": "2026-11-22T11:17:15.820Z", "watermark": "2026-11-22T11:17:10.770Z"},
    "stateOperators": [{"operatorName": "stateStoreSave", "numRowsTotal": 4,
                        "numRowsUpdated": 2, "memoryUsedBytes": 1728}],
    "sources": [{"description": "KafkaV2[Subscribe[kmon.request_log]]",
                 "startOffset": {"kmon.request_log": {"0": 22}},
                 "endOffset": {"kmon.request_log": {"0": 62}},
                 "latestOffset": {"kmon.request_log": {"0": 87}},
                 "numInputRows": 40, "inputRowsPerSecond": 20.0,
                 "processedRowsPerSecond": 50.5,
                 "metrics": {"avgOffsetsBehindLatest": "25.0", "maxOffsetsBehindLatest": "25",
                             "minOffsetsBehindLatest": "25"}}],
    "sink": {"description": "DeltaSink[/lake/gold/request_stages_1m]", "numOutputRows": -1,
             "metrics": {}},
    "numInputRows": 40,
    "inputRowsPerSecond": 20.0,
    "processedRowsPerSecond": 50.5,
    "observedMetrics": {},
}
PROGRESS_S = datetime(2026, 11, 22, 11, 17, 18, 1000, tzinfo=timezone.utc).timestamp()
WATERMARK_S = datetime(2026, 11, 22, 11, 17, 10, 770000, tzinfo=timezone.utc).timestamp()
Q = {"query": "gold_request_stages_1m"}


def value(registry, name, labels=Q):
    return registry.get_sample_value(name, labels)


def test_parse_spark_time():
    assert parse_spark_time("2026-11-22T11:17:18.001Z") == pytest.approx(PROGRESS_S)
    assert parse_spark_time("1970-01-01T00:00:00.000Z") == 0
    assert parse_spark_time("not a time") is None
    assert parse_spark_time(None) is None


def test_progress_of_an_active_query(exporter, registry):
    now_ms = int(PROGRESS_S * 1000) + 12_000
    exporter.update_query("gold_request_stages_1m", PROGRESS, active=True, now_ms=now_ms)
    assert value(registry, "kmon_pipeline_query_up") == 1
    assert value(registry, "kmon_pipeline_batch_duration_seconds") == pytest.approx(0.792)
    assert value(registry, "kmon_pipeline_input_rows_per_second") == 20.0
    assert value(registry, "kmon_pipeline_processed_rows_per_second") == 50.5
    assert value(registry, "kmon_pipeline_last_progress_timestamp_seconds") == \
        pytest.approx(PROGRESS_S)
    assert value(registry, "kmon_pipeline_query_lag_seconds") == pytest.approx(12.0)
    assert value(registry, "kmon_pipeline_watermark_delay_seconds") == \
        pytest.approx(now_ms / 1000 - WATERMARK_S)
    assert value(registry, "kmon_pipeline_source_offsets_behind_latest",
                 {"query": "gold_request_stages_1m",
                  "source": "KafkaV2[Subscribe[kmon.request_log]]"}) == 25


def test_lag_keeps_growing_while_no_new_progress_arrives(exporter, registry):
    start_ms = int(PROGRESS_S * 1000)
    exporter.update_query("gold_request_stages_1m", PROGRESS, active=True, now_ms=start_ms)
    exporter.update_query("gold_request_stages_1m", PROGRESS, active=True,
                          now_ms=start_ms + 700_000)
    assert value(registry, "kmon_pipeline_query_lag_seconds") == pytest.approx(700.0)


def test_a_stopped_query_is_down_and_keeps_its_lag(exporter, registry):
    start_ms = int(PROGRESS_S * 1000)
    exporter.update_query("gold_request_stages_1m", PROGRESS, active=True, now_ms=start_ms)
    exporter.update_query("gold_request_stages_1m", PROGRESS, active=False,
                          now_ms=start_ms + 60_000)
    assert value(registry, "kmon_pipeline_query_up") == 0
    assert value(registry, "kmon_pipeline_query_lag_seconds") == pytest.approx(60.0)


def test_a_query_without_progress_yet_is_up_with_no_lag(exporter, registry):
    exporter.update_query("silver_request_stages", None, active=True, now_ms=T0)
    assert value(registry, "kmon_pipeline_query_up", {"query": "silver_request_stages"}) == 1
    assert value(registry, "kmon_pipeline_query_lag_seconds",
                 {"query": "silver_request_stages"}) is None


def test_fields_spark_leaves_out_or_cannot_know_make_no_series(exporter, registry):
    first_batch = copy.deepcopy(PROGRESS)
    del first_batch["inputRowsPerSecond"]  # NaN on a first batch: Spark's JSON omits it
    first_batch["eventTime"] = {"watermark": "1970-01-01T00:00:00.000Z"}  # no data yet
    first_batch["sources"][0]["metrics"] = {}
    exporter.update_query("gold_request_stages_1m", first_batch, active=True, now_ms=T0)
    assert value(registry, "kmon_pipeline_input_rows_per_second") is None
    assert value(registry, "kmon_pipeline_watermark_delay_seconds") is None
    assert value(registry, "kmon_pipeline_batch_duration_seconds") == pytest.approx(0.792)


def test_a_watermark_or_source_that_goes_away_takes_its_series_along(exporter, registry):
    exporter.update_query("gold_request_stages_1m", PROGRESS, active=True, now_ms=T0)
    later = copy.deepcopy(PROGRESS)
    later["eventTime"] = {}
    later["sources"] = []
    exporter.update_query("gold_request_stages_1m", later, active=True, now_ms=T0)
    assert value(registry, "kmon_pipeline_watermark_delay_seconds") is None
    assert value(registry, "kmon_pipeline_source_offsets_behind_latest",
                 {"query": "gold_request_stages_1m",
                  "source": "KafkaV2[Subscribe[kmon.request_log]]"}) is None


def test_batch_duration_falls_back_to_batchDuration(exporter, registry):
    progress = copy.deepcopy(PROGRESS)
    progress["durationMs"] = {}
    progress["batchDuration"] = 1500
    exporter.update_query("gold_request_stages_1m", progress, active=True, now_ms=T0)
    assert value(registry, "kmon_pipeline_batch_duration_seconds") == pytest.approx(1.5)


def test_quarantined_rows_are_counted_per_stream(exporter, registry):
    exporter.quarantined("request_log", 3)
    exporter.quarantined("request_log")
    exporter.quarantined("broker_log", 0)
    assert registry.get_sample_value("kmon_pipeline_rows_quarantined_total",
                                     {"stream": "request_log"}) == 4
    assert registry.get_sample_value("kmon_pipeline_rows_quarantined_total",
                                     {"stream": "broker_log"}) == 0
    with pytest.raises(ValueError):
        exporter.quarantined("request_log", -1)


# --- serving -----------------------------------------------------------------------------

def test_serve_exposes_the_registry_over_http(exporter):
    exporter.set_findings([ELECTION], now_ms=T0)
    server, thread = exporter.serve(0)
    try:
        port = server.server_port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
    assert 'kmon_findings_open{action="page_human",cause="unclean_leader_election"' in text
    assert 'kmon_findings_open_count{cluster="prod-eu",severity="critical",' \
           'type="unclean_election"} 1.0' in text


def test_each_sources_clock_lead_is_a_series_per_stream(exporter, registry):
    """A broker's own clock stamps its windows, its agent's the JMX scrapes: one series each,
    so a broker clock stepped back shows beside an agent clock that is right."""
    exporter.source_leads("request_windows", {"c/1": -12_000, "c/2": -312_000})
    exporter.source_leads("broker_metrics", {"c/2": -2_000})
    exporter.source_leads("request_windows", {"c/1": -11_000})

    def lead(source, stream):
        return registry.get_sample_value("kmon_pipeline_source_clock_lead_seconds",
                                         {"source": source, "stream": stream})
    assert (lead("c/1", "request_windows"), lead("c/2", "request_windows"),
            lead("c/2", "broker_metrics")) == (-11.0, -312.0, -2.0)


def test_a_clock_lead_not_updated_for_ten_minutes_goes(registry):
    now = [1_000_000]
    exporter = KmonExporter(registry, clock=lambda: now[0])
    exporter.source_leads("request_windows", {"c/1": -2_000, "c/2": 40_000})

    def lead(source):
        return registry.get_sample_value("kmon_pipeline_source_clock_lead_seconds",
                                         {"source": source, "stream": "request_windows"})
    now[0] += 599_000
    exporter.source_leads("request_windows", {"c/1": -3_000})   # c/2 stopped sending
    assert (lead("c/1"), lead("c/2")) == (-3.0, 40.0)
    now[0] += 2_000
    exporter.source_leads("request_windows", {"c/1": -1_000})
    assert (lead("c/1"), lead("c/2")) == (-1.0, None)
