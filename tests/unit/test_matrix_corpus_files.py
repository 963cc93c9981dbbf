"""What a matrix recording keeps of a broker's log files (matrix/corpus.py stamped_lines)."""

from __future__ import annotations

import pytest

from ingest.log_time import stamp_to_ms
from matrix.corpus import stamped_lines

pytestmark = pytest.mark.unit


def test_lines_in_range_with_their_continuations_from_rolled_files_first(tmp_path):
    (tmp_path / "server.log.1").write_bytes(
        b"[2026-11-26 05:00:00,000] INFO old (kafka.Foo)\n"
        b"[2026-11-26 05:00:10,000] ERROR in range, rolled (kafka.Foo)\n"
        b"java.lang.IllegalStateException: boom\n"
        b"\tat kafka.Foo.bar(Foo.java:1)\n")
    (tmp_path / "server.log").write_bytes(
        b"[2026-11-26 05:00:20,000] INFO in range (kafka.Foo)\n"
        b"[2026-11-26 05:00:40,000] INFO too late (kafka.Foo)\n"
        b"\tcontinuation of the late one\n"
        b"[2026-11-26 05:00:25,000] INFO in range again, no newline (kafka.Foo)")
    start, end = stamp_to_ms("2026-11-26 05:00:05,000"), stamp_to_ms("2026-11-26 05:00:30,000")
    assert stamped_lines(tmp_path, "server.log", start, end) == [
        b"[2026-11-26 05:00:10,000] ERROR in range, rolled (kafka.Foo)\n",
        b"java.lang.IllegalStateException: boom\n",
        b"\tat kafka.Foo.bar(Foo.java:1)\n",
        b"[2026-11-26 05:00:20,000] INFO in range (kafka.Foo)\n",
        b"[2026-11-26 05:00:25,000] INFO in range again, no newline (kafka.Foo)\n"]


def test_a_missing_log_keeps_nothing(tmp_path):
    assert stamped_lines(tmp_path, "controller.log", 0, 2**62) == []


def test_rolled_files_are_read_oldest_first(tmp_path):
    for n, minute in ((2, "01"), (1, "02")):
        (tmp_path / f"kafka-request.log.{n}").write_bytes(
            f"[2026-11-26 05:{minute}:00,000] DEBUG Completed request:{{}}\n".encode())
    (tmp_path / "kafka-request.log").write_bytes(
        b"[2026-11-26 05:03:00,000] DEBUG Completed request:{}\n")
    got = stamped_lines(tmp_path, "kafka-request.log", 0, 2**62)
    assert [x[15:17] for x in got] == [b"01", b"02", b"03"]


# ---- what a recording keeps from before its range ----------------------------------------

LEADER = ("[{}] INFO [Broker id=1] Leader unclean-t-0 with topic id Some(v2CcNjHzQ-qHdPLiDA1chw) "
          "starts at leader epoch {} from offset 0 with partition epoch 0, high watermark 0, "
          "ISR [1,2], adding replicas [] and removing replicas [] . Previous leader None and "
          "previous leader epoch was -1. (state.change.logger)\n")
UNCLEAN = ("[{}] INFO [QuorumController id=1] UNCLEAN partition change for unclean-t-0 with "
           "topic ID v2CcNjHzQ-qHdPLiDA1chw: isr: [1] -> [2], leader: 1 -> 2, "
           "leaderRecoveryState: RECOVERED -> RECOVERING, leaderEpoch: 0 -> 1, "
           "partitionEpoch: 1 -> 2 (org.apache.kafka.controller.ReplicationControlManager)\n")
SHRINK = ("[{}] INFO [Partition orders-2 broker=1] Shrinking ISR from 2,3,1 to 1,2. Leader: "
          "(highWatermark: 399, endOffset: 441). Out of sync replicas: (brokerId: 3, endOffset: "
          "399, lastCaughtUpTimeMs: 1795343968926). (kafka.cluster.Partition)\n")


def test_history_keeps_only_the_leader_epoch_events_of_the_lookback(tmp_path):
    from matrix.corpus import history_events

    (tmp_path / "state-change.log").write_text(
        LEADER.format("2026-11-26 02:59:00,000", 1)       # before the lookback
        + LEADER.format("2026-11-26 04:00:00,000", 2)
        + SHRINK.format("2026-11-26 04:10:00,000")          # no epoch: left out
        + UNCLEAN.format("2026-11-26 04:20:00,000")
        + "\tan unstamped line continuing it\n"
        + LEADER.format("2026-11-26 05:00:00,000", 3))      # the range itself
    start = stamp_to_ms("2026-11-26 05:00:00,000")
    got = history_events(tmp_path, "state-change.log", start - 7200_000, start)
    assert got == [LEADER.format("2026-11-26 04:00:00,000", 2).encode(),
                   UNCLEAN.format("2026-11-26 04:20:00,000").encode(),
                   b"\tan unstamped line continuing it\n"]


def test_a_recording_puts_the_history_before_its_range_and_counts_it(tmp_path):
    import json
    import lzma

    from matrix.corpus import MANIFEST, record
    from matrix.truth import GroundTruth

    logs = tmp_path / "node-1"
    logs.mkdir()
    (logs / "state-change.log").write_text(
        LEADER.format("2026-11-26 04:00:00,000", 2) + SHRINK.format("2026-11-26 04:10:00,000")
        + SHRINK.format("2026-11-26 05:00:05,000") + LEADER.format("2026-11-26 05:00:06,000", 3))
    (logs / "kafka-request.log").write_text(
        "[2026-11-26 04:59:00,000] DEBUG Completed request:{} (kafka.request.logger)\n"
        "[2026-11-26 05:00:01,000] DEBUG Completed request:{} (kafka.request.logger)\n")
    landing = tmp_path / "landing"
    landing.mkdir()
    start, end = stamp_to_ms("2026-11-26 05:00:00,000"), stamp_to_ms("2026-11-26 05:05:00,000")
    truth = GroundTruth(scenario="s", fault_class="healthy", fault_ms=start + 1000)
    dest = record(landing, tmp_path / "rec", scenario="s", title="t", topology={},
                  truth=truth, start_ms=start, end_ms=end, topic_configs=[], overrides={},
                  meta={}, nodes=[(1, logs)], history_s=7200)
    kept = lzma.decompress((dest / "raw/node-1/state-change.log.xz").read_bytes()).decode()
    assert kept == (LEADER.format("2026-11-26 04:00:00,000", 2)
                    + SHRINK.format("2026-11-26 05:00:05,000")
                    + LEADER.format("2026-11-26 05:00:06,000", 3))
    # The request log keeps its range only.
    requests = lzma.decompress((dest / "raw/node-1/kafka-request.log.xz").read_bytes())
    assert requests.count(b"\n") == 1 and b"05:00:01" in requests
    manifest = json.loads((dest / MANIFEST).read_text())
    assert manifest["history_events"] == {"node-1/state-change.log": 1}
    assert manifest["history_s"] == 7200


def test_history_kinds_are_the_kinds_leader_epochs_are_read_from():
    from detectors.lost_range import EPOCH_KINDS
    from matrix.corpus import HISTORY_KINDS

    assert set(HISTORY_KINDS) == set(EPOCH_KINDS)


def test_a_replay_keeps_the_broker_metrics_a_detector_reads_and_refuses_the_others(tmp_path):
    import gzip
    import json

    from evaluation.inputs import DETECTOR_METRICS, UNCLEAN_METER
    from infra.lake_sql import LakeSql
    from evaluation.inputs.tables import FrozenLake, TimeRange, broker_metrics
    from matrix.corpus import copy_detector_metrics

    src = tmp_path / "recorded"
    src.mkdir()
    lines = [json.dumps({"metric": UNCLEAN_METER, "value": 1}),
             json.dumps({"metric": "kafka_network_requestmetrics_totaltimems", "value": 2}),
             '{"metric": "kafka_log_log_si']                    # torn: kept, quarantined live
    with gzip.open(src / "broker_metrics.jsonl.gz", "wt") as f:
        f.write("\n".join(lines) + "\n")
    dest = tmp_path / "landing" / "broker_metrics"
    assert copy_detector_metrics(src, dest) == 2
    with gzip.open(dest / "broker_metrics.jsonl.gz", "rt") as f:
        assert f.read().splitlines() == [lines[0], lines[2]]

    lake = FrozenLake(str(tmp_path / "lake"), metrics=DETECTOR_METRICS)
    with pytest.raises(ValueError, match="kafka_network_requestmetrics_totaltimems"):
        broker_metrics(LakeSql(lake), TimeRange(0, 1),
                       ["kafka_network_requestmetrics_totaltimems"])
