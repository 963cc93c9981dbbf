"""The broker log shipper keeps multi-line events whole and saves the start of a pending one."""

from __future__ import annotations

import os

import pytest
from prometheus_client import CollectorRegistry

from ingest.agent_metrics import AgentMetrics
from ingest.broker_log_agent import BrokerLogAgent, broker_log_sources
from ingest.file_tailer import PositionStore
from tests.unit.captured import fixture_lines
from tests.unit.test_tail_agent import Clock, RecordingSink, append, rotate

pytestmark = pytest.mark.unit

ISR = ("[2026-11-22 10:39:32,243] INFO [Partition orders-2 broker=1] Shrinking ISR from 2,3,1 "
       "to 1,2. Leader: (highWatermark: 399, endOffset: 441). (kafka.cluster.Partition)\n")
CLEANER_HEAD = "[2026-11-22 10:39:21,624] INFO [kafka-log-cleaner-thread-0]: \n"
CLEANER_BODY = ("\tLog cleaner thread 0 cleaned log compacted-keys-0 (dirty section = [0, 800])\n"
                "\t0.1 MB of log processed in 0.2 seconds (0.4 MB/sec).\n"
                "\tStart size: 0.1 MB (800 messages)\n"
                "\tEnd size: 0.0 MB (20 messages)\n"
                "\t97.4% size reduction (97.5% fewer messages)\n"
                " (org.apache.kafka.storage.internals.log.LogCleaner$CleanerThread)\n")
STARTING = ("[2026-11-22 10:39:30,000] INFO Starting the log cleaner "
            "(org.apache.kafka.storage.internals.log.LogCleaner)\n")


class Harness:
    """One broker's four logs in a temp folder, an agent over them, and a controllable clock."""

    def __init__(self, tmp_path):
        self.dir = tmp_path / "logs"
        self.dir.mkdir(exist_ok=True)
        self.tmp = tmp_path
        self.sink = RecordingSink()
        self.clock = Clock()
        self.registry = CollectorRegistry()
        self.agent = self.new_agent()

    def new_agent(self) -> BrokerLogAgent:
        self.registry = CollectorRegistry()
        return BrokerLogAgent(broker_log_sources("c", 1, self.dir), self.sink,
                              PositionStore(self.tmp / "pos.json"),
                              AgentMetrics(self.registry, "broker-log-agent"), clock=self.clock)

    def restart(self) -> None:
        self.agent.close()
        self.agent = self.new_agent()

    def file(self, log: str):
        return self.dir / {"server": "server.log", "controller": "controller.log",
                           "state-change": "state-change.log",
                           "log-cleaner": "log-cleaner.log"}[log]

    def events(self, kind: str | None = None) -> list[dict]:
        return [r for r in self.sink.records("log_events") if kind is None or r["kind"] == kind]

    def saved(self, log: str):
        return PositionStore(self.tmp / "pos.json").load().get(f"c/1/{log}")

    def ids(self) -> list[str]:
        return [r["record_id"] for r in self.sink.records("log_events")]


def test_one_line_events_are_published_with_their_log_and_record_id(tmp_path):
    h = Harness(tmp_path)
    append(h.file("server"), ISR + ISR)
    h.agent.poll_once()          # the second line completes the first; it is still pending
    [first] = h.events()
    inode = os.stat(h.file("server")).st_ino
    assert first["kind"] == "isr_shrink" and first["log"] == "server"
    assert first["record_id"] == f"c:1:server:{inode}:0"
    assert h.saved("server").offset == len(ISR)      # the start of the pending event
    h.clock.t += 2.5                                 # nothing follows: idle flush
    h.agent.poll_once()
    assert h.ids() == [f"c:1:server:{inode}:0", f"c:1:server:{inode}:{len(ISR)}"]
    assert h.saved("server").offset == 2 * len(ISR)


def test_cleaner_summary_is_one_event_published_after_the_idle_time(tmp_path):
    h = Harness(tmp_path)
    append(h.file("log-cleaner"), STARTING + CLEANER_HEAD + CLEANER_BODY)
    h.agent.poll_once()
    assert [e["kind"] for e in h.events()] == ["other"]
    h.clock.t += 1.0
    h.agent.poll_once()
    assert len(h.events()) == 1                      # not yet: it may still grow
    h.clock.t += 1.5
    h.agent.poll_once()
    [run] = h.events("cleaner_run")
    assert (run["topic"], run["partition"], run["dirty_end"], run["start_messages"]) == \
        ("compacted-keys", 0, 800, 800)
    assert run["logger"] == "org.apache.kafka.storage.internals.log.LogCleaner$CleanerThread"
    assert run["record_id"].endswith(f":log-cleaner:{os.stat(h.file('log-cleaner')).st_ino}:"
                                     f"{len(STARTING)}")


def test_restart_mid_event_reads_it_again_from_its_first_line_once(tmp_path):
    h = Harness(tmp_path)
    cleaner = h.file("log-cleaner")
    append(cleaner, STARTING + CLEANER_HEAD + CLEANER_BODY[:60])   # the broker is mid-write
    h.agent.poll_once()
    assert h.saved("log-cleaner").offset == len(STARTING)
    h.restart()                                                    # the agent dies here
    append(cleaner, CLEANER_BODY[60:] + STARTING)
    h.agent.poll_once()
    assert [e["kind"] for e in h.events()] == ["other", "cleaner_run"]
    assert "97.4% size reduction" in h.events("cleaner_run")[0]["message"]
    h.clock.t += 3
    h.agent.poll_once()
    assert len(h.ids()) == len(set(h.ids())) == 3


def test_rotation_mid_event_keeps_the_event_whole(tmp_path):
    h = Harness(tmp_path)
    cleaner = h.file("log-cleaner")
    append(cleaner, CLEANER_HEAD + CLEANER_BODY[:60])
    h.agent.poll_once()
    old_inode = os.stat(cleaner).st_ino
    append(cleaner, CLEANER_BODY[60:])       # the event ends, then log4j rolls the file
    rotate(cleaner)
    append(cleaner, STARTING)
    h.agent.poll_once()
    [run] = h.events("cleaner_run")
    assert run["record_id"] == f"c:1:log-cleaner:{old_inode}:0"
    assert run["end_messages"] == 20
    new = h.saved("log-cleaner")             # the new file's first event is pending
    assert (new.inode, new.offset) == (os.stat(cleaner).st_ino, 0)


def test_restart_after_rotation_resumes_in_the_rolled_file(tmp_path):
    h = Harness(tmp_path)
    cleaner = h.file("log-cleaner")
    append(cleaner, STARTING + CLEANER_HEAD + CLEANER_BODY[:60])
    h.agent.poll_once()
    h.restart()
    append(cleaner, CLEANER_BODY[60:])
    rotate(cleaner)
    append(cleaner, STARTING)
    h.agent.poll_once()
    h.clock.t += 3
    h.agent.poll_once()
    assert [e["kind"] for e in h.events()] == ["other", "cleaner_run", "other"]
    assert len(set(h.ids())) == 3


def test_failed_flush_rewinds_to_the_pending_event_and_loses_nothing(tmp_path):
    h = Harness(tmp_path)
    append(h.file("server"), ISR + ISR + ISR[:40])
    h.sink.fail_flushes = 1
    assert h.agent.poll_once() == 0
    assert h.sink.durable == [] and h.saved("server") is None
    append(h.file("server"), ISR[40:])
    h.agent.poll_once()
    h.clock.t += 3
    h.agent.poll_once()
    assert len(h.ids()) == len(set(h.ids())) == 3
    assert h.registry.get_sample_value("kmon_agent_flush_failures_total",
                                       {"agent": "broker-log-agent"}) == 1


def test_unparseable_lines_go_to_quarantine_with_their_reason(tmp_path):
    h = Harness(tmp_path)
    controller = h.file("controller")
    append(controller, "text before any stamped line\n")          # orphan lines
    append(controller, ISR)
    append(controller, b"[2026-11-22 10:39:33,000] INFO caf\xe9 (x)\n")   # not UTF-8
    append(controller, ISR)
    h.agent.poll_once()
    h.clock.t += 3
    h.agent.poll_once()
    quarantined = h.sink.records("quarantine")
    assert [q["reason"] for q in quarantined] == ["orphan_lines", "not_utf8"]
    inode = os.stat(controller).st_ino
    assert quarantined[0]["record_id"] == f"c:1:controller:{inode}:0"
    assert all(q["source"] == "broker_log" and q["broker"] == 1 for q in quarantined)
    assert [e["kind"] for e in h.events()] == ["isr_shrink", "isr_shrink"]
    assert h.registry.get_sample_value(
        "kmon_agent_records_total",
        {"agent": "broker-log-agent", "stream": "log_events", "outcome": "quarantined"}) == 2


def test_captured_kafka_logs_become_the_same_events_as_the_parser_makes(tmp_path):
    h = Harness(tmp_path)
    for log in ("server", "log-cleaner", "state-change", "controller"):
        lines = fixture_lines(f"broker_log/kafka-4.3.1-{log}.log")
        append(h.file(log), "".join(line + "\n" for line in lines))
    h.agent.poll_once()
    h.clock.t += 3
    h.agent.poll_once()
    kinds = {e["kind"] for e in h.events()}
    assert {"cleaner_run", "isr_shrink", "truncation", "leader_change",
            "unclean_election"} <= kinds
    stack = [e for e in h.events() if "java.io.IOException" in e["message"]]
    assert len(stack) == 1 and "\tat " in stack[0]["message"]
    assert h.sink.records("quarantine") == []
    assert len(h.ids()) == len(set(h.ids()))
