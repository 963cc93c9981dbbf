"""Warnings that repeat while a condition lasts are logged at its start and its end.

Seen in the demo's unclean-election fault: the partition-offsets agent logged one
LEADER_NOT_AVAILABLE line per partition at every poll for as long as the election took.
Each user of `ingest.repeated_condition.RepeatedCondition` is checked here with the
condition it logs: the metrics still count every occurrence.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException
from prometheus_client import CollectorRegistry

from ingest.agent_metrics import AgentMetrics
from ingest.partition_offsets_agent import PartitionOffsetsAgent
from tests.unit.test_tail_agent import Clock, RecordingSink

pytestmark = pytest.mark.unit


class LeaderlessAdmin:
    """Two partitions of `ledger`; partition 0 has no leader while `leaderless` is set."""

    def __init__(self):
        self.leaderless = True

    def list_topics(self, timeout):
        parts = {0: SimpleNamespace(leader=-1 if self.leaderless else 2),
                 1: SimpleNamespace(leader=3)}
        return SimpleNamespace(topics={"ledger": SimpleNamespace(error=None, partitions=parts)})

    def list_offsets(self, specs, request_timeout):
        def answer(tp):
            if tp.partition == 0 and self.leaderless:
                def fail(timeout):
                    raise KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE))
                return SimpleNamespace(result=fail)
            return SimpleNamespace(result=lambda timeout: SimpleNamespace(offset=7))
        return {tp: answer(tp) for tp in specs}


def warnings(caplog, logger: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == logger and r.levelno >= logging.WARNING]


def test_a_leaderless_partition_is_two_lines_however_many_polls_it_lasts(caplog):
    caplog.set_level(logging.INFO)
    sink, registry, admin = RecordingSink(), CollectorRegistry(), LeaderlessAdmin()
    agent = PartitionOffsetsAgent("c", {"bootstrap.servers": "unused:9092"}, sink,
                                  AgentMetrics(registry, "end-offsets"), clock=Clock(),
                                  include_all_topics=True)
    agent._admin = admin
    for _ in range(30):
        assert agent.poll_once() == 1          # partition 1 is published at every poll
    admin.leaderless = False
    assert agent.poll_once() == 2
    lines = warnings(caplog, "ingest.partition_offsets_agent")
    assert len(lines) == 2, lines
    assert lines[0].startswith("partition offsets agent c: ledger-0: ")
    assert "LEADER_NOT_AVAILABLE" in lines[0] and "logged once until it ends" in lines[0]
    assert "over after 60 times" in lines[1]    # both bounds, 30 polls
    assert registry.get_sample_value("kmon_agent_source_errors_total",
                                     {"agent": "end-offsets", "kind": "list_offsets"}) == 60


def test_a_sink_that_cannot_flush_is_two_lines(caplog):
    caplog.set_level(logging.INFO)
    sink, registry, admin = RecordingSink(), CollectorRegistry(), LeaderlessAdmin()
    admin.leaderless = False
    sink.fail_flushes = 5
    agent = PartitionOffsetsAgent("c", {"bootstrap.servers": "unused:9092"}, sink,
                                  AgentMetrics(registry, "end-offsets"), clock=Clock(),
                                  include_all_topics=True)
    agent._admin = admin
    assert [agent.poll_once() for _ in range(6)] == [0, 0, 0, 0, 0, 2]
    lines = warnings(caplog, "ingest.partition_offsets_agent")
    assert len(lines) == 2 and "over after 5 times" in lines[1], lines


def test_a_broker_whose_metrics_fail_is_two_lines_with_how_long(caplog):
    from ingest.jmx_scraper import JmxScraper, JmxSource
    from tests.unit.test_jmx_scraper import TS_MS, Exporter

    caplog.set_level(logging.INFO)
    exporter = Exporter()
    sink, registry = RecordingSink(), CollectorRegistry()
    scraper = JmxScraper([JmxSource("c", 2, exporter.url)], sink,
                         AgentMetrics(registry, "jmx-scraper"), clock=Clock(TS_MS / 1000),
                         timeout_s=2)
    try:
        exporter.status = 503
        for _ in range(5):
            assert scraper.poll_once() == 0
        exporter.status = 200
        assert scraper.poll_once() > 0
    finally:
        scraper.close()
        exporter.close()
    lines = warnings(caplog, "ingest.jmx_scraper")
    assert len(lines) == 2, lines
    assert "scraping http://127.0.0.1" in lines[0] and "over after 5 times" in lines[1]
    assert sum(sample.value for metric in registry.collect() for sample in metric.samples
               if sample.name == "kmon_agent_scrape_failures_total") == 5


def test_a_tail_agent_whose_sink_cannot_flush_is_two_lines(tmp_path, caplog):
    from tests.unit.test_tail_agent import append, request_agent

    caplog.set_level(logging.INFO)
    sink = RecordingSink()
    sink.fail_flushes = 3
    agent = request_agent(tmp_path, sink)
    for _ in range(4):
        append(tmp_path / "kafka-request.log", "not a request line\n")
        agent.poll_once()
    lines = warnings(caplog, "ingest.tail_agent")
    assert len(lines) == 2 and "over after 3 times" in lines[1], lines
