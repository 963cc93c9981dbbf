"""The pure parts of the CPU-quota slow broker and the slow reader: the quota, the entity
regexes of the ground truth, the cgroup path of a pid, and the Fetch v4 bytes."""

from __future__ import annotations

import re
import struct

import pytest

from matrix.mechanisms.cpu_quota import CpuStarvedBroker, parse_cpu_cgroup, quota_us
from matrix.mechanisms.demo_faults import BROKER_OWN_CAUSES as BROKER_ITSELF
from matrix.mechanisms.demo_faults import other_brokers
from matrix.mechanisms.fetch_wire import fetch_request, next_offset, parse_fetch_response
from matrix.mechanisms.slow_client import SlowReader


def test_quota_is_a_share_of_one_period_with_the_kernel_floor():
    assert quota_us(0.05) == 5000
    assert quota_us(0.5, 200_000) == 100_000
    assert quota_us(0.001) == 1000
    with pytest.raises(ValueError):
        quota_us(0)


def test_other_brokers_regex_excludes_only_the_starved_one():
    rx = other_brokers(2)
    assert [b for b in ("broker:1", "broker:2", "broker:3", "broker:21", "broker:12")
            if re.fullmatch(rx, b)] == ["broker:1", "broker:3", "broker:21", "broker:12"]


def test_cpu_cgroup_from_proc_lines():
    assert parse_cpu_cgroup(["4:memory:/x", "1:cpu:/", "0::/"]) == "/"
    assert parse_cpu_cgroup(["3:cpu,cpuacct:/kmon-matrix-2"]) == "/kmon-matrix-2"
    assert parse_cpu_cgroup(["2:cpuacct:/a", "0::/"]) is None


def test_cpu_starved_broker_truth():
    f = CpuStarvedBroker(broker=3)
    (e,) = f.expect()
    assert e.matches({"type": "slow_broker", "entity": "broker:3", "cause": "slow_follower",
                      "severity": "critical"})
    assert not e.matches({"type": "cluster_wide_slowness", "entity": "broker:3",
                          "cause": "slow_follower", "severity": "critical"})
    victims, retried = f.explained()
    assert victims.matches({"type": "slow_broker", "entity": "broker:1",
                            "cause": "remote_produce_slow_follower", "severity": "warning"})
    assert not victims.matches({"type": "slow_broker", "entity": "broker:3",
                                "cause": "remote_produce_slow_follower", "severity": "warning"})
    # Its members' commits held by the starved follower, sent again, landing late: info.
    assert retried.matches({"type": "offset_rewind", "entity": "group:billing/orders-5",
                            "cause": "commit_reordered", "severity": "info"})
    assert not retried.matches({"type": "offset_rewind", "entity": "group:billing/orders-5",
                                "cause": "application_seek", "severity": "info"})
    assert not retried.matches({"type": "offset_rewind", "entity": "group:billing/orders-5",
                                "cause": "commit_reordered", "severity": "warning"})
    assert "remote_produce_slow_follower" not in BROKER_ITSELF
    assert f.runs_until_detected and f.fault_class == "slow_broker"
    assert f.group.name == "kmon-matrix-3"


def test_heal_without_inject_is_a_no_op(tmp_path):
    f = CpuStarvedBroker(broker=1, cpu_root=tmp_path)
    f.heal(ctx=None)
    f.heal(ctx=None)


def test_slow_reader_truth():
    f = SlowReader(client_id="slow-reader")
    (e,) = f.expect()
    assert e.matches({"type": "slow_client", "entity": "client:slow-reader",
                      "cause": "client_slow_read", "severity": "warning"})
    assert not e.matches({"type": "slow_broker", "entity": "broker:1",
                          "cause": "client_slow_read", "severity": "warning"})
    assert f.explained() == () and f.fault_class == "slow_client"


def test_fetch_request_bytes():
    req = fetch_request(7, "slow-reader", "slow-reads", 0, 42, max_wait_ms=100,
                        max_bytes=1 << 20, partition_max_bytes=1 << 20)
    (size,) = struct.unpack_from(">i", req)
    assert size == len(req) - 4
    api, version, corr, cid_len = struct.unpack_from(">hhih", req, 4)
    assert (api, version, corr) == (1, 4, 7)
    assert req[14:14 + cid_len] == b"slow-reader"
    body = req[14 + cid_len:]
    replica, wait, min_bytes, max_bytes, iso, topics, tlen = struct.unpack_from(">iiiibih", body)
    assert (replica, wait, min_bytes, max_bytes, iso, topics) == (-1, 100, 1, 1 << 20, 0, 1)
    rest = body[23:]
    assert rest[:tlen] == b"slow-reads"
    assert struct.unpack_from(">iiqi", rest, tlen) == (1, 0, 42, 1 << 20)
    assert len(rest) == tlen + 20


def batch(base: int, records: int, payload: int = 30) -> bytes:
    """A record batch header (magic 2) with `payload` bytes of body after it."""
    after_length = struct.pack(">ibIhi", 0, 2, 0, 0, records - 1) + b"\0" * payload
    return struct.pack(">qi", base, len(after_length)) + after_length


def test_next_offset_counts_whole_batches_only():
    whole = batch(10, 5) + batch(15, 3)
    assert next_offset(whole) == 18
    assert next_offset(whole + batch(18, 4)[:-5]) == 18   # the last batch cut short
    assert next_offset(b"") is None
    assert next_offset(batch(0, 2)[:20]) is None


def test_parse_fetch_response():
    records = batch(0, 4) + batch(4, 4)
    body = (struct.pack(">iii", 7, 0, 1) + struct.pack(">h", 10) + b"slow-reads"
            + struct.pack(">iihqqi", 1, 0, 0, 400, 400, -1) + struct.pack(">i", len(records))
            + records)
    got = parse_fetch_response(body)
    assert (got.correlation_id, got.error_code, got.high_watermark, got.records_bytes,
            got.next_offset) == (7, 0, 400, len(records), 8)
    empty = (struct.pack(">iii", 8, 0, 1) + struct.pack(">h", 1) + b"t"
             + struct.pack(">iihqqi", 1, 0, 6, -1, -1, 0) + struct.pack(">i", -1))
    got = parse_fetch_response(empty)
    assert (got.error_code, got.records_bytes, got.next_offset) == (6, 0, None)
