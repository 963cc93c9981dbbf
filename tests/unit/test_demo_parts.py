"""The demo's pure parts: which finding shows which fault, the tracker, the summary table."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from core.findings import ActionKind, AnomalyType, EntityKind, Finding, Severity, Status
from demo.faults.compaction_lag import (
    CompactionLag,
    cleaner_log_mark,
    cleaner_started_since,
    topic_config,
)
from demo.faults.offset_rewind import OffsetRewinds
from demo.faults.slow_broker import SlowBroker
from demo.faults.unclean_election import UncleanElection
from demo.lock import DemoLock
from demo.outcomes import FaultOutcome, FindingTracker, record_finding, refresh_findings
from demo.preflight import DemoError
from demo.summary import summary_table

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def finding(type_: str, entity: str, kind=EntityKind.BROKER, status=Status.OPEN, first=1_000,
            fid=None, cause="c") -> Finding:
    return Finding(finding_id=fid or f"{type_}:{entity}", cluster="local",
                   type=AnomalyType(type_), severity=Severity.WARNING, entity_kind=kind,
                   entity=entity, first_seen_ms=first, last_seen_ms=first, status=status,
                   evidence={}, cause=cause, explanation="because",
                   suggested_action=ActionKind.NONE)


@pytest.mark.parametrize("fault,f,part", [
    (SlowBroker(broker=2), finding("slow_broker", "broker:2"), "finding"),
    (SlowBroker(broker=2), finding("slow_broker", "broker:1"), None),
    (SlowBroker(broker=2), finding("cluster_wide_slowness", "cluster:local"), None),
    (OffsetRewinds(), finding("offset_rewind", "group:billing/orders-3"), "billing"),
    (OffsetRewinds(), finding("offset_rewind", "group:analytics/clicks-0"), "analytics"),
    (OffsetRewinds(), finding("offset_rewind", "group:other/clicks-0"), None),
    (OffsetRewinds(), finding("offset_reset", "group:billing/orders-3"), None),
    (CompactionLag(broker=3), finding("compaction_lag", "broker:3"), "finding"),
    (CompactionLag(broker=3), finding("compaction_lag", "broker:2"), None),
    (UncleanElection(), finding("unclean_election", "ledger-0"), "finding"),
    (UncleanElection(), finding("log_truncation", "ledger-0"), "truncation"),
    (UncleanElection(), finding("log_truncation", "orders-0"), None),
    (UncleanElection(), finding("offset_reset", "group:ledger-readers/ledger-0"), "readers"),
    (UncleanElection(), finding("offset_rewind", "group:ledger-readers/ledger-0"), "readers"),
    (UncleanElection(), finding("offset_rewind", "group:billing/orders-0"), None),
], ids=["frozen_broker_itself", "another_broker", "cluster_wide_is_not_blame",
        "operator_reset_group", "stale_process_group", "unrelated_group", "reset_not_rewind",
        "throttled_cleaner_behind", "another_brokers_cleaner", "election",
        "old_leader_truncation", "other_truncation", "readers_reset", "readers_rewind",
        "other_group"])
def test_which_finding_shows_which_fault(fault, f, part):
    assert fault.part_of(f) == part


def test_rewinds_need_both_groups():
    assert set(OffsetRewinds().parts) == {"billing", "analytics"}


def test_a_cleaner_restart_is_seen_only_after_the_mark(tmp_path):
    log = tmp_path / "log-cleaner.log"
    log.write_text("[t0] INFO Starting the log cleaner (org.apache.kafka...LogCleaner)\n"
                   "[t1] INFO Shutting down the log cleaner. (...)\n")
    mark = cleaner_log_mark(log)
    assert not cleaner_started_since(log, mark)        # the start before the mark is old
    with open(log, "a") as f:
        f.write("[t2] INFO [kafka-log-cleaner-thread-0]: Stopped (...)\n")
    assert not cleaner_started_since(log, mark)
    with open(log, "a") as f:
        f.write("[t3] INFO Starting the log cleaner (org.apache.kafka...LogCleaner)\n")
    assert cleaner_started_since(log, mark)


def test_a_rolled_cleaner_log_is_read_from_its_start(tmp_path):
    log = tmp_path / "log-cleaner.log"
    log.write_text("x" * 5000)
    mark = cleaner_log_mark(log)
    log.write_text("[t9] INFO Starting the log cleaner (...)\n")   # rolled: shorter now
    assert cleaner_started_since(log, mark)
    assert cleaner_log_mark(tmp_path / "none.log") == 0
    assert not cleaner_started_since(tmp_path / "none.log", 0)


def test_compacted_topic_promises_a_short_compaction_lag():
    conf = topic_config(5000)
    assert conf["cleanup.policy"] == "compact" and conf["max.compaction.lag.ms"] == "5000"


def test_tracker_prints_each_open_finding_once_and_keeps_its_latest_state():
    out, now = io.StringIO(), [10_000]
    t = FindingTracker(out, clock=lambda: now[0])
    t([finding("slow_broker", "broker:2")], 9_000)
    now[0] = 20_000
    t([finding("slow_broker", "broker:2", status=Status.RESOLVED),
       finding("compaction_lag", "broker:1", status=Status.RESOLVED)], 19_000)
    assert out.getvalue().count(">>") == 1 and "broker:2" in out.getvalue()
    (seen_at, f), = t.since(0)
    assert seen_at == 10_000 and f.status is Status.RESOLVED
    assert t.since(10_001) == [] and t.evaluations == 2


def test_tracker_keeps_every_state_a_finding_was_open_in():
    t = FindingTracker(io.StringIO())
    t([finding("slow_broker", "broker:2", cause="remote_wait")], 1)
    t([finding("slow_broker", "broker:2", cause="slow_follower")], 2)
    t([finding("slow_broker", "broker:2", cause="remote_wait")], 3)
    t([finding("slow_broker", "broker:2", cause="gone", status=Status.RESOLVED)], 4)
    assert t.states["slow_broker:broker:2"] == [("warning", "remote_wait"),
                                                ("warning", "slow_follower")]


def test_summary_table_shows_time_to_detect_and_misses():
    hit = FaultOutcome("slow_broker", "slow broker", started_ms=1_000, detected_ms=43_000,
                       findings=[(43_000, finding("slow_broker", "broker:2"))],
                       action="move_leadership (dry run)")
    miss = FaultOutcome("compaction_lag", "compaction lag", started_ms=50_000)
    table = summary_table([hit, miss])
    lines = table.splitlines()
    assert "| slow broker" in table and "42 s" in table and "slow_broker broker:2" in table
    assert "move_leadership (dry run)" in table
    row = next(line for line in lines if "compaction lag" in line)
    assert "| NO " in row and hit.time_to_detect_s == 42.0 and miss.time_to_detect_s is None
    assert len({len(line) for line in lines}) == 1
    assert hit.to_json()["findings"][0]["seen_after_s"] == 42.0


def test_a_busy_exporter_port_is_one_line_saying_what_to_do():
    import socket

    from demo.preflight import DemoError, check_port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        with pytest.raises(DemoError) as e:
            check_port(port)
    text = str(e.value)
    assert "\n" not in text and str(port) in text and "--exporter-port" in text
    check_port(0)   # 0: no exporter, nothing to check


def test_only_a_fatal_client_error_makes_the_workload_start_a_new_producer():
    from confluent_kafka import KafkaError, KafkaException

    from demo.workload import _is_fatal

    # Seen in a live demo: the idempotent orders producer, its brokers stopped mid-batch.
    assert _is_fatal(KafkaException(KafkaError(KafkaError._INCONSISTENT,
                                               "unable to guarantee consistency", fatal=True)))
    assert not _is_fatal(KafkaException(KafkaError(KafkaError._TRANSPORT)))   # retried
    assert not _is_fatal(KafkaException())


def test_workload_producers_are_not_idempotent_unless_asked():
    from demo.workload import ProducerSpec, producer_config

    # librdkafka's default; its idempotent producer spins a core while a replica freezes.
    plain = producer_config(ProducerSpec("orders-producer", "orders", 100, acks="all"), "b:9092")
    assert plain["acks"] == "all" and "enable.idempotence" not in plain
    asked = producer_config(ProducerSpec("p", "t", 1, acks="all", idempotent=True), "b:9092")
    assert asked["enable.idempotence"] is True
    with pytest.raises(ValueError, match="acks=all, got acks=1"):
        producer_config(ProducerSpec("p", "t", 1, acks="1", idempotent=True), "b:9092")


def test_workload_producers_linger_100_ms_and_refresh_metadata_as_librdkafka_does_unless_asked():
    from demo.workload import ProducerSpec, producer_config

    plain = producer_config(ProducerSpec("p", "t", 1), "b:9092")
    assert plain["linger.ms"] == 100 and "topic.metadata.refresh.interval.ms" not in plain
    asked = producer_config(ProducerSpec("p", "t", 1, linger_ms=0, metadata_refresh_ms=5000),
                            "b:9092")
    assert asked["linger.ms"] == 0 and asked["topic.metadata.refresh.interval.ms"] == 5000


class _Query:
    def __init__(self, name, seconds):
        self.name = name
        self.recentProgress = [{"durationMs": {"triggerExecution": s * 1000}} for s in seconds]


class _Monitor:
    def __init__(self, seconds, trigger=10.0):
        import types
        self.pipeline = types.SimpleNamespace(
            queries=[_Query("silver_slow", [90]), _Query("silver", seconds)],
            settings=types.SimpleNamespace(silver_trigger_s=trigger), check=lambda: None)


def _keeping_up(seconds, wait_s=0.0) -> str:
    import threading

    from demo.console import Progress
    from demo.warmup import wait_keeping_up
    out = io.StringIO()
    wait_keeping_up(_Monitor(seconds), wait_s, threading.Event(), Progress(1, out))
    return out.getvalue()


def test_faults_start_once_the_last_two_silver_batches_fit_their_trigger():
    text = _keeping_up([61, 19, 9])
    assert "keeps up" in text and "19 s and 9 s for a 10 s trigger" in text


def test_a_pipeline_still_behind_is_reported_and_the_demo_goes_on():
    text = _keeping_up([61, 21, 9])
    assert "still lags" in text and "21 s, 9 s" in text
    assert "keeps up" not in text


def test_a_pipeline_with_no_silver_batch_yet_is_not_keeping_up():
    assert "still lags" in _keeping_up([])


def test_the_action_column_shows_only_what_was_decided_about_the_faults_findings(tmp_path):
    """The decision store also returns every decision taken since a time (the queue's rate
    guards need them): the summary must not credit one fault with another's action."""
    import types

    from demo.actions import NOT_DECIDED, action_for
    from remediation.config import RemediationSection
    from remediation.decide import decide
    from remediation.stores import JsonLinesDecisionStore

    store = JsonLinesDecisionStore(tmp_path / "decisions.jsonl")
    slow = finding("slow_broker", "broker:2", first=5_000)
    rewind = finding("offset_rewind", "group:g/t-0", kind=EntityKind.PARTITION, first=6_000)
    config = RemediationSection(enabled_actions=["page_human"], dry_run=True)
    store.record(decide([rewind], [], config, 7_000, cluster_sizes={"local": 3}))
    monitor = types.SimpleNamespace(decisions=types.SimpleNamespace(decisions=store))
    outcome = FaultOutcome("slow_broker", "slow broker", 4_000)
    outcome.findings = [("finding", slow)]
    assert action_for(monitor, outcome) == NOT_DECIDED
    outcome.findings = [("finding", rewind)]
    assert action_for(monitor, outcome).startswith("none: ")   # its own decision, shown


def test_the_chain_does_not_count_in_the_time_to_detect_and_shows_its_latest_state():
    import dataclasses

    fault, o = UncleanElection(), FaultOutcome("unclean_election", "unclean", started_ms=0)
    rewind = finding("offset_rewind", "group:ledger-readers/ledger-0")
    election = finding("unclean_election", "ledger-0")
    truncation = finding("log_truncation", "ledger-0")
    record_finding(o, fault, 40_000, rewind)          # an effect may come first
    assert not o.detected
    record_finding(o, fault, 70_000, election)
    record_finding(o, fault, 95_000, truncation)
    record_finding(o, fault, 99_000, election)        # seen again: counted once
    assert o.time_to_detect_s == 70
    assert [f.entity for _, f in o.findings] == ["ledger-0"]
    assert [f.type.value for _, f in o.effects] == ["offset_rewind", "log_truncation"]
    assert summary_table([o]).count("unclean_election ledger-0") == 1

    later = dataclasses.replace(election, incident_id="inc1", evidence={"messages_lost": 730})
    refresh_findings(o, {election.finding_id: later})
    assert o.findings == [(70_000, later)]
    assert o.to_json()["findings"][0]["evidence"] == {"messages_lost": 730}
    assert [e["type"] for e in o.to_json()["effects"]] == ["offset_rewind", "log_truncation"]


def test_the_summary_waits_for_the_decision_of_a_fault_detected_last(tmp_path):
    import threading
    import types

    from demo.actions import NOT_DECIDED, fill_actions
    from remediation.config import RemediationSection
    from remediation.decide import decide
    from remediation.stores import JsonLinesDecisionStore

    store = JsonLinesDecisionStore(tmp_path / "decisions.jsonl")
    election = finding("unclean_election", "ledger-0", kind=EntityKind.PARTITION, first=5_000)
    outcome = FaultOutcome("unclean_election", "unclean", 4_000, detected_ms=6_000)
    outcome.findings = [(6_000, election)]
    monitor = types.SimpleNamespace(decisions=types.SimpleNamespace(decisions=store))
    config = RemediationSection(enabled_actions=["page_human"], dry_run=True)
    # The decision step records its decision while the summary waits.
    threading.Timer(0.5, lambda: store.record(
        decide([election], [], config, 7_000, cluster_sizes={"local": 3}))).start()
    fill_actions(monitor, [outcome], threading.Event(), wait_s=10)
    assert outcome.action != NOT_DECIDED
    undetected = FaultOutcome("slow_broker", "slow", 4_000)
    fill_actions(monitor, [undetected], threading.Event(), wait_s=10)   # nothing to wait for
    assert undetected.action == "-"


def test_an_open_finding_of_the_faults_kind_must_clear_before_the_fault():
    from demo.cause import already_showing

    lingering = finding("compaction_lag", "broker:3")
    other_broker = finding("compaction_lag", "broker:2")
    resolved = finding("compaction_lag", "broker:3", status=Status.RESOLVED)
    assert already_showing(CompactionLag(broker=3), [lingering, other_broker]) == [lingering]
    assert already_showing(CompactionLag(broker=3), [resolved, other_broker]) == []
    # The chain's effects do not hold a fault back, only what would show the fault itself.
    rewind = finding("offset_rewind", "group:ledger-readers/ledger-0")
    assert already_showing(UncleanElection(), [rewind]) == []


def test_the_demo_resolves_findings_after_a_minute_and_keeps_the_per_type_overrides():
    from demo.settings import demo_config
    from kmon.config import load_config

    c = demo_config(load_config(None))
    assert c.findings.resolve_after_s == 60.0
    assert c.findings.resolve_after_s_by_type["unclean_election"] == 3600.0


def test_a_second_demo_stops_at_start_naming_the_first(tmp_path):
    lock = tmp_path / "demo.lock"
    # The first demo: another process holding the lock.
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; sys.path.insert(0, sys.argv[2]); from demo.lock import DemoLock; "
         "from pathlib import Path; l = DemoLock(Path(sys.argv[1])).__enter__(); "
         "print('held', flush=True); sys.stdin.read()", str(lock), str(ROOT)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(DemoError, match=f"another kmon demo is running .*pid {holder.pid}"):
            with DemoLock(lock):
                pass
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)
    # Its process ended (a crash would do the same): the lock is free again.
    with DemoLock(lock):
        assert lock.read_text().strip() == str(os.getpid())
    with DemoLock(lock):          # released on exit: the same process can take it again
        pass


def test_summary_cells_wrap_between_words_and_never_cut_one():
    reason = ("none: broker 2 is slow (leader_replication_stage) as a follower; moving "
              "leadership would not shorten the waits of the leaders it replicates from")
    o = FaultOutcome("slow_broker", "slow broker (freezes in bursts)", started_ms=0,
                     detected_ms=32_000, findings=[(32_000, finding("slow_broker", "broker:2"))],
                     action=reason)
    table = summary_table([o], width=110)
    lines = table.splitlines()
    assert len({len(line) for line in lines}) == 1 and len(lines[0]) <= 110
    action_column = [line.split("|")[5].strip() for line in lines if line.startswith("|")][1:]
    assert " ".join(action_column).split() == reason.split()   # every word whole, in order
    assert re.search(r"\| slow broker[^|]*\| yes\s+\| 32 s ", table)


def test_summary_shows_each_finding_beside_its_one_action():
    billing = finding("offset_rewind", "group:billing/orders-3", kind=EntityKind.PARTITION)
    analytics = finding("offset_rewind", "group:analytics/clicks-0", kind=EntityKind.PARTITION)
    o = FaultOutcome("offset_rewind", "offset rewinds (operator reset, stale process)", 0,
                     detected_ms=20_000, findings=[(10_000, billing), (20_000, analytics)],
                     action="restore_group_offsets (dry run)\nnone: no action suggested")
    rows = [line for line in summary_table([o], width=160).splitlines() if "group:" in line]
    assert "group:billing/orders-3" in rows[0] and "restore_group_offsets" in rows[0]
    assert "group:analytics/clicks-0" in rows[1] and "none: no action suggested" in rows[1]


def test_one_action_per_finding_the_queued_one_else_the_first_reason():
    import types

    from demo.actions import NOT_DECIDED, one_action

    def decision(ms, reason, kind=None):
        action = types.SimpleNamespace(kind=ActionKind(kind)) if kind else None
        return types.SimpleNamespace(decided_ms=ms, reason=reason, action=action)

    assert one_action([]) == NOT_DECIDED
    later, first = decision(9, "the finding is resolved"), decision(5, "no action suggested")
    assert one_action([later, first]) == "none: no action suggested"
    assert one_action([first, decision(7, "", "page_human"), later]) == "page_human (dry run)"


def test_leader_and_isr_is_no_leader_while_the_metadata_lacks_the_partition():
    """A topic just created on a loaded cluster can come back from the metadata request
    with no partitions yet (a KeyError once failed a CI run): that is "no leader" (-1),
    which the callers' polls wait out."""
    from types import SimpleNamespace as NS

    from demo.faults.base import leader_and_isr

    def admin(topics):
        return NS(list_topics=lambda topic, timeout: NS(topics=topics))

    assert leader_and_isr(admin({}), "sessions") == (-1, [])
    assert leader_and_isr(admin({"sessions": NS(partitions={})}), "sessions") == (-1, [])
    part = NS(leader=2, isrs=[3, 1, 2])
    assert leader_and_isr(admin({"sessions": NS(partitions={0: part})}), "sessions") == (2, [1, 2, 3])
    assert leader_and_isr(admin({"sessions": NS(partitions={0: part})}), "sessions", 1) == (-1, [])


def test_a_topic_counts_as_served_once_every_partition_has_a_leader_and_a_timeout_is_not_yet():
    """create_topics waits on this: a metadata request that times out on a loaded broker
    means 'ask again', not an error that ends the wait."""
    from types import SimpleNamespace as NS

    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    from demo.workload import _topics_served

    class Admin:
        def __init__(self, *answers):
            self.answers = list(answers)

        def list_topics(self, timeout):
            a = self.answers.pop(0)
            if isinstance(a, Exception):
                raise a
            return a

    def md(**leaders):
        return NS(topics={t: NS(error=None, partitions={i: NS(leader=x) for i, x in enumerate(ls)})
                          for t, ls in leaders.items()})

    topics = [NewTopic("orders", 2, 1)]
    timeout = KafkaException(KafkaError(KafkaError._TIMED_OUT))
    assert not _topics_served(Admin(timeout), topics)
    assert not _topics_served(Admin(md(orders=[1, -1])), topics)
    assert not _topics_served(Admin(md(orders=[1])), topics)
    assert not _topics_served(Admin(md(clicks=[1, 2])), topics)
    assert _topics_served(Admin(md(orders=[1, 2])), topics)


def test_the_monitor_yields_the_cpu_to_every_thread_of_its_process_tree():
    """yield_cpu sets the niceness of a real process, its threads and its children (the
    Spark JVM's Python workers), and of nothing outside that tree."""
    import os
    import subprocess
    import sys

    from demo.runner import process_tree, yield_cpu

    code = ("import subprocess, sys, threading, time; "
            "threading.Thread(target=time.sleep, args=(30,), daemon=True).start(); "
            "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
            "print(c.pid, flush=True); time.sleep(30)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        assert {parent.pid, child} <= set(process_tree(parent.pid))
        assert os.getpid() not in process_tree(parent.pid)
        mine = os.getpriority(os.PRIO_PROCESS, 0)
        set_ = yield_cpu(parent.pid, niceness=mine + 3)
        assert set_ >= 3      # the parent's two threads and the child's one at least
        for pid in (parent.pid, child):
            for tid in os.listdir(f"/proc/{pid}/task"):
                assert os.getpriority(os.PRIO_PROCESS, int(tid)) == mine + 3
        assert os.getpriority(os.PRIO_PROCESS, 0) == mine
    finally:
        for pid in process_tree(parent.pid)[::-1]:
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        parent.wait()
