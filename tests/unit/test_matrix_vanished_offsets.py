"""Vanished offsets: what a group re-reads, when its offsets count as gone, and what a
correct monitor reports (a rewind of that group, not of another)."""

from __future__ import annotations

import pytest

from demo.faults.base import FaultRun
from matrix.mechanisms.vanished_offsets import (OffsetsDeleted, OffsetsExpired, read_twice,
                                                vanished)

pytestmark = pytest.mark.unit


def test_read_twice_counts_from_the_log_start_to_the_commit():
    assert read_twice({0: 120, 1: 80, 2: 0}, {0: 20, 1: 0, 2: 0}) == 100 + 80
    # a partition never committed (-1001) re-reads nothing it had read
    assert read_twice({0: -1001, 1: 50}, {0: 0, 1: 60}) == 0


def test_vanished_means_no_partition_has_a_commit():
    assert vanished({0: -1001, 1: -1001})
    assert not vanished({0: -1001, 1: 7})
    assert not vanished({})


@pytest.mark.parametrize("fault, cause", [(OffsetsDeleted(), "offsets_deleted"),
                                          (OffsetsExpired(), "offsets_expired")])
def test_a_rewind_of_the_group_is_expected_and_its_reset_explained(fault, cause):
    assert fault.fault_class == "rewind"
    [e] = fault.expect()
    group, topic = fault.group, fault.topic
    rewind = {"type": "offset_rewind", "entity": f"group:{group}/{topic}-2", "cause": cause,
              "severity": "high"}
    assert e.matches(rewind)
    assert e.matches({**rewind, "cause": "unknown"})
    # a committer that never committed is a wrong cause
    assert not e.matches({**rewind, "cause": "stale_process"})
    assert not e.names({**rewind, "entity": f"group:billing/{topic}-2"})
    truth = fault.truth(FaultRun(fault.name, 1_000, fault_ms=2_000), f"{fault.name}-3b")
    assert truth.explains({"type": "offset_reset", "entity": f"group:{group}/{topic}-0",
                           "cause": "reset_unknown_reason", "severity": "warning"})
    assert not truth.explains({"type": "offset_reset", "entity": "group:billing/orders-0",
                               "cause": "reset_unknown_reason", "severity": "warning"})


def test_only_an_admin_deletion_may_be_called_an_operator_reset():
    assert "operator_reset" in OffsetsDeleted.causes
    assert "operator_reset" not in OffsetsExpired.causes
