"""The JMX scraper keeps the series kmon reads, over real HTTP, and never loses a bad scrape.

The exposition below is cut from a real ``/metrics`` answer of Apache Kafka 4.3.1 with the
Prometheus JMX exporter java agent 1.0.1 and infra/resources/jmx-exporter.yaml (one node,
a compacted topic); the ``_count_total`` family is the form exporter 1.x writes for rules
typed COUNTER. The tests serve it from a local HTTP server, as the exporter does.
"""

from __future__ import annotations

import gzip
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from ingest import jmx_scraper
from ingest.agent_metrics import AgentMetrics
from ingest.jmx_scraper import (JmxScraper, JmxSource, kept_lines, parse_exposition,
                                record_id)
from ingest.malformed import Malformed
from schemas import broker_metrics
from tests.unit.test_tail_agent import Clock, RecordingSink

pytestmark = pytest.mark.unit

EXPOSITION = """\
# HELP jvm_threads_current Current thread count of a JVM
# TYPE jvm_threads_current gauge
jvm_threads_current 96.0
# HELP kafka_log_logcleanermanager_uncleanable_bytes Attribute exposed for management kafka.log:name=uncleanable-bytes,type=LogCleanerManager,attribute=Value
# TYPE kafka_log_logcleanermanager_uncleanable_bytes gauge
kafka_log_logcleanermanager_uncleanable_bytes{logdirectory="/kmon/node-1/data"} 0.0
# HELP kafka_log_logcleanermanager_time_since_last_run_ms Attribute exposed for management kafka.log:name=time-since-last-run-ms,type=LogCleanerManager,attribute=Value
# TYPE kafka_log_logcleanermanager_time_since_last_run_ms gauge
kafka_log_logcleanermanager_time_since_last_run_ms 5414.0
# HELP kafka_log_logcleaner_max_compaction_delay_secs Attribute exposed for management kafka.log:name=max-compaction-delay-secs,type=LogCleaner,attribute=Value
# TYPE kafka_log_logcleaner_max_compaction_delay_secs gauge
kafka_log_logcleaner_max_compaction_delay_secs 0.0
# HELP kafka_network_requestmetrics_totaltimems Attribute exposed for management kafka.network:name=TotalTimeMs,type=RequestMetrics,attribute=50thPercentile
# TYPE kafka_network_requestmetrics_totaltimems gauge
kafka_network_requestmetrics_totaltimems{quantile="0.50",request="Fetch"} 0.0
kafka_network_requestmetrics_totaltimems{quantile="0.50",request="Produce"} 23.0
kafka_network_requestmetrics_totaltimems{quantile="0.99",request="Fetch"} 0.0
kafka_network_requestmetrics_totaltimems{quantile="0.99",request="Produce"} 261.0
kafka_network_requestmetrics_totaltimems{quantile="0.999",request="Fetch"} 0.0
kafka_network_requestmetrics_totaltimems{quantile="0.999",request="Produce"} 261.0
# HELP kafka_network_requestmetrics_totaltimems_count Attribute exposed for management kafka.network:name=TotalTimeMs,type=RequestMetrics,attribute=Count
# TYPE kafka_network_requestmetrics_totaltimems_count untyped
kafka_network_requestmetrics_totaltimems_count{request="Fetch"} 0.0
kafka_network_requestmetrics_totaltimems_count{request="Produce"} 34.0
# HELP kafka_network_requestmetrics_remotetimems Attribute exposed for management kafka.network:name=RemoteTimeMs,type=RequestMetrics,attribute=50thPercentile
# TYPE kafka_network_requestmetrics_remotetimems gauge
kafka_network_requestmetrics_remotetimems{quantile="0.99",request="Produce"} 0.0
# HELP kafka_network_requestmetrics_remotetimems_count Attribute exposed for management kafka.network:name=RemoteTimeMs,type=RequestMetrics,attribute=Count
# TYPE kafka_network_requestmetrics_remotetimems_count counter
kafka_network_requestmetrics_remotetimems_count_total{request="Produce"} 34.0
# HELP kafka_network_requestmetrics_totaltimems_mean Attribute exposed for management kafka.network:name=TotalTimeMs,type=RequestMetrics,attribute=Mean
# TYPE kafka_network_requestmetrics_totaltimems_mean gauge
kafka_network_requestmetrics_totaltimems_mean{request="Produce"} 37.94117647058823
# HELP kafka_server_brokertopicmetrics_bytesinpersec_count Attribute exposed for management kafka.server:name=BytesInPerSec,type=BrokerTopicMetrics,attribute=Count
# TYPE kafka_server_brokertopicmetrics_bytesinpersec_count untyped
kafka_server_brokertopicmetrics_bytesinpersec_count 754698.0
kafka_server_brokertopicmetrics_bytesinpersec_count{topic="compacted"} 754698.0
# HELP kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent Attribute exposed for management kafka.server:name=RequestHandlerAvgIdlePercent,type=KafkaRequestHandlerPool,attribute=OneMinuteRate
# TYPE kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent gauge
kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent NaN
"""

TS_MS = 1_795_000_000_000


class Exporter:
    """A local HTTP server answering /metrics with whatever the test sets."""

    def __init__(self):
        self.status, self.body = 200, EXPOSITION.encode()
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the http.server hook name
                self.send_response(exporter.status)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(exporter.body)))
                self.end_headers()
                self.wfile.write(exporter.body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/metrics"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def exporters():
    started = [Exporter(), Exporter()]
    yield started
    for e in started:
        e.close()


def closed_port_url() -> str:
    e = Exporter()
    url = e.url
    e.close()
    return url


def scraper(sources, sink, registry):
    return JmxScraper(sources, sink, AgentMetrics(registry, "jmx-scraper"),
                      clock=Clock(TS_MS / 1000), timeout_s=2)


def by_key(records):
    return {(r["metric"], r["request"], r["quantile"], r["topic"]): r for r in records}


def test_keeps_what_kmon_reads_and_names_each_label(exporters):
    sink, registry = RecordingSink(), CollectorRegistry()
    s = scraper([JmxSource("c", 1, exporters[0].url)], sink, registry)
    assert s.poll_once() == len(sink.records("broker_metrics")) > 0
    recs = by_key(sink.records("broker_metrics"))
    p99 = recs[("kafka_network_requestmetrics_totaltimems", "Produce", 0.99, None)]
    assert p99["value"] == 261.0 and p99["ts_ms"] == TS_MS and p99["labels"] == {}
    assert p99["record_id"] == ("c:1:1795000000000:kafka_network_requestmetrics_totaltimems:"
                                "quantile=0.99,request=Produce")
    # exporter 1.x's _count_total is stored as _count
    assert recs[("kafka_network_requestmetrics_remotetimems_count", "Produce", None, None)][
        "value"] == 34.0
    assert recs[("kafka_server_brokertopicmetrics_bytesinpersec_count", None, None,
                 "compacted")]["value"] == 754698.0
    assert ("kafka_server_brokertopicmetrics_bytesinpersec_count", None, None, None) in recs
    cleaner = recs[("kafka_log_logcleanermanager_uncleanable_bytes", None, None, None)]
    assert cleaner["labels"] == {"logdirectory": "/kmon/node-1/data"}
    assert ("kafka_log_logcleanermanager_time_since_last_run_ms", None, None, None) in recs
    # an idle request type keeps its count, not its all-zero quantiles
    assert ("kafka_network_requestmetrics_totaltimems_count", "Fetch", None, None) in recs
    assert not any(k[1] == "Fetch" and k[2] is not None for k in recs)
    assert {r["metric"] for r in recs.values()} <= set(broker_metrics.METRICS)
    skipped = lambda reason: registry.get_sample_value(  # noqa: E731
        "kmon_agent_skipped_records_total",
        {"agent": "jmx-scraper", "source": "c/1", "reason": reason})
    assert skipped("non_finite_value") == 1          # the NaN idle gauge
    assert skipped("not_kept") == 2                  # jvm_threads_current, the _mean
    assert skipped("empty_histogram") == 3
    assert sink.records("quarantine") == []
    s.close()


def test_a_broker_that_does_not_answer_is_counted_and_the_others_still_published(exporters):
    sink, registry = RecordingSink(), CollectorRegistry()
    exporters[1].status = 503
    sources = [JmxSource("c", 1, exporters[0].url), JmxSource("c", 2, exporters[1].url),
               JmxSource("c", 3, closed_port_url())]
    s = scraper(sources, sink, registry)
    s.poll_once()
    s.poll_once()
    assert {r["broker"] for r in sink.records("broker_metrics")} == {1}
    failures = lambda src: registry.get_sample_value(  # noqa: E731
        "kmon_agent_scrape_failures_total", {"agent": "jmx-scraper", "source": src})
    assert (failures("c/1"), failures("c/2"), failures("c/3")) == (None, 2, 2)
    assert sink.records("quarantine") == []
    s.close()


def test_exposition_that_does_not_parse_is_quarantined_whole(exporters):
    sink, registry = RecordingSink(), CollectorRegistry()
    unclosed_labels = 'kafka_network_requestmetrics_totaltimems{request="Produce" 1\n'
    exporters[0].body = (EXPOSITION + unclosed_labels).encode()
    s = scraper([JmxSource("c", 1, exporters[0].url)], sink, registry)
    assert s.poll_once() == 0
    [q] = sink.records("quarantine")
    assert (q["source"], q["reason"], q["broker"]) == ("jmx", "invalid_exposition", 1)
    assert q["record_id"] == "c:1:1795000000000:exposition" and q["origin"] == exporters[0].url
    assert q["raw"].startswith("# HELP jvm_threads_current")
    assert sink.records("broker_metrics") == []
    s.close()


def test_failed_flush_sends_the_same_records_again_with_the_next_round(exporters):
    sink, registry = RecordingSink(), CollectorRegistry()
    s = scraper([JmxSource("c", 1, exporters[0].url)], sink, registry)
    sink.fail_flushes = 1
    assert s.poll_once() == 0 and sink.durable == []
    n = s.poll_once()
    ids = [r["record_id"] for r in sink.records("broker_metrics")]
    assert n == len(ids) and len(set(ids)) == len(ids) // 2   # two rounds, same clock
    assert registry.get_sample_value("kmon_agent_flush_failures_total",
                                      {"agent": "jmx-scraper"}) == 1
    s.close()


def test_unflushed_records_are_bounded_and_the_overflow_counted(exporters):
    sink, registry = RecordingSink(), CollectorRegistry()
    s = JmxScraper([JmxSource("c", 1, exporters[0].url)], sink,
                   AgentMetrics(registry, "jmx-scraper"), clock=Clock(TS_MS / 1000),
                   max_unflushed_records=5)
    sink.fail_flushes = 2
    s.poll_once()
    s.poll_once()
    per_round = len(parse_exposition(EXPOSITION, cluster="c", broker=1, ts_ms=TS_MS).records)
    assert registry.get_sample_value("kmon_agent_dropped_records_total",
                                     {"agent": "jmx-scraper", "reason": "sink_unavailable"}) == \
        (per_round - 5) + per_round      # round 1 keeps 5; round 2 holds 5 + a round, keeps 5
    s.close()


@pytest.mark.parametrize("body,reason", [
    (b"", "empty_exposition"),
    (b"\xff\xfe metrics", "not_utf8"),
    (b"garbage here\n", "invalid_exposition"),
    (b'kafka_server_replicamanager_leadercount{b="1",b="2"} 1\n', "invalid_exposition"),
    # not a sample line, even among series kmon does not keep: the text is rejected whole
    (b'jvm_threads_current 12\njvm_threads_daemon{a="1" 3\n', "invalid_exposition"),
    (b'jvm_threads_current twelve\n', "invalid_exposition"),
])
def test_bad_exposition_text_is_malformed_with_a_reason(body, reason):
    bad = parse_exposition(body, cluster="c", broker=1, ts_ms=TS_MS)
    assert isinstance(bad, Malformed) and bad.reason == reason and bad.ts_ms == TS_MS


def test_lines_of_series_not_kept_are_left_out_before_parsing_and_counted():
    text, left_out = kept_lines(EXPOSITION)
    assert "jvm_threads_current" not in text and "_mean" not in text
    assert left_out == 2
    # What is left parses to the same records as the whole text would.
    whole = [s for fam in text_string_to_metric_families(EXPOSITION) for s in fam.samples]
    kept = [s for fam in text_string_to_metric_families(text) for s in fam.samples]
    assert {(s.name, tuple(sorted(s.labels.items()))) for s in whole} - \
        {(s.name, tuple(sorted(s.labels.items()))) for s in kept} == \
        {(s.name, tuple(sorted(s.labels.items()))) for s in whole
         if "jvm_" in s.name or s.name.endswith("_mean")}


def test_a_real_broker_answer_gives_the_same_records_as_parsing_every_line(monkeypatch):
    """A whole /metrics answer of a 4.3.1 broker (7,146 lines): the line filter changes
    how fast, not what."""
    body = gzip.decompress((Path(__file__).parent.parent / "fixtures" / "jmx" /
                            "kafka-4.3.1-broker-metrics.txt.gz").read_bytes()).decode()
    filtered = parse_exposition(body, cluster="c", broker=1, ts_ms=TS_MS)
    monkeypatch.setattr(jmx_scraper, "kept_lines", lambda text: (text, 0))
    whole = parse_exposition(body, cluster="c", broker=1, ts_ms=TS_MS)

    def rows(parsed):
        return sorted(json.dumps(r, sort_keys=True) for r in parsed.records)

    assert len(filtered.records) > 500
    assert rows(filtered) == rows(whole)
    assert filtered.skipped == whole.skipped


def test_request_metrics_of_request_types_not_kept_are_left_out():
    line = 'kafka_network_requestmetrics_totaltimems{{quantile="0.99",request="{}"}} 3.0'
    text, left_out = kept_lines("\n".join([line.format("DescribeAcls"), line.format("Produce")]))
    assert left_out == 1 and 'request="Produce"' in text and "DescribeAcls" not in text


def test_a_quantile_label_that_is_no_number_quarantines_only_that_sample():
    text = ('kafka_network_requestmetrics_totaltimems{quantile="p99",request="Produce"} 5.0\n'
            'kafka_network_requestmetrics_totaltimems{quantile="0.5",request="Produce"} 4.0\n')
    parsed = parse_exposition(text, cluster="c", broker=1, ts_ms=TS_MS)
    assert [m.reason for m in parsed.malformed] == ["bad_label:quantile"]
    assert [r["quantile"] for r in parsed.records] == [0.5]


def test_record_id_is_built_from_the_record_alone():
    [rec] = parse_exposition('kafka_log_logcleanermanager_uncleanable_bytes{logdirectory="/d"} 1\n',
                             cluster="c", broker=2, ts_ms=TS_MS).records
    assert record_id(rec) == (f"c:2:{TS_MS}:kafka_log_logcleanermanager_uncleanable_bytes:"
                              "logdirectory=/d")


def test_log_size_keeps_its_topic_and_partition():
    """kafka.log:type=Log,name=Size as the exporter rule names it: one series per replica."""
    text = ('# TYPE kafka_log_log_size gauge\n'
            'kafka_log_log_size{partition="13",topic="__consumer_offsets"} 5.24288E7\n')
    [rec] = parse_exposition(text, cluster="c", broker=2, ts_ms=TS_MS).records
    assert (rec["metric"], rec["topic"], rec["labels"], rec["value"]) == (
        "kafka_log_log_size", "__consumer_offsets", {"partition": "13"}, 52428800.0)
    assert record_id(rec) == f"c:2:{TS_MS}:kafka_log_log_size:partition=13,topic=__consumer_offsets"
