"""The rewind mechanisms move a real cluster's committed offsets the way their ground
truth says: back for the member seek, the stale process, the operator reset and the
out-of-range reset from past the end; forward for the reset after delete_records; never
back across a coordinator crash. One cluster for the file; every mechanism is prepared
first so their producers fill the topics side by side."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from demo.faults.base import FaultContext, FaultRun, now_ms
from demo.workload import Workload
from matrix.mechanisms.rewind_clients import isr_full
from matrix.mechanisms.rewinds import (
    ApplicationSeekCommit, CoordinatorFailover, OperatorResetEmptyGroup, StaleProcessCommit)
from matrix.mechanisms.rewinds_out_of_range import AutoResetOutOfRange

RATE = 30.0


def committed_now(bootstrap, group, topic, partitions=3) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return {tp.partition: tp.offset for tp in
                c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)}
    finally:
        c.close()


@pytest.fixture(scope="module")
def mechanisms(kafka_cluster, tmp_path_factory):
    workload = Workload(kafka_cluster.bootstrap_servers, tmp_path_factory.mktemp("clients"))
    ctx = FaultContext(kafka_cluster, workload)
    ms = {"seek": ApplicationSeekCommit(back_messages=40, rate_per_s=RATE),
          "stale": StaleProcessCommit(stale_age_s=4, rate_per_s=RATE),
          "reset": OperatorResetEmptyGroup("shift", 20, rate_per_s=RATE),
          "oor_rewind": AutoResetOutOfRange("rewind", "earliest", rate_per_s=RATE),
          "oor_forward": AutoResetOutOfRange("forward", "earliest", rate_per_s=RATE),
          "coord": CoordinatorFailover(down_s=6, rate_per_s=RATE)}
    try:
        for m in ms.values():
            m.prepare(ctx)
        yield ctx, ms
    finally:
        for m in ms.values():
            m.heal(ctx)
        workload.stop()
        ctx.close()


def inject(ctx, m) -> FaultRun:
    run = FaultRun(m.name, now_ms())
    m.inject(ctx, run)
    print(m.name, run.fault_ms, run.notes)   # shown with -rA: the numbers of the run
    return run


def went_back(ctx, m, run):
    """Committed now (read at once: the member moves on within seconds) is below where the
    group was on every partition the mechanism moved."""
    now = committed_now(ctx.bootstrap, m.group, m.topic)
    offsets = run.notes["offsets"]
    assert offsets, run.notes
    for p, o in offsets.items():
        assert o["after"] < o["before"], run.notes
        assert now[int(p)] < o["before"], (now, run.notes)
    assert run.fault_ms and run.fault_ms >= run.started_ms


def test_application_seek_rewinds_a_stable_group(mechanisms):
    ctx, ms = mechanisms
    m = ms["seek"]
    run = inject(ctx, m)
    went_back(ctx, m, run)
    assert len(run.notes["offsets"]) == 3
    assert all(o["before"] - o["after"] == 40 for o in run.notes["offsets"].values())
    # One member before and after, same coordinator: no rebalance, no coordinator move.
    assert run.notes["members"] == [1, 1]
    assert run.notes["coordinator"][0] == run.notes["coordinator"][1]
    assert ctx.workload.consumer_log(m.group).exists()   # the client-log agent's file


def test_stale_process_commits_remembered_offsets(mechanisms):
    ctx, ms = mechanisms
    m = ms["stale"]
    run = inject(ctx, m)
    went_back(ctx, m, run)


def test_operator_shift_reset_of_an_empty_group(mechanisms):
    ctx, ms = mechanisms
    m = ms["reset"]
    run = inject(ctx, m)
    went_back(ctx, m, run)
    assert all(o["before"] - o["after"] == 20 for o in run.notes["offsets"].values())


def test_out_of_range_past_the_end_resets_back(mechanisms):
    ctx, ms = mechanisms
    m = ms["oor_rewind"]
    run = inject(ctx, m)
    for p, o in run.notes["offsets"].items():
        assert o["before"] == run.notes["placed"][int(p)] > run.notes["committed_before"][int(p)]
        # Back from past the end into the log: reset to offset 0, the member re-reads and
        # commits; by the time it is read it may have passed its old commit again.
        assert o["after"] < o["before"] - m.ahead // 2, run.notes
    log = ctx.workload.consumer_log(m.group).read_text()
    assert "Offset out of range" in log or "out of range" in log.lower(), log[-2000:]


def test_out_of_range_before_the_start_resets_forward(mechanisms):
    ctx, ms = mechanisms
    m = ms["oor_forward"]
    run = inject(ctx, m)
    now = committed_now(ctx.bootstrap, m.group, m.topic)
    for p, o in run.notes["offsets"].items():
        start = run.notes["log_start"][p]
        assert o["before"] < start <= o["after"], run.notes
        assert now[int(p)] >= start
    log = ctx.workload.consumer_log(m.group).read_text()
    assert "out of range" in log.lower(), log[-2000:]


def test_coordinator_crash_moves_no_offset_back(mechanisms):
    ctx, ms = mechanisms
    m = ms["coord"]
    samples: list[dict[int, int]] = []
    done = threading.Event()

    def sample():
        while not done.is_set():
            try:   # the chosen group's offsets (-1001 until it commits: left out below)
                samples.append(committed_now(ctx.bootstrap, m.group, m.topic))
            except Exception:  # noqa: BLE001 - the coordinator is down for a while
                pass
            time.sleep(0.5)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        run = inject(ctx, m)
    finally:
        done.set()
        t.join(15)
    assert "skipped" not in run.notes, run.notes
    killed, moved_to = run.notes["coordinator"]
    assert moved_to != killed, run.notes
    for p, o in run.notes["offsets"].items():
        assert o["after"] > o["before"] >= 0, run.notes
    ok = [s for s in samples if all(v >= 0 for v in s.values())]
    assert len(ok) > 10
    # No offset moves back for good. A dip undone within a few samples is allowed: while
    # the dead broker is still in the ISR, the coordinator's appends time out and the
    # client retries an older commit after a newer one (seen live; kmon reports it as
    # commit_reordered, info). Samples are 0.5 s apart: 20 of them are 10 s.
    for i, a in enumerate(ok):
        later = ok[i + 1:i + 21]
        for p in a:
            if later and any(b[p] < a[p] for b in later):
                assert any(b[p] >= a[p] for b in later), (p, a, later)
    first, last = ok[0], ok[-1]
    assert all(last[p] >= first[p] for p in first), (first, last)
    deadline = time.monotonic() + 120
    while not isr_full(ctx.admin()):
        assert time.monotonic() < deadline, "ISR not full two minutes after the restart"
        time.sleep(1)
