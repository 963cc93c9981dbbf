"""The pure parts of the compaction and unclean-election mechanisms: which segment is
corrupted and how, how the cleaner's verdict is read, which layouts may run the RF 3
election, and the ground truth each states."""

from __future__ import annotations

import struct
from types import SimpleNamespace

import pytest

from matrix.fault import PARTNERS_LOADED
from matrix.mechanisms.compaction import (
    BAD_LENGTH,
    CleanerStopped,
    GrowingCompactedPartition,
    closed_segments,
    corrupt_first_batch,
    marked_uncleanable,
)
from matrix.mechanisms.unclean import (
    UncleanElection,
    UncleanNoLoss,
    check_quorum_survives,
)

pytestmark = pytest.mark.unit

LINE = ("[2026-11-26 05:01:02,003] WARN [kafka-log-cleaner-thread-0]: Unexpected exception "
        "thrown when cleaning log Log(dir=/d/profiles-0, topicId=x, topic=profiles, "
        "partition=0). Marking its partition (profiles-0) as uncleanable "
        "(org.apache.kafka.storage.internals.log.LogCleaner)\n")


def test_closed_segments_leave_out_the_active_one(tmp_path):
    for base in (0, 120, 35):
        (tmp_path / f"{base:020d}.log").write_bytes(b"")
    (tmp_path / f"{0:020d}.index").write_bytes(b"")
    assert [p.name for p in closed_segments(tmp_path)] == [f"{0:020d}.log", f"{35:020d}.log"]


def test_corrupt_first_batch_rewrites_only_the_length(tmp_path):
    seg = tmp_path / "00000000000000000000.log"
    header = struct.pack(">qi", 0, 250) + b"rest-of-batch"
    seg.write_bytes(header)
    assert corrupt_first_batch(seg) == 250
    data = seg.read_bytes()
    assert struct.unpack(">qi", data[:12]) == (0, BAD_LENGTH) and data[12:] == b"rest-of-batch"


def test_marked_uncleanable_reads_past_the_mark_and_names_the_partition(tmp_path):
    log = tmp_path / "log-cleaner.log"
    assert not marked_uncleanable(log, 0, "profiles-0")          # no file yet
    log.write_text("old line\n")
    mark = log.stat().st_size
    log.write_text("old line\n" + LINE)
    assert marked_uncleanable(log, mark, "profiles-0")
    assert not marked_uncleanable(log, mark, "profiles-1")
    assert not marked_uncleanable(log, log.stat().st_size, "profiles-0")   # before the mark
    log.write_text(LINE)                                         # rolled: read whole
    assert marked_uncleanable(log, 10_000, "profiles-0")


def cluster(controllers):
    return SimpleNamespace(controller_ids=lambda: controllers)


def test_the_quorum_must_survive_the_stopped_brokers():
    check_quorum_survives(cluster([4]), {1, 3})           # dedicated controller
    check_quorum_survives(cluster([3, 4, 5]), {1, 3})     # one controller of three
    with pytest.raises(RuntimeError, match="quorum"):
        check_quorum_survives(cluster([3]), {1, 3})       # the demo's one controller
    with pytest.raises(RuntimeError, match="quorum"):
        check_quorum_survives(cluster([3, 4, 5]), {3, 4})


def test_ground_truth():
    c = CleanerStopped(broker=2)
    assert c.fault_class == "compaction" and c.parts == ("uncleanable partition",)
    (e,) = c.expect()
    assert e.matches({"type": "compaction_lag", "entity": "broker:2",
                      "cause": "uncleanable_partitions", "severity": "warning"})
    assert not e.names({"type": "compaction_lag", "entity": "broker:1"})

    (g,) = GrowingCompactedPartition(topic="sessions").expect()
    assert g.matches({"type": "compaction_lag", "entity": "sessions-0",
                      "cause": "compacted_key_space_growing", "severity": "warning"})

    u = UncleanElection(topic="ledger3", group="ledger3-readers")
    assert u.fault_class == "unclean_election"
    assert u.expect()[0].matches({"type": "unclean_election", "entity": "ledger3-0",
                                  "cause": "unclean_leader_election", "severity": "critical"})
    assert any(x.names({"type": "log_truncation", "entity": "ledger3-0"})
               for x in u.explained())
    assert any(x.names({"type": "offset_reset", "entity": "group:ledger3-readers/ledger3-0"})
               for x in u.explained())

    quiet = UncleanNoLoss(topic="ledger-quiet")
    (q,) = quiet.expect()
    assert [e.causes for e in quiet.explained()] == [("commit_reordered",),
                                                      PARTNERS_LOADED.causes]
    finding = {"type": "unclean_election", "entity": "ledger-quiet-0",
               "cause": "unclean_leader_election"}
    assert q.matches({**finding, "severity": "warning"})
    assert not q.matches({**finding, "severity": "critical"})
    # The demo's ledger on the same two brokers loses records when they stop (seen live):
    # its election is explained, but not one of a partition elsewhere.
    quiet.collateral = ["ledger-0"]
    assert any(x.names({"type": "unclean_election", "entity": "ledger-0",
                        "severity": "critical"}) for x in quiet.explained())
    assert any(x.names({"type": "offset_rewind", "entity": "group:ledger-readers/ledger-0"})
               for x in quiet.explained())
    assert not any(x.names({"type": "unclean_election", "entity": "ledger-10"})
                   for x in quiet.explained())
    assert not any(x.names(finding | {"severity": "critical"}) for x in quiet.explained())
    # The RF 3 election and the demo's RF 2 one list theirs the same way.
    u.collateral = ["orders-4"]
    assert any(x.names({"type": "log_truncation", "entity": "orders-4"}) for x in u.explained())
    assert not any(x.names({"type": "log_truncation", "entity": "orders-40"})
                   for x in u.explained())
    from matrix.mechanisms.demo_faults import LossyUncleanElection
    lossy = LossyUncleanElection()
    assert not any(x.names({"type": "log_truncation", "entity": "orders-4"})
                   for x in lossy.explained())
    lossy.collateral = ["orders-4"]
    assert any(x.names({"type": "offset_reset", "entity": "group:billing/orders-4"})
               for x in lossy.explained())
