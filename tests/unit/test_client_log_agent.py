"""The client log agent publishes offset events, counts the other lines, quarantines bad ones."""

from __future__ import annotations

import os

import pytest
from prometheus_client import CollectorRegistry

from ingest.agent_metrics import AgentMetrics
from ingest.client_log_agent import ClientLogAgent, ClientLogSource
from ingest.file_tailer import PositionStore
from tests.unit.captured import fixture_lines
from tests.unit.test_tail_agent import Clock, RecordingSink, append, rotate

pytestmark = pytest.mark.unit

JAVA = fixture_lines("client_log/java-4.3.1.log")          # 4 offset events, 2 other lines
RDKAFKA = fixture_lines("client_log/librdkafka-2.16.log")  # every line an offset event


def text(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


class Harness:
    def __init__(self, tmp_path, sources=None):
        self.tmp = tmp_path
        self.java = tmp_path / "java-app.log"
        self.rdkafka = tmp_path / "rdkafka-app.log"
        self.sources = sources or [
            ClientLogSource("c", None, self.java),
            ClientLogSource("c", "rdkafka-app", self.rdkafka, group_id="billing",
                            client_software="librdkafka"),
        ]
        self.sink = RecordingSink()
        self.clock = Clock()
        self.agent = self.new_agent()

    def new_agent(self) -> ClientLogAgent:
        self.registry = CollectorRegistry()
        return ClientLogAgent(self.sources, self.sink, PositionStore(self.tmp / "pos.json"),
                              AgentMetrics(self.registry, "client-log-agent"), clock=self.clock)

    def events(self) -> list[dict]:
        return self.sink.records("client_offset_events")

    def skipped(self, path, reason: str) -> float | None:
        return self.registry.get_sample_value(
            "kmon_agent_skipped_records_total",
            {"agent": "client-log-agent", "source": f"c/{path}", "reason": reason})


def test_offset_events_are_published_and_the_other_lines_only_counted(tmp_path):
    h = Harness(tmp_path)
    append(h.java, text(JAVA) + "\n")
    h.agent.poll_once()
    assert [e["kind"] for e in h.events()] == ["offset_reset", "truncation_detected",
                                               "offset_out_of_range", "offset_reset"]
    assert h.events()[0]["client_id"] == "java-group-client"     # the line names it
    assert h.events()[0]["group_id"] == "java-group"
    assert h.skipped(h.java, "not_offset_event") == 2
    assert h.skipped(h.java, "empty_line") == 1
    assert h.sink.records("quarantine") == []
    inode = os.stat(h.java).st_ino
    assert h.events()[0]["record_id"] == f"c:-:{h.java}:{inode}:0"


def test_source_supplies_what_librdkafka_lines_do_not_say(tmp_path):
    h = Harness(tmp_path)
    append(h.rdkafka, text(RDKAFKA))
    h.agent.poll_once()
    events = h.events()
    assert len(events) == len(RDKAFKA)
    assert {e["group_id"] for e in events} == {"billing"}
    assert {e["client_software"] for e in events} == {"librdkafka"}
    # the handle name in the line wins over the source's client id
    assert events[0]["client_id"] == "rdkafka-retention-group-client"
    assert events[-1]["client_id"] == "rdkafka-app"
    assert events[-1]["kind"] == "truncation_detected"
    unstamped = [e for e in events if e["topic"] == "payments"]
    assert unstamped and {e["ts_ms"] for e in unstamped} == {int(h.clock.t * 1000)}


def test_malformed_lines_go_to_quarantine(tmp_path):
    h = Harness(tmp_path)
    not_utf8 = b"[2026-11-22 10:39:07,582] INFO caf\xe9 offset\n"
    append(h.java, not_utf8)
    append(h.java, "[2026-13-45 10:39:07,582] INFO [Consumer clientId=a, groupId=b] Resetting "
                   "offset for partition t-0 to offset 5.\n")
    h.agent.poll_once()
    quarantined = h.sink.records("quarantine")
    assert [q["reason"] for q in quarantined] == ["not_utf8", "bad_timestamp"]
    assert all(q["source"] == "client_log" and q["origin"] == str(h.java) for q in quarantined)
    inode = os.stat(h.java).st_ino
    assert quarantined[1]["record_id"] == f"c:-:{h.java}:{inode}:{len(not_utf8)}"
    assert h.events() == []


def test_restart_across_rotation_and_a_failed_flush_neither_loses_nor_repeats(tmp_path):
    h = Harness(tmp_path)
    append(h.java, text(JAVA[:2]))
    h.agent.poll_once()
    h.agent.close()
    append(h.java, text(JAVA[2:3]))
    rotate(h.java)
    append(h.java, text(JAVA[3:]))
    h.agent = h.new_agent()
    h.sink.fail_flushes = 1
    assert h.agent.poll_once() == 0
    h.agent.poll_once()
    ids = [e["record_id"] for e in h.events()]
    assert len(ids) == len(set(ids)) == 4
    assert [e["kind"] for e in h.events()] == ["offset_reset", "truncation_detected",
                                               "offset_out_of_range", "offset_reset"]
